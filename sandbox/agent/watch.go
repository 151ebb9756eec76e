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
	rate := agentproto.NewWatchRate(time.Now())
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
			if ov, ok := rate.Roll(now); ok && !send([]agentproto.FsEvent{ov}) {
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
			out := rate.Admit(time.Now(), b.evs)
			if len(out) > 0 && !send(out) {
				return
			}
		}
	}
}
