package hypervisor

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"libvirt.org/go/libvirt"
)

// Kind is what happened to a domain (or to the connection, for the two
// host-level kinds whose Event has no ID).
type Kind string

const (
	KindDefined   Kind = "defined"
	KindStarted   Kind = "started"
	KindSuspended Kind = "suspended"
	KindResumed   Kind = "resumed"
	KindShutdown  Kind = "shutdown" // the guest began or finished a shutdown
	KindStopped   Kind = "stopped"  // shut off on purpose: destroyed, shut down, saved
	KindCrashed   Kind = "crashed"  // QEMU died or the guest panicked
	KindUndefined Kind = "undefined"

	// Host-level: the connection was lost, or re-established. Events in
	// between were missed; a consumer reconciles after KindReconnected.
	KindDisconnected Kind = "disconnected"
	KindReconnected  Kind = "reconnected"
)

// Event is a lifecycle change of one of our domains.
type Event struct {
	ID       string // VM id; empty for host-level kinds
	TenantID string
	Kind     Kind
	Reason   string // libvirt's detail, e.g. "booted", "destroyed", "failed"
	At       time.Time
}

// maxPending bounds the events queued for a consumer that does not read.
const maxPending = 4096

type rawEvent struct {
	name   string
	event  libvirt.DomainEventType
	detail int
	at     time.Time
	host   *Event // set for host-level events, which need no resolving
}

// eventQueue takes events from libvirt's event loop without ever blocking it
// and hands them, in order, to the goroutine that resolves and delivers them.
type eventQueue struct {
	log     *slog.Logger
	mu      sync.Mutex
	pending []rawEvent
	dropped int
	wake    chan struct{}
	out     chan Event
}

func newEventQueue(log *slog.Logger) *eventQueue {
	return &eventQueue{log: log, wake: make(chan struct{}, 1), out: make(chan Event, 64)}
}

func (q *eventQueue) raw(e rawEvent) {
	q.mu.Lock()
	if len(q.pending) >= maxPending {
		q.dropped++
		if q.dropped == 1 || q.dropped%100 == 0 {
			q.log.Warn("hypervisor events dropped: nobody reads Host.Events", "dropped", q.dropped)
		}
		q.mu.Unlock()
		return
	}
	q.pending = append(q.pending, e)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *eventQueue) host(e Event) { q.raw(rawEvent{host: &e, at: e.At}) }

func (q *eventQueue) take() []rawEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.pending
	q.pending = nil
	return p
}

// Events delivers lifecycle events of this installation's domains, plus
// KindDisconnected/KindReconnected for the connection. The channel is closed
// by Close. Events queue (up to a bound) while nobody reads.
func (h *Host) Events() <-chan Event { return h.events.out }

// deliver runs until the Host is closed.
func (h *Host) deliver(ctx context.Context) {
	defer h.wg.Done()
	defer close(h.events.out)
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.events.wake:
		}
		for _, r := range h.events.take() {
			ev, ok := h.resolve(ctx, r)
			if !ok {
				continue
			}
			select {
			case h.events.out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}
}

// resolve turns a raw libvirt event into ours, or drops it when the domain
// does not belong to this installation.
func (h *Host) resolve(ctx context.Context, r rawEvent) (Event, bool) {
	if r.host != nil {
		return *r.host, true
	}
	if _, ok := idFromName(r.name); !ok {
		return Event{}, false
	}
	kind, reason := describe(r.event, r.detail)

	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var (
		id     identity
		exists bool
	)
	// Read the metadata when the domain still exists: a name can be reused,
	// so the live record beats the cache.
	if got, err := h.identityOf(ctx, r.name); err == nil {
		id, exists = got, true
		h.known.put(r.name, got)
	} else if cached, ok := h.known.get(r.name); ok {
		id = cached
	} else {
		return Event{}, false
	}
	switch kind {
	case KindStopped, KindCrashed, KindUndefined:
		if !exists || kind == KindUndefined {
			h.known.gone(r.name, r.at)
		}
	}
	if id.InstallationID != h.cfg.InstallationID {
		return Event{}, false
	}
	return Event{ID: id.ID, TenantID: id.TenantID, Kind: kind, Reason: reason, At: r.at}, true
}

// identityOf reads a domain's metadata by name.
func (h *Host) identityOf(ctx context.Context, name string) (identity, error) {
	s, release, err := h.acquire(ctx)
	if err != nil {
		return identity{}, err
	}
	defer release()
	dom, err := s.conn.LookupDomainByName(name)
	if err != nil {
		return identity{}, h.fail(err)
	}
	defer dom.Free()
	return readIdentity(dom)
}

func readIdentity(dom *libvirt.Domain) (identity, error) {
	flags := libvirt.DOMAIN_AFFECT_CURRENT
	meta, err := dom.GetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, MetadataNamespace, flags)
	if err != nil {
		return identity{}, fmt.Errorf("read metadata: %w", classify(err))
	}
	return parseMetadata(meta)
}

func describe(ev libvirt.DomainEventType, detail int) (Kind, string) {
	switch ev {
	case libvirt.DOMAIN_EVENT_DEFINED:
		return KindDefined, pick(detail, "added", "updated", "renamed", "from_snapshot")
	case libvirt.DOMAIN_EVENT_UNDEFINED:
		return KindUndefined, pick(detail, "removed", "renamed")
	case libvirt.DOMAIN_EVENT_STARTED:
		return KindStarted, pick(detail, "booted", "migrated", "restored", "from_snapshot", "wakeup")
	case libvirt.DOMAIN_EVENT_SUSPENDED:
		return KindSuspended, pick(detail, "paused", "migrated", "ioerror", "watchdog", "restored",
			"from_snapshot", "api_error", "postcopy", "postcopy_failed")
	case libvirt.DOMAIN_EVENT_RESUMED:
		return KindResumed, pick(detail, "unpaused", "migrated", "from_snapshot", "postcopy", "postcopy_failed")
	case libvirt.DOMAIN_EVENT_SHUTDOWN:
		return KindShutdown, pick(detail, "finished", "guest", "host")
	case libvirt.DOMAIN_EVENT_STOPPED:
		reason := pick(detail, "shutdown", "destroyed", "crashed", "migrated", "saved", "failed", "from_snapshot")
		switch libvirt.DomainEventStoppedDetailType(detail) {
		case libvirt.DOMAIN_EVENT_STOPPED_CRASHED, libvirt.DOMAIN_EVENT_STOPPED_FAILED:
			return KindCrashed, reason
		}
		return KindStopped, reason
	case libvirt.DOMAIN_EVENT_CRASHED:
		return KindCrashed, pick(detail, "panicked", "crashloaded")
	case libvirt.DOMAIN_EVENT_PMSUSPENDED:
		return KindSuspended, pick(detail, "memory", "disk")
	}
	return Kind(fmt.Sprintf("event-%d", ev)), fmt.Sprintf("detail-%d", detail)
}

func pick(i int, names ...string) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("detail-%d", i)
}

// identityCache remembers who a domain belonged to, because once a transient
// domain has stopped its metadata can no longer be read. Entries of domains
// that are gone linger a while: one end can bring several events (crashed,
// then stopped) that are resolved after the domain has vanished.
type identityCache struct {
	mu sync.Mutex
	m  map[string]cachedIdentity
}

type cachedIdentity struct {
	identity
	goneAt time.Time // zero while the domain exists
}

// goneTTL is how long a vanished domain's identity is kept: long enough for a
// control plane to react to a crash with Destroy, which then still knows the
// domain was ours and removes its log.
const goneTTL = time.Hour

func newIdentityCache() *identityCache { return &identityCache{m: map[string]cachedIdentity{}} }

func (c *identityCache) put(name string, id identity) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for n, e := range c.m {
		if !e.goneAt.IsZero() && now.Sub(e.goneAt) > goneTTL {
			delete(c.m, n)
		}
	}
	c.m[name] = cachedIdentity{identity: id}
}

func (c *identityCache) get(name string) (identity, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[name]
	return e.identity, ok
}

// gone marks the domain as vanished; its identity expires after goneTTL.
func (c *identityCache) gone(name string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[name]; ok && e.goneAt.IsZero() {
		e.goneAt = at
		c.m[name] = e
	}
}

// forget drops the identity at once (a create that failed).
func (c *identityCache) forget(name string) {
	c.mu.Lock()
	delete(c.m, name)
	c.mu.Unlock()
}
