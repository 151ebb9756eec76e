package vmpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// hostList is a snapshot of the hosts this process connects to.
func (s *Service) hostList() []*hostConn {
	s.hostsMu.Lock()
	defer s.hostsMu.Unlock()
	return slices.Clone(s.hosts)
}

// loadHosts completes the configured hosts at Start with the database's:
// hosts an operator added are connected to as well; a host an operator
// removed is not, even when STOCKADE_LIBVIRT_URIS still names it.
func (s *Service) loadHosts(ctx context.Context) error {
	recs, err := s.store.Hosts(ctx)
	if err != nil {
		return err
	}
	s.hostsMu.Lock()
	defer s.hostsMu.Unlock()
	for _, r := range recs {
		i := slices.IndexFunc(s.hosts, func(h *hostConn) bool { return h.uri == r.URI })
		switch {
		case r.State == HostRemoved && i >= 0:
			s.log.Warn("libvirt host removed by an operator: not connecting although STOCKADE_LIBVIRT_URIS names it", "uri", r.URI)
			s.hosts = slices.Delete(s.hosts, i, i+1)
		case r.State != HostRemoved && i < 0 && r.AddedBy != "":
			s.hosts = append(s.hosts, newHostConn(r.URI))
		}
	}
	return nil
}

func newHostConn(uri string) *hostConn {
	return &hostConn{uri: uri, reason: "not connected yet", cpu: map[string]cpuSample{}}
}

// runHost supervises a host (connect, reconcile, events) and watches that it
// answers; first is closed after the first connection attempt.
func (s *Service) runHost(h *hostConn, first chan struct{}) {
	s.wg.Add(2)
	go s.superviseHost(h, first)
	go s.watchHost(h)
}

// liveCandidates are the hosts a VM of memMiB may go to as far as this
// process knows: connected, with that much memory free on the machine after
// the boots in flight. The pick among them is placeTx's, in the database.
func (s *Service) liveCandidates(memMiB int) ([]string, error) {
	var (
		out []string
		why []string
	)
	for _, h := range s.hostList() {
		if _, err := h.live(); err != nil {
			h.mu.Lock()
			why = append(why, fmt.Sprintf("libvirt at %s: %s", h.uri, h.reason))
			h.mu.Unlock()
			continue
		}
		h.mu.Lock()
		free := int64(h.capacity.MemoryFreeKiB/1024) - int64(h.reserved)
		h.mu.Unlock()
		if free < int64(memMiB) {
			why = append(why, fmt.Sprintf("libvirt at %s: %d MiB free, %d MiB needed", h.uri, max(free, 0), memMiB))
			continue
		}
		out = append(out, h.uri)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no host can take the vm: %s", ErrUnavailable, strings.Join(why, "; "))
	}
	return out, nil
}

// HostDownAfter is how long a host's connection may fail (refused or
// closed, reconnecting in vain) before the host is declared down (its VMs
// lost, its sandboxes failed). A libvirtd restart (its VMs keep running) is
// over well within it.
const HostDownAfter = 6 * time.Second

// HostSlowDownAfter is how long a host whose connection is live may go
// without answering the cheap call (each one timing out or failing) before
// it is declared down all the same. Until then it is only "slow" (shown on
// the hosts page): a loaded libvirtd answers late, and that must not lose
// the VMs it runs.
const HostSlowDownAfter = 60 * time.Second

// hostCallTimeout bounds the cheap call that checks a host answers.
const hostCallTimeout = 3 * time.Second

// watchHost checks every MonitorInterval that the host answers a cheap call
// (its capacity, which refreshes it too). A host whose connection fails for
// HostDownAfter, or that has not answered on a live connection for
// HostSlowDownAfter, is down: its VMs are lost with the reason
// "host <uri> down", audited host.down; the warm pools refill elsewhere.
// When it answers again it is up (host.up) and reconciled, which destroys
// the leftover domains of its lost VMs. A draining host's idle VMs are
// destroyed here too, to be refilled elsewhere.
func (s *Service) watchHost(h *hostConn) {
	defer s.wg.Done()
	t := s.cfg.Clock.NewTicker(s.cfg.MonitorInterval)
	defer t.Stop()
	h.mu.Lock()
	h.answered, h.connOK = s.cfg.Clock.Now(), s.cfg.Clock.Now()
	h.mu.Unlock()
	for {
		select {
		case <-s.stop.Done():
			return
		case <-t.Chan():
		}
		if h.isRemoved() {
			return
		}
		s.checkHost(h)
	}
}

// connFailure tells whether err, from a host's cheap call, is the
// connection's (refused, closed, being re-established) rather than a call
// that was slow or failed on a live connection.
func connFailure(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	return errors.Is(err, hypervisor.ErrUnavailable) || errors.Is(err, ErrUnavailable)
}

// hostVerdict decides, at now, what a host that just failed its cheap call
// is: down (its VMs to be lost) or only slow. connOK is the last time its
// connection was live, answered the last time the call succeeded.
func hostVerdict(now, connOK, answered time.Time) (down bool) {
	return now.Sub(connOK) >= HostDownAfter || now.Sub(answered) >= HostSlowDownAfter
}

func (s *Service) checkHost(h *hostConn) {
	now := s.cfg.Clock.Now()
	hv, err := h.live()
	if err == nil {
		ctx, cancel := s.stop.WithTimeout(context.Background(), hostCallTimeout)
		capacity, cerr := hv.Capacity(ctx)
		cancel()
		if err = cerr; err == nil {
			h.mu.Lock()
			h.capacity, h.answered, h.connOK, h.lastSeen = capacity, s.cfg.Clock.Now(), s.cfg.Clock.Now(), s.cfg.Clock.Now()
			wasDown := h.down
			h.down, h.slow = false, ""
			h.mu.Unlock()
			if wasDown {
				s.hostUp(h, hv)
			}
			s.drainIdle(h)
			return
		}
	}
	h.mu.Lock()
	if !connFailure(err) {
		// A live connection whose call timed out or failed: slow, not down.
		h.connOK = now
		if h.slow == "" {
			s.log.Warn("libvirt host slow: its cheap call did not answer", "uri", h.uri, "err", err)
		}
		h.slow = fmt.Sprintf("slow: no answer since %s (%s)", h.answered.UTC().Format(time.RFC3339), clipErr(err))
	}
	down := hostVerdict(now, h.connOK, h.answered)
	already := h.down
	reason := h.reason
	h.mu.Unlock()
	if already || !down || !s.leading() {
		return // a follower replica leaves recording it (and losing VMs) to the leader
	}
	if reason == "" {
		reason = err.Error()
	}
	s.hostDown(h, reason)
}

// hostDown records the host down and loses its VMs.
func (s *Service) hostDown(h *hostConn, why string) {
	h.mu.Lock()
	h.down = true
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.store.setHostDown(ctx, h.uri, true, why); err != nil {
		s.log.Error("record host down", "uri", h.uri, "err", err)
	}
	vms, err := s.store.activeOnHost(ctx, h.uri)
	if err != nil {
		s.log.Error("host down: list its vms", "uri", h.uri, "err", err)
		return
	}
	s.log.Warn("libvirt host down: its vms are lost", "uri", h.uri, "vms", len(vms), "reason", why)
	for _, vm := range vms {
		s.markLost(vm, "host "+h.uri+" down")
	}
}

// hostUp records the host back and reconciles it: domains of VMs lost while
// it was down are orphans now, destroyed.
func (s *Service) hostUp(h *hostConn, hv Hypervisor) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.store.setHostDown(ctx, h.uri, false, "answers again"); err != nil {
		s.log.Error("record host up", "uri", h.uri, "err", err)
	}
	s.refreshHost(h)
	s.log.Info("libvirt host up again: reconciling", "uri", h.uri)
	s.reconcileHost(h, hv)
}

// drainIdle destroys the idle (warm) VMs of a draining host: the warm pool
// refills them on another host. VMs handed out to sandboxes stay until
// their sandboxes end.
func (s *Service) drainIdle(h *hostConn) {
	if !s.leading() {
		return // the leader's, as the warm pools are
	}
	ctx, cancel := s.stop.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, err := s.store.host(ctx, h.uri)
	if err != nil || rec.State != HostDraining {
		return
	}
	vms, err := s.store.activeOnHost(ctx, h.uri)
	if err != nil {
		return
	}
	for _, vm := range vms {
		if vm.State != StateRunning || vm.AcquiredAt != nil {
			continue
		}
		if rt := s.lookupRuntime(vm.ID); rt != nil && (rt.busy() || rt.isDestroying()) {
			continue
		}
		if _, err := s.Destroy(ctx, SystemActor(), vm.TenantID, vm.ID); err != nil && !errors.Is(err, errdefs.ErrConflict) {
			s.log.Warn("drain: destroy idle vm", "vm", vm.ID, "host", h.uri, "err", err)
		}
	}
}

// AddHost adds a libvirt host: it is connected to first (bounded by
// ConnectTimeout) and its capacity read; one that does not answer is an
// error naming the uri and nothing is written. A host already there is
// ErrConflict. Audited host.added; placement uses it at once.
func (s *Service) AddHost(ctx context.Context, actor audit.Actor, uri string, labels Labels) (HostStatus, error) {
	if err := s.Started(); err != nil {
		return HostStatus{}, err
	}
	uri = strings.TrimSpace(uri)
	if err := checkHostURI(uri); err != nil {
		return HostStatus{}, err
	}
	if err := labels.Check("labels"); err != nil {
		return HostStatus{}, err
	}
	if s.hostByURI(uri) != nil {
		return HostStatus{}, fmt.Errorf("add host %s: %w: it is already there", uri, errdefs.ErrConflict)
	}
	rec, err := CheckHost(ctx, s.cfg.Connect, uri, s.installID, s.cfg.ConnectTimeout, s.log)
	if err != nil {
		return HostStatus{}, err
	}
	rec.Labels = labels
	if _, err := s.store.AddHost(ctx, actor, rec); err != nil {
		return HostStatus{}, err
	}
	h := newHostConn(uri)
	s.hostsMu.Lock()
	if slices.ContainsFunc(s.hosts, func(o *hostConn) bool { return o.uri == uri }) {
		s.hostsMu.Unlock() // syncHosts saw the new row first: it runs already
		return s.HostStatus(ctx, uri)
	}
	s.hosts = append(s.hosts, h)
	s.hostsMu.Unlock()
	first := make(chan struct{})
	s.runHost(h, first)
	select {
	case <-first:
	case <-ctx.Done():
	}
	return s.HostStatus(ctx, uri)
}

func clipErr(err error) string { return truncate(err.Error(), 300) }

// CheckHost is the check before a host is added: connect to uri (within
// timeout) and read its capacity. A URI that is malformed or does not answer
// is a *errdefs.FieldError on "uri".
func CheckHost(ctx context.Context, connect Connector, uri, installID string, timeout time.Duration, log *slog.Logger) (Host, error) {
	if err := checkHostURI(uri); err != nil {
		return Host{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hv, err := connect(cctx, uri, installID, log)
	if err != nil {
		return Host{}, errdefs.Invalid("uri", "host_unreachable", fmt.Sprintf("libvirt at %s does not answer: %v", uri, clipErr(err)))
	}
	defer hv.Close() // supervision opens its own, and reconciles it
	capacity, err := hv.Capacity(cctx)
	if err != nil {
		return Host{}, errdefs.Invalid("uri", "host_unreachable", fmt.Sprintf("libvirt at %s: read its capacity: %v", uri, clipErr(err)))
	}
	dt, _ := hv.DomainType(cctx)
	return Host{URI: uri, CPUs: capacity.CPUs, MemoryKiB: capacity.MemoryTotalKiB, FreeMemoryKiB: capacity.MemoryFreeKiB, DomainType: dt}, nil
}

// checkHostURI accepts the libvirt URIs a host is reached by.
func checkHostURI(uri string) error {
	if uri == "" {
		return errdefs.Required("uri")
	}
	if len(uri) > 500 || strings.ContainsAny(uri, " \t\r\n") {
		return errdefs.Invalid("uri", "uri_format", "a libvirt URI of at most 500 characters, no spaces")
	}
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok || rest == "" || !strings.HasPrefix(scheme, "qemu") {
		return errdefs.Invalid("uri", "uri_format", "a qemu libvirt URI: qemu:///system, qemu+tls://host/system, qemu+ssh://user@host/system or qemu+tcp://host:port/system")
	}
	return nil
}

// CordonHost is Store.CordonHost, answering the host's status.
func (s *Service) CordonHost(ctx context.Context, actor audit.Actor, uri, reason string, force bool) (HostStatus, error) {
	if _, err := s.store.CordonHost(ctx, actor, uri, reason, force); err != nil {
		return HostStatus{}, err
	}
	return s.HostStatus(ctx, uri)
}

// UncordonHost is Store.UncordonHost; the pools top up at once.
func (s *Service) UncordonHost(ctx context.Context, actor audit.Actor, uri string) (HostStatus, error) {
	if _, err := s.store.UncordonHost(ctx, actor, uri); err != nil {
		return HostStatus{}, err
	}
	s.kickAll(ctx)
	return s.HostStatus(ctx, uri)
}

// DrainHost is Store.DrainHost; the host's idle VMs are destroyed at once
// (watchHost does it for a drain recorded by another process).
func (s *Service) DrainHost(ctx context.Context, actor audit.Actor, uri, reason string, force bool) (HostStatus, error) {
	if _, err := s.store.DrainHost(ctx, actor, uri, reason, force); err != nil {
		return HostStatus{}, err
	}
	if h := s.hostByURI(uri); h != nil {
		s.drainIdle(h)
	}
	return s.HostStatus(ctx, uri)
}

// RemoveHost is Store.RemoveHost; the host is no longer connected to.
func (s *Service) RemoveHost(ctx context.Context, actor audit.Actor, uri string) error {
	if _, err := s.store.RemoveHost(ctx, actor, uri); err != nil {
		return err
	}
	s.dropHost(uri)
	return nil
}

// dropHost stops supervising a removed host.
func (s *Service) dropHost(uri string) {
	s.hostsMu.Lock()
	i := slices.IndexFunc(s.hosts, func(h *hostConn) bool { return h.uri == uri })
	var h *hostConn
	if i >= 0 {
		h = s.hosts[i]
		s.hosts = slices.Delete(s.hosts, i, i+1)
	}
	s.hostsMu.Unlock()
	if h == nil {
		return
	}
	h.mu.Lock()
	h.removed = true
	h.mu.Unlock()
	if hv := h.take(); hv != nil {
		hv.Close()
	}
	s.log.Info("libvirt host removed", "uri", uri)
}

// syncHosts follows the hosts table: a host added (or removed) by another
// process, `stockade host` or another replica, is connected to (or
// dropped) here too.
func (s *Service) syncHosts(ctx context.Context) {
	recs, err := s.store.Hosts(ctx)
	if err != nil {
		s.log.Warn("sync hosts", "err", err)
		return
	}
	for _, r := range recs {
		known := s.hostByURI(r.URI) != nil
		switch {
		case r.State == HostRemoved && known:
			s.dropHost(r.URI)
		case r.State != HostRemoved && !known && r.AddedBy != "":
			h := newHostConn(r.URI)
			s.hostsMu.Lock()
			if slices.ContainsFunc(s.hosts, func(o *hostConn) bool { return o.uri == r.URI }) {
				s.hostsMu.Unlock()
				continue
			}
			s.hosts = append(s.hosts, h)
			s.hostsMu.Unlock()
			s.log.Info("libvirt host added elsewhere: connecting", "uri", r.URI)
			s.runHost(h, make(chan struct{}))
		}
	}
}

// hostsLoop runs syncHosts every HostSyncInterval until Close.
func (s *Service) hostsLoop() {
	defer s.wg.Done()
	t := s.cfg.Clock.NewTicker(HostSyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop.Done():
			return
		case <-t.Chan():
		}
		ctx, cancel := s.stop.WithTimeout(context.Background(), 30*time.Second)
		s.syncHosts(ctx)
		cancel()
	}
}

// HostSyncInterval is how often the hosts table is read for hosts added or
// removed by another process.
const HostSyncInterval = 5 * time.Second

// SetHostConstraint sets the labels a tenant's VMs need on their host
// (for example dedicated=acme); empty labels: any host. New VMs follow it;
// running ones stay where they are.
func (s *Service) SetHostConstraint(ctx context.Context, actor audit.Actor, tenantID string, labels Labels) (HostConstraint, error) {
	c, err := s.store.SetHostConstraint(ctx, actor, tenantID, labels)
	if err == nil {
		s.kick(tenantID)
	}
	return c, err
}

// kickAll asks the reconcile loop to top up every tenant's pool.
func (s *Service) kickAll(ctx context.Context) {
	pools, err := s.store.Pools(ctx)
	if err != nil {
		return
	}
	for _, p := range pools {
		s.kick(p.TenantID)
	}
}

// ClosedHosts are the hosts whose VMs take no new sandbox: cordoned,
// draining, removed, or recorded down (Host.TakesSandboxes).
func (s *Service) ClosedHosts(ctx context.Context) (map[string]bool, error) {
	recs, err := s.store.Hosts(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, r := range recs {
		if !r.TakesSandboxes() {
			out[r.URI] = true
		}
	}
	return out, nil
}

// TakesSandboxes reports whether the host's running VMs may take new
// sandboxes: not when it is cordoned, draining, removed or down.
func (h Host) TakesSandboxes() bool {
	return (h.State == HostActive || h.State == "") && h.DownAt == nil
}

// HostStatus is one host's status (Hosts), ErrNotFound when unknown.
func (s *Service) HostStatus(ctx context.Context, uri string) (HostStatus, error) {
	hs, err := s.Hosts(ctx)
	if err != nil {
		return HostStatus{}, err
	}
	for _, h := range hs {
		if h.URI == uri {
			return h, nil
		}
	}
	return HostStatus{}, fmt.Errorf("host %s: %w", uri, errdefs.ErrNotFound)
}

// Effective is the state operators see: "not configured" (no longer
// connected to), "down" (does not answer), "drained" (draining and empty),
// else the operator state.
func (st HostStatus) Effective() string {
	switch {
	case !st.Configured:
		return "not configured"
	case !st.Connected:
		return "down"
	case st.State == HostDraining && st.ActiveVMs == 0:
		return "drained"
	case st.State == "":
		return string(HostActive)
	}
	return string(st.State)
}

func (h *hostConn) isRemoved() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.removed
}
