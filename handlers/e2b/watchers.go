package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/stockade-dev/stockade/handlers/e2b/proto/filesystem"
)

// The Python sync SDK's watch_dir polls instead of streaming:
// CreateWatcher starts a watch that outlives its request, GetWatcherEvents
// takes what it saw since the last call, RemoveWatcher ends it. A watcher
// is bound to the tenant and sandbox of the access token that made it
// (another sandbox's token finds no such watcher), holds at most
// maxWatcherEvents events (then one count of what it dropped), and ends
// with its folder or sandbox, on RemoveWatcher, or when nobody polled it
// for watcherIdle.
const (
	maxWatchers      = 16 // per sandbox
	maxWatcherEvents = 1000
	watcherIdle      = 5 * time.Minute
)

type pollWatcher struct {
	tenantID, sandboxID string
	cancel              context.CancelFunc

	mu      sync.Mutex
	events  []*filesystem.FilesystemEvent
	dropped int
	err     error // why the watch ended, once it did
	polled  time.Time
}

// pollWatchers are a server's live watchers by id.
type pollWatchers struct {
	mu   sync.Mutex
	byID map[string]*pollWatcher
}

// sweep ends the watchers nobody polled for watcherIdle.
func (p *pollWatchers) sweep(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, w := range p.byID {
		w.mu.Lock()
		idle := now.Sub(w.polled) > watcherIdle
		w.mu.Unlock()
		if idle {
			w.cancel()
			delete(p.byID, id)
		}
	}
}

func (p *pollWatchers) get(b binding, id string) (*pollWatcher, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.byID[id]
	if w == nil || w.tenantID != b.tenantID || w.sandboxID != b.sandboxID {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", id))
	}
	return w, nil
}

func (p *pollWatchers) remove(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := p.byID[id]; w != nil {
		w.cancel()
		delete(p.byID, id)
	}
}

func (f *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	b := bindingOf(ctx)
	if req.Msg.GetIncludeEntry() || req.Msg.GetAllowNetworkMounts() {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("includeEntry and allowNetworkMounts are not supported"))
	}
	p := &f.s.watchers
	p.sweep(f.s.now())
	p.mu.Lock()
	n := 0
	for _, w := range p.byID {
		if w.sandboxID == b.sandboxID {
			n++
		}
	}
	p.mu.Unlock()
	if n >= maxWatchers {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("at most %d watchers per sandbox: remove one first", maxWatchers))
	}
	// The watch outlives this request: it ends on RemoveWatcher, with its
	// folder or sandbox, or when nobody polls it.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := f.s.sbx.Watch(wctx, b.tenantID, b.sandboxID, inPath(req.Msg.GetPath()), req.Msg.GetRecursive())
	if err != nil {
		cancel()
		return nil, rpcErr(err)
	}
	var raw [16]byte
	rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	pw := &pollWatcher{tenantID: b.tenantID, sandboxID: b.sandboxID, polled: f.s.now(),
		cancel: func() { cancel(); w.Close() }}
	p.mu.Lock()
	if p.byID == nil {
		p.byID = map[string]*pollWatcher{}
	}
	p.byID[id] = pw
	p.mu.Unlock()
	go func() {
		for {
			evs, err := w.Next()
			pw.mu.Lock()
			if err != nil {
				pw.err = err
				pw.mu.Unlock()
				return
			}
			for _, ev := range evs {
				t, ok := eventTypes[ev.Type]
				if !ok || strings.HasPrefix(path.Base(ev.Name), uploadTempPrefix) {
					continue
				}
				if len(pw.events) >= maxWatcherEvents {
					pw.dropped++
					continue
				}
				pw.events = append(pw.events, &filesystem.FilesystemEvent{Name: strings.TrimPrefix(ev.Name, "/"), Type: t})
			}
			pw.mu.Unlock()
		}
	}()
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
}

func (f *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	b := bindingOf(ctx)
	f.s.watchers.sweep(f.s.now())
	w, err := f.s.watchers.get(b, req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	evs, dropped, ended := w.events, w.dropped, w.err
	w.events, w.dropped, w.polled = nil, 0, f.s.now()
	w.mu.Unlock()
	if len(evs) == 0 && ended != nil {
		// What it saw was taken; now say why it ended, once.
		f.s.watchers.remove(req.Msg.GetWatcherId())
		if errors.Is(ended, io.EOF) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q ended", req.Msg.GetWatcherId()))
		}
		return nil, rpcErr(ended)
	}
	if dropped > 0 {
		f.s.log.Warn("e2b watcher dropped events", "sandbox", b.sandboxID, "dropped", dropped)
	}
	return connect.NewResponse(&filesystem.GetWatcherEventsResponse{Events: evs}), nil
}

func (f *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	b := bindingOf(ctx)
	if _, err := f.s.watchers.get(b, req.Msg.GetWatcherId()); err != nil {
		return nil, err
	}
	f.s.watchers.remove(req.Msg.GetWatcherId())
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}
