package agent

import (
	"encoding/json"
	"fmt"
	"net"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// relayWatch forwards fs.watch's events from init to the host, checked and
// bounded: at most MaxWatchBatch per frame and MaxWatchRate per second
// (the rest are dropped and counted in one overflow event). It ends when
// the host closes the stream (init's connection is closed, which ends its
// watch) or init ends it (the folder went, the sandbox stopped).
func (m *Manager) relayWatch(st net.Conn, c *net.UnixConn, top string, first fsReply) {
	if err := agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version}); err != nil {
		return
	}
	// Whatever the host sends is ignored; its closing the stream ends it.
	hostGone := make(chan struct{})
	go func() {
		defer close(hostGone)
		for {
			if _, err := agentproto.ReadFrame(st); err != nil {
				return
			}
		}
	}()
	type batch struct {
		evs []agentproto.FsEvent
		err error
	}
	// A small queue: a host that does not read holds init, whose kernel
	// queue then overflows (and says so) instead of the agent's memory.
	in := make(chan batch, 4)
	go func() {
		defer close(in)
		for {
			var rep fsReply
			err := recvFsReply(c, &rep)
			if err != nil {
				in <- batch{err: err}
				return
			}
			in <- batch{evs: rep.Events}
		}
	}()
	defer func() {
		c.Close()
		for range in {
		}
	}()
	rate := newWatchRate(time.Now())
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	send := func(evs []agentproto.FsEvent) bool {
		for len(evs) > 0 {
			k := min(len(evs), agentproto.MaxWatchBatch)
			b, _ := json.Marshal(agentproto.FsEventBatch{Events: evs[:k]})
			if err := agentproto.WriteFrame(st, agentproto.ChannelData, b); err != nil {
				return false
			}
			evs = evs[k:]
		}
		return true
	}
	for {
		select {
		case <-hostGone:
			return
		case now := <-tick.C:
			if ov, ok := rate.roll(now); ok && !send([]agentproto.FsEvent{ov}) {
				return
			}
		case b, ok := <-in:
			if !ok {
				return
			}
			if b.err != nil {
				writeErrorFrame(st, fmt.Errorf("fs.watch %s: %w", top, b.err))
				return
			}
			out := rate.admit(time.Now(), b.evs)
			if len(out) > 0 && !send(out) {
				return
			}
		}
	}
}

// watchRate bounds the events forwarded per second.
type watchRate struct {
	start   time.Time
	n       int
	dropped int
}

func newWatchRate(now time.Time) *watchRate { return &watchRate{start: now} }

// roll starts a new second when one passed and returns the overflow event
// for what the last one dropped, if it dropped any.
func (r *watchRate) roll(now time.Time) (agentproto.FsEvent, bool) {
	if now.Sub(r.start) < time.Second {
		return agentproto.FsEvent{}, false
	}
	r.start, r.n = now, 0
	if r.dropped == 0 {
		return agentproto.FsEvent{}, false
	}
	ev := agentproto.FsEvent{Type: agentproto.FsEventOverflow, Dropped: r.dropped}
	r.dropped = 0
	return ev, true
}

// admit returns the events of evs that are well formed and within the
// rate; the others are dropped (counted for the next overflow event).
// Overflow events from init are counted, not forwarded, so the host gets
// at most one per second.
func (r *watchRate) admit(now time.Time, evs []agentproto.FsEvent) []agentproto.FsEvent {
	var out []agentproto.FsEvent
	if ov, ok := r.roll(now); ok {
		out = append(out, ov)
	}
	for _, ev := range evs {
		switch {
		case agentproto.CheckFsEvent(ev) != nil:
			// Malformed (or a name that is not text): dropped.
		case ev.Type == agentproto.FsEventOverflow:
			r.dropped += max(ev.Dropped, 1)
		case r.n >= agentproto.MaxWatchRate:
			r.dropped++
		default:
			r.n++
			out = append(out, agentproto.FsEvent{Name: ev.Name, Type: ev.Type})
		}
	}
	return out
}
