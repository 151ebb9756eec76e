// Package hypervisor is the libvirt driver: it defines, starts, lists and
// destroys the VMs of one Stockade installation on one libvirt host, opens
// their agent channels and reports their lifecycle events. It touches only
// domains whose metadata carries its own installation id.
package hypervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"time"

	"libvirt.org/go/libvirt"
)

// DefaultURI is the local system libvirtd.
const DefaultURI = "qemu:///system"

// Config says which libvirt host to drive and as which installation.
type Config struct {
	URI            string       // DefaultURI when empty
	Logger         *slog.Logger // slog.Default() when nil
	InstallationID string       // required: scopes every list and destroy

	// DomainType forces TypeQEMU or TypeKVM; empty detects it once.
	DomainType string
	// ProbeKernel is an uncompressed guest kernel on the libvirt host, booted
	// once under KVM to prove KVM really runs our guests. Without it KVM is
	// never assumed and detection answers TypeQEMU.
	ProbeKernel string
	// ProbeKernelSHA256, when set, says ProbeKernel is a file of this
	// process, not of the host: it is uploaded to the host's storage pool
	// (EnsureVolume) before the probe boots it.
	ProbeKernelSHA256 string
	// ProbeTimeout bounds that boot; 20 s when zero.
	ProbeTimeout time.Duration

	// Keepalive: libvirt pings every KeepaliveInterval and drops the
	// connection after KeepaliveCount missed answers. 5 s and 3 when zero.
	KeepaliveInterval time.Duration
	KeepaliveCount    uint
	// Reconnect backoff bounds; 100 ms and 5 s when zero.
	ReconnectMin, ReconnectMax time.Duration

	// QEMULogDir is where libvirt writes each domain's QEMU log
	// (<name>.log), which Destroy removes. Only reachable for a local
	// libvirtd: defaults to /var/log/libvirt/qemu for qemu:///system and
	// to "" (leave logs alone) for any other URI.
	QEMULogDir string

	// ChannelStream: reach VM channels through libvirt's stream API even
	// on a local URI, where OpenChannel connects to QEMU's chardev socket
	// directly by default (channel_direct.go; STOCKADE_CHANNEL_DIRECT=false).
	// Remote URIs always use the stream.
	ChannelStream bool

	// PoolDir is the folder on the host of the installation's storage pool
	// (storage.go); DefaultPoolDir(InstallationID) when empty.
	PoolDir string
}

func (c *Config) checkAndSetDefaults() error {
	if c.URI == "" {
		c.URI = DefaultURI
	}
	if c.QEMULogDir == "" && c.URI == DefaultURI {
		c.QEMULogDir = "/var/log/libvirt/qemu"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if !validID.MatchString(c.InstallationID) {
		return fmt.Errorf("%w: installation id %q must be 1-63 of [A-Za-z0-9._-]", ErrInvalid, c.InstallationID)
	}
	if c.PoolDir == "" {
		c.PoolDir = DefaultPoolDir(c.InstallationID)
	}
	if !filepath.IsAbs(c.PoolDir) {
		return fmt.Errorf("%w: pool folder %q is not an absolute path", ErrInvalid, c.PoolDir)
	}
	if c.DomainType != "" && c.DomainType != TypeQEMU && c.DomainType != TypeKVM {
		return fmt.Errorf("%w: domain type %q", ErrInvalid, c.DomainType)
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = 20 * time.Second
	}
	if c.KeepaliveInterval == 0 {
		c.KeepaliveInterval = 5 * time.Second
	}
	if c.KeepaliveCount == 0 {
		c.KeepaliveCount = 3
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = 100 * time.Millisecond
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = 5 * time.Second
	}
	return nil
}

// eventLoop registers libvirt's default event loop and runs it for the rest
// of the process. It must happen before the first connection is opened, or
// events, keepalives and stream callbacks never fire.
var eventLoop = sync.OnceValue(func() error {
	if err := libvirt.EventRegisterDefaultImpl(); err != nil {
		return fmt.Errorf("register libvirt event loop: %w", err)
	}
	go func() {
		for {
			if err := libvirt.EventRunDefaultImpl(); err != nil {
				slog.Error("libvirt event loop", "err", err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return nil
})

// Host is one libvirt connection, kept alive across libvirtd restarts.
// It is safe for concurrent use.
type Host struct {
	cfg Config
	log *slog.Logger

	// stop ends the background work's context (passed to it, not kept
	// here); closed says Close ran. Both under mu.
	stop   context.CancelFunc
	closed bool

	mu   sync.Mutex
	sess *session      // nil while disconnected
	kick chan struct{} // asks the supervisor to check the connection

	events *eventQueue
	known  *identityCache
	store  *storage

	typeMu  sync.Mutex
	domType string

	// verified: snapshot path -> the fileStamp at which its bytes hashed
	// to the sum (snapshot.go), so a restore hashes a file only once.
	verified sync.Map

	wg sync.WaitGroup
}

// session is one open libvirt connection and what was registered on it.
// Users hold it through acquire/release so a reconnect closes it only
// after the last call on it has returned.
type session struct {
	conn      *libvirt.Connect
	lifecycle int // event callback id, -1 if none
	users     sync.WaitGroup
	lost      chan struct{} // closed by the close callback
	lostOnce  sync.Once
}

func (s *session) markLost() { s.lostOnce.Do(func() { close(s.lost) }) }

// Connect opens the libvirt connection once to check that it works; an
// unreachable libvirtd is an error wrapping ErrUnavailable.
func Connect(ctx context.Context, cfg Config) (*Host, error) {
	if err := cfg.checkAndSetDefaults(); err != nil {
		return nil, fmt.Errorf("connect hypervisor: %w", err)
	}
	if err := eventLoop(); err != nil {
		return nil, fmt.Errorf("connect hypervisor %s: %w", cfg.URI, err)
	}
	h := &Host{
		cfg:    cfg,
		log:    cfg.Logger.With("libvirt", cfg.URI),
		kick:   make(chan struct{}, 1),
		events: newEventQueue(cfg.Logger),
		known:  newIdentityCache(),
		store:  newStorage(),
	}
	sess, err := h.open(ctx)
	if err == nil {
		err = h.learnDomains(ctx, sess)
		if err != nil {
			h.closeSession(sess)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("connect hypervisor %s: %w (is libvirtd running? scripts/libvirtd.sh starts it)", cfg.URI, err)
	}
	h.sess = sess
	// The background work's context ends when the Host is closed.
	bg, stop := context.WithCancel(context.Background())
	h.stop = stop
	h.wg.Add(2)
	go h.supervise(bg, sess)
	go h.deliver(bg)
	return h, nil
}

// dial opens a libvirt connection with keepalive, within ctx.
func (h *Host) dial(ctx context.Context) (*libvirt.Connect, error) {
	type result struct {
		conn *libvirt.Connect
		err  error
	}
	// NewConnect cannot be cancelled; do not let it outlive ctx's caller.
	ch := make(chan result, 1)
	go func() {
		c, err := libvirt.NewConnect(h.cfg.URI)
		ch <- result{c, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("open %s: %w: %w", h.cfg.URI, ErrUnavailable, ctx.Err())
	}
	if r.err != nil {
		return nil, fmt.Errorf("open %s: %w: %w", h.cfg.URI, ErrUnavailable, r.err)
	}
	// Local drivers (test:///) have no keepalive: fine.
	if err := r.conn.SetKeepAlive(max(1, int(h.cfg.KeepaliveInterval/time.Second)), h.cfg.KeepaliveCount); err != nil {
		h.log.Debug("keepalive not supported", "err", err)
	}
	return r.conn, nil
}

// open makes the control connection and registers the close callback and
// lifecycle events on it.
func (h *Host) open(ctx context.Context) (*session, error) {
	conn, err := h.dial(ctx)
	if err != nil {
		return nil, err
	}
	s := &session{conn: conn, lifecycle: -1, lost: make(chan struct{})}

	// Local drivers (test:///) have no close callback: fine.
	if err := conn.RegisterCloseCallback(func(_ *libvirt.Connect, reason libvirt.ConnectCloseReason) {
		h.log.Warn("libvirt connection closed", "reason", closeReason(reason))
		s.markLost()
	}); err != nil {
		h.log.Debug("close callback not supported", "err", err)
	}
	id, err := conn.DomainEventLifecycleRegister(nil, func(_ *libvirt.Connect, d *libvirt.Domain, ev *libvirt.DomainEventLifecycle) {
		// Runs on the event loop: copy what we need, resolve elsewhere.
		name, _ := d.GetName()
		h.events.raw(rawEvent{name: name, event: ev.Event, detail: ev.Detail, at: time.Now()})
	})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("register lifecycle events on %s: %w", h.cfg.URI, classify(err))
	}
	s.lifecycle = id
	return s, nil
}

func (h *Host) closeSession(s *session) {
	s.users.Wait()
	if s.lifecycle >= 0 {
		_ = s.conn.DomainEventDeregister(s.lifecycle) // fails on a dead connection: nothing to undo then
	}
	_ = s.conn.UnregisterCloseCallback()
	if _, err := s.conn.Close(); err != nil {
		h.log.Debug("close libvirt connection", "err", err)
	}
}

// acquire returns the live connection and a release func, or ErrUnavailable.
// libvirt calls cannot be cancelled, so ctx is checked here, before any.
func (h *Host) acquire(ctx context.Context) (*session, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, fmt.Errorf("%w: host closed", ErrUnavailable)
	}
	s := h.sess
	if s == nil {
		return nil, nil, fmt.Errorf("%w: reconnecting to %s", ErrUnavailable, h.cfg.URI)
	}
	s.users.Add(1)
	return s, s.users.Done, nil
}

// fail classifies a libvirt error and, when it says the connection is gone,
// asks the supervisor to check it without waiting for keepalive.
func (h *Host) fail(err error) error {
	err = classify(err)
	if errors.Is(err, ErrUnavailable) {
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
	return err
}

// supervise watches the current session and replaces it when it dies.
func (h *Host) supervise(ctx context.Context, s *session) {
	defer h.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.lost:
		case <-h.kick:
			if alive, err := s.conn.IsAlive(); err == nil && alive {
				continue
			}
			if _, err := s.conn.GetLibVersion(); err == nil {
				continue // IsAlive is false for local drivers; a call that works is proof enough
			}
		}
		h.mu.Lock()
		h.sess = nil
		h.mu.Unlock()
		h.events.host(Event{Kind: KindDisconnected, Reason: "connection lost", At: time.Now()})
		h.wg.Add(1)
		go func(s *session) { // waits for in-flight calls, which fail fast now
			defer h.wg.Done()
			h.closeSession(s)
		}(s)

		var ok bool
		if s, ok = h.reconnect(ctx); !ok {
			return
		}
	}
}

// reconnect retries with jittered exponential backoff until it succeeds or
// the Host is closed (ctx ends).
func (h *Host) reconnect(ctx context.Context) (*session, bool) {
	delay := h.cfg.ReconnectMin
	for attempt := 1; ; attempt++ {
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(delay/2 + rand.N(delay/2+1)):
		}
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		s, err := h.open(actx)
		if err == nil {
			err = h.learnDomains(actx, s)
			if err != nil {
				h.closeSession(s)
			}
		}
		cancel()
		if err == nil {
			h.mu.Lock()
			if h.closed {
				h.mu.Unlock()
				h.closeSession(s)
				return nil, false
			}
			h.sess = s
			h.mu.Unlock()
			h.log.Info("libvirt reconnected", "attempts", attempt)
			// Events may have been missed while down: consumers reconcile.
			h.events.host(Event{Kind: KindReconnected, Reason: "reconnected", At: time.Now()})
			return s, true
		}
		h.log.Debug("libvirt reconnect failed", "attempt", attempt, "err", err)
		delay = min(delay*2, h.cfg.ReconnectMax)
	}
}

// Close stops reconnecting, closes the connection and the Events channel.
// Open channels should be closed first.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.stop()
	s := h.sess
	h.sess = nil
	h.mu.Unlock()
	h.wg.Wait() // deliver closes the Events channel on its way out
	if s != nil {
		h.closeSession(s)
	}
	return nil
}

// URI is the libvirt URI this host is connected to.
func (h *Host) URI() string { return h.cfg.URI }

// InstallationID is the installation whose domains this host manages.
func (h *Host) InstallationID() string { return h.cfg.InstallationID }

func closeReason(r libvirt.ConnectCloseReason) string {
	switch r {
	case libvirt.CONNECT_CLOSE_REASON_ERROR:
		return "error"
	case libvirt.CONNECT_CLOSE_REASON_EOF:
		return "eof"
	case libvirt.CONNECT_CLOSE_REASON_KEEPALIVE:
		return "keepalive"
	case libvirt.CONNECT_CLOSE_REASON_CLIENT:
		return "client"
	}
	return fmt.Sprintf("reason %d", r)
}
