package vmpool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// watchEvents follows a host's lifecycle events until Close.
func (s *Service) watchEvents(h *hostConn, hv Hypervisor) {
	for {
		select {
		case <-s.stop.Done():
			return
		case ev, ok := <-hv.Events():
			if !ok {
				return
			}
			s.onEvent(h, hv, ev)
		}
	}
}

func (s *Service) onEvent(h *hostConn, hv Hypervisor, ev hypervisor.Event) {
	switch ev.Kind {
	case hypervisor.KindDisconnected:
		// Only the connection's own liveness probe says this, never one
		// VM's stream or call. Agent sessions are left alone: one whose
		// stream still works keeps its commands and terminals; one that
		// died with the connection ends by itself, and its VM is re-adopted
		// (no reboot) once the host is back.
		h.setDown("libvirt connection lost: " + ev.Reason)
		s.recordHost(h)
		s.log.Warn("libvirt host disconnected", "uri", h.uri)
	case hypervisor.KindReconnected:
		h.setUp(hv)
		s.refreshHost(h)
		s.log.Info("libvirt host reconnected: reconciling", "uri", h.uri)
		s.reconcileHost(h, hv) // events were missed while it was down
	case hypervisor.KindCrashed, hypervisor.KindStopped:
		s.domainEnded(h, ev)
	}
}

// domainEnded handles a domain of ours that stopped: a VM we are stopping
// is now stopped; any other active VM is lost.
func (s *Service) domainEnded(h *hostConn, ev hypervisor.Event) {
	ctx := context.Background()
	vm, err := s.store.vmByID(ctx, ev.ID)
	if err != nil {
		return // not a VM we know: an orphan that reconcile destroys
	}
	if vm.HostURI != h.uri || vm.TenantID != ev.TenantID {
		s.log.Warn("domain event does not match the vm's row: ignored", "vm", vm.ID, "host", h.uri, "event_tenant", ev.TenantID)
		return
	}
	if !s.ownsNow(vm.ID) {
		return // its owner records it (or, if that one died, whoever adopts it)
	}
	rt := s.lookupRuntime(vm.ID)
	if rt != nil && rt.isDestroying() {
		return // Destroy or recycle records this end
	}
	reason := fmt.Sprintf("domain %s (%s)", ev.Kind, ev.Reason)
	switch vm.State {
	case StateStopping:
		s.stopped(vm, rt, "shut down: "+reason)
	case StateBooting, StateRunning:
		s.markLost(vm, reason)
	}
}

// stopped records the end of a graceful stop.
func (s *Service) stopped(vm VM, rt *runtime, reason string) {
	actor := SystemActor()
	if rt != nil {
		rt.mu.Lock()
		if rt.stopActor != nil {
			actor = *rt.stopActor
		}
		rt.mu.Unlock()
	}
	_, changed, err := s.store.end(context.Background(), vm.ID, []State{StateStopping}, StateStopped, reason,
		eventPtr(actor.Event(vm.TenantID, audit.TypeVMStopped, "vm", vm.ID, map[string]any{"reason": reason})))
	if err != nil {
		s.log.Error("record stopped vm", "vm", vm.ID, "err", err)
		return
	}
	if changed {
		s.log.Info("vm stopped", "vm", vm.ID, "tenant", vm.TenantID, "reason", reason)
	}
	s.dropRuntime(vm.ID)
	s.kick(vm.TenantID)
}

// markLost records that an active VM ended without us (audited vm.lost,
// once however many observers notice) and lets the pool replace it.
func (s *Service) markLost(vm VM, reason string) {
	_, changed, err := s.store.end(context.Background(), vm.ID, []State{StateBooting, StateRunning}, StateLost, reason,
		eventPtr(SystemActor().Event(vm.TenantID, audit.TypeVMLost, "vm", vm.ID, map[string]any{"reason": reason, "host": vm.HostURI})))
	if err != nil {
		s.log.Error("record lost vm", "vm", vm.ID, "err", err)
		return
	}
	if !changed {
		return
	}
	if rt := s.lookupRuntime(vm.ID); rt != nil {
		rt.mu.Lock()
		cancel := rt.cancel
		rt.mu.Unlock()
		if cancel != nil {
			cancel(errLost)
		}
	}
	s.dropRuntime(vm.ID)
	s.log.Warn("vm lost", "vm", vm.ID, "tenant", vm.TenantID, "host", vm.HostURI, "reason", reason)
	s.kick(vm.TenantID)
}

// reconcileHost brings the database and one host into agreement, at
// connect and after every reconnect. It only ever sees domains of this
// installation (Hypervisor.List filters by the metadata's installation id):
//   - a domain with no active row is an orphan: destroyed, audited;
//   - an active row without its domain is lost (or failed, if its boot
//     never got as far as defining it);
//   - a running domain with a row is adopted: a new agent channel and
//     handshake, no reboot;
//   - a row already stopping has its domain destroyed.
func (s *Service) reconcileHost(h *hostConn, hv Hypervisor) {
	ctx, cancel := s.stop.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	doms, err := hv.List(ctx)
	if err != nil {
		s.log.Warn("reconcile: list domains", "uri", h.uri, "err", err)
		return
	}
	rows, err := s.store.activeOnHost(ctx, h.uri)
	if err != nil {
		s.log.Warn("reconcile: list vms", "uri", h.uri, "err", err)
		return
	}
	byID := make(map[string]hypervisor.DomainInfo, len(doms))
	for _, d := range doms {
		byID[d.ID] = d
	}
	active := make(map[string]VM, len(rows))
	for _, r := range rows {
		active[r.ID] = r
	}

	for _, d := range doms {
		if _, ok := active[d.ID]; ok {
			continue
		}
		if rt := s.lookupRuntime(d.ID); rt != nil && (rt.busy() || rt.isDestroying()) {
			continue
		}
		if s.snapshotBuilding(d.ID) {
			continue // a snapshot VM being built (snapshot.go)
		}
		if strings.HasPrefix(d.ID, snapshotVMPrefix) {
			if !s.owns(ctx, d.ID) {
				continue // another live replica's build (snapshot_orphans.go)
			}
			s.destroyOrphan(ctx, h, hv, d)
			s.releaseSnapshotVM(ctx, d.ID)
			continue
		}
		s.destroyOrphan(ctx, h, hv, d)
	}

	var wg sync.WaitGroup
	for _, vm := range rows {
		rt := s.lookupRuntime(vm.ID)
		if rt != nil && (rt.busy() || rt.isDestroying() || rt.getClient() != nil) {
			continue // this process is handling it live
		}
		if !s.owns(ctx, vm.ID) {
			continue // another live replica owns it: never touch it
		}
		d, present := byID[vm.ID]
		s.reconcileVM(ctx, hv, vm, rt, d, present, &wg)
	}
	wg.Wait() // running VMs answer in milliseconds: Start returns with them adopted
	s.log.Info("reconciled libvirt host", "uri", h.uri, "domains", len(doms), "active_vms", len(rows))
}

// reconcileVM brings one VM this replica owns (and is not handling live)
// into agreement with its domain: see reconcileHost. wg counts adoptions of
// running VMs under way.
func (s *Service) reconcileVM(ctx context.Context, hv Hypervisor, vm VM, rt *runtime, d hypervisor.DomainInfo, present bool, wg *sync.WaitGroup) {
	switch {
	case !present && vm.State == StateBooting && (vm.Phase == PhaseQueued || vm.Phase == PhaseDefining):
		s.failBoot(vm, nil, errors.New("boot interrupted before its domain was defined"))
	case !present && vm.State == StateStopping:
		s.stopped(vm, rt, "shut down: domain gone (found at reconcile)")
	case !present:
		s.markLost(vm, "domain gone (found at reconcile)")
	case vm.State == StateStopping:
		s.destroyAndEnd(ctx, hv, vm, StateStopped, "stopped (finished at reconcile)", nil)
	case d.State != hypervisor.StateRunning:
		s.destroyAndEnd(ctx, hv, vm, StateLost, "domain "+string(d.State)+" (found at reconcile)",
			eventPtr(SystemActor().Event(vm.TenantID, audit.TypeVMLost, "vm", vm.ID, map[string]any{"state": string(d.State)})))
	case vm.State == StateBooting:
		// Its boot was cut short by a restart: finish the handshake in the background.
		rt := s.runtimeFor(vm)
		s.startTask(rt, func(ctx context.Context) { s.adopt(ctx, rt, hv, vm, d, s.cfg.BootTimeout) })
	default:
		rt := s.runtimeFor(vm)
		wg.Add(1)
		if !s.startTask(rt, func(ctx context.Context) {
			defer wg.Done()
			s.adopt(ctx, rt, hv, vm, d, s.cfg.AdoptTimeout)
		}) {
			wg.Done()
		}
	}
}

// adopt opens a new agent session to a VM found running and takes it over
// without rebooting it. A VM whose agent does not answer is destroyed; one
// whose channel another client holds is left alone (channel busy).
func (s *Service) adopt(ctx context.Context, rt *runtime, hv Hypervisor, vm VM, d hypervisor.DomainInfo, timeout time.Duration) {
	start := time.Now()
	client, err := s.handshake(ctx, hv, vm, timeout, nil)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		if channelBusy(err) {
			// Someone else holds its agent channel (another server of this
			// installation, or a debugger): the VM is alive and may be
			// serving sandboxes. Never destroy it for that; the monitor
			// tries again every 10 s.
			s.log.Warn("adopt: agent channel busy: another client holds it; leaving the vm running", "vm", vm.ID, "err", err)
			return
		}
		reason := truncate("adopt: agent did not answer: "+err.Error(), 500)
		if vm.State == StateBooting {
			s.failBoot(vm, hv, errors.New(reason))
			return
		}
		s.destroyAndEnd(context.WithoutCancel(ctx), hv, vm, StateFailed, reason,
			eventPtr(SystemActor().Event(vm.TenantID, audit.TypeVMFailed, "vm", vm.ID, map[string]any{"reason": reason})))
		return
	}
	if err := s.setIdentity(ctx, client, vm); err != nil {
		if vm.State == StateBooting {
			client.Close()
			if ctx.Err() == nil {
				s.failBoot(vm, hv, err)
			}
			return
		}
		// A running VM got its identity when it booted: this call only
		// sets its clock again, and its tenants' work goes on without it.
		s.log.Warn("adopt: vm identity", "vm", vm.ID, "err", err)
	}
	hello := client.Hello()
	r := ready{AgentVersion: hello.Agent, KernelVersion: hello.Kernel, DomainUUID: d.UUID}
	// Not ctx: the adopt timeout bounds the handshake only; Close cuts this short.
	mctx, cancel := s.stop.Bound(context.Background())
	defer cancel()
	if vm.State == StateBooting {
		r.Boot = time.Since(vm.CreatedAt)
		ok, err := s.store.markRunning(mctx, vm.ID, r)
		if err != nil || !ok {
			client.Close()
			return
		}
	} else if err := s.store.adopted(mctx, vm.ID, r); err != nil {
		s.log.Warn("record adopted vm", "vm", vm.ID, "err", err)
	}
	rt.setClient(client)
	s.watchAgent(rt, client)
	s.log.Info("vm adopted", "vm", vm.ID, "tenant", vm.TenantID, "guest_uptime", hello.Uptime.Round(time.Millisecond),
		"session", hello.SessionNumber, "took", time.Since(start).Round(time.Millisecond))
}

// destroyAndEnd destroys a VM's domain and records its end.
func (s *Service) destroyAndEnd(ctx context.Context, hv Hypervisor, vm VM, to State, reason string, ev *audit.Event) {
	rt := s.runtimeFor(vm)
	rt.setDestroying(true)
	if err := s.destroyDomain(ctx, rt, hv, vm.ID); err != nil {
		s.log.Warn("reconcile: destroy vm", "vm", vm.ID, "err", err)
		rt.setDestroying(false)
		return
	}
	from := []State{StateBooting, StateRunning, StateStopping}
	if _, _, err := s.store.end(context.WithoutCancel(ctx), vm.ID, from, to, reason, ev); err != nil {
		s.log.Warn("reconcile: record vm end", "vm", vm.ID, "err", err)
	}
	s.dropRuntime(vm.ID)
	s.kick(vm.TenantID)
}

// destroyOrphan destroys a domain of this installation that no active VM
// row accounts for (a crash between define and the row's end, or a row
// ended while libvirt was unreachable), and audits it.
func (s *Service) destroyOrphan(ctx context.Context, h *hostConn, hv Hypervisor, d hypervisor.DomainInfo) {
	if err := hv.Destroy(ctx, d.ID); err != nil && !errors.Is(err, hypervisor.ErrNotFound) {
		s.log.Warn("reconcile: destroy orphan domain", "uri", h.uri, "domain", d.Name, "err", err)
		return
	}
	s.log.Warn("reconcile: destroyed orphan domain", "uri", h.uri, "domain", d.Name, "tenant", d.TenantID)
	e := SystemActor().Event(d.TenantID, audit.TypeVMDestroyed, "vm", d.ID,
		map[string]any{"reason": "orphan: no active vm row", "domain": d.Name, "host": h.uri})
	if err := s.audit.Record(context.WithoutCancel(ctx), e); err != nil {
		s.log.Warn("audit orphan destroy", "err", err)
	}
}

// reconcileLoop tops pools up to their warm count and recycles old VMs,
// every ReconcileInterval and whenever a tenant is kicked.
func (s *Service) reconcileLoop() {
	defer s.wg.Done()
	ctx, cancel := s.stop.Bound(context.Background())
	defer cancel()
	t := s.cfg.Clock.NewTicker(s.cfg.ReconcileInterval)
	defer t.Stop()
	s.reconcileAll(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
			s.reconcileAll(ctx)
		case tenantID := <-s.kickc:
			s.reconcileTenant(ctx, tenantID)
		}
	}
}

func (s *Service) reconcileAll(ctx context.Context) {
	if s.Available() != nil {
		return
	}
	due, err := s.store.recycleDue(ctx)
	if err != nil {
		s.log.Warn("reconcile: recycle", "err", err)
	}
	for _, vm := range due {
		if s.ownsNow(vm.ID) { // each replica recycles the VMs it owns
			s.recycleAged(ctx, vm)
		}
	}
	if !s.leading() {
		return // warm pools and the scratch sweep are the leader's
	}
	pools, err := s.store.Pools(ctx)
	if err != nil {
		s.log.Warn("reconcile: pools", "err", err)
		return
	}
	for _, p := range pools {
		if p.WarmVMs > 0 {
			s.reconcileTenant(ctx, p.TenantID)
		}
	}
	s.sweepScratch(ctx)
	s.sweepSnapshotVMs(ctx) // snapshot_orphans.go
	s.sweepSnapshots(ctx)   // snapshot_gc.go
	s.syncHostFiles()
}

// reconcileTenant boots VMs until the tenant has its warm count of idle
// (running and not handed out) or booting VMs, within its pool and quota.
func (s *Service) reconcileTenant(ctx context.Context, tenantID string) {
	if ctx.Err() != nil || s.Available() != nil || s.backedOff(tenantID) || !s.leading() {
		return
	}
	pool, err := s.store.Pool(ctx, tenantID)
	if err != nil || pool.WarmVMs == 0 {
		return
	}
	active, err := s.store.activeOf(ctx, tenantID)
	if err != nil {
		s.log.Warn("reconcile: vms", "tenant", tenantID, "err", err)
		return
	}
	idle := 0
	for _, vm := range active {
		if vm.State == StateBooting || vm.Idle() {
			idle++
		}
	}
	for need := pool.WarmVMs - idle; need > 0; need-- {
		vm, err := s.Create(ctx, SystemActor(), tenantID)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return
		case errors.Is(err, errdefs.ErrQuota), errors.As(err, new(*tenants.FrozenError)):
			// Warm VMs only fill what the pool and quota allow, and none
			// start for a frozen tenant; not an error.
			s.log.Debug("reconcile: warm vm not started", "tenant", tenantID, "err", err)
			return
		default:
			s.log.Warn("reconcile: warm vm not started", "tenant", tenantID, "err", err)
			s.noteBootFailure(tenantID)
			return
		}
		s.log.Info("reconcile: booting warm vm", "tenant", tenantID, "vm", vm.ID)
	}
}

// monitorLoop samples CPU use, notices domains that vanished without an
// event, re-opens agent sessions that dropped, and every HostRefresh
// records host capacity and VM last-seen times.
func (s *Service) monitorLoop() {
	defer s.wg.Done()
	t := s.cfg.Clock.NewTicker(s.cfg.MonitorInterval)
	defer t.Stop()
	var lastRefresh time.Time
	for {
		select {
		case <-s.stop.Done():
			return
		case <-t.Chan():
		}
		refresh := s.cfg.Clock.Since(lastRefresh) >= s.cfg.HostRefresh
		if refresh {
			lastRefresh = s.cfg.Clock.Now()
		}
		for _, h := range s.hostList() {
			hv, err := h.live()
			if err != nil {
				continue
			}
			s.monitorHost(h, hv, refresh)
		}
	}
}

func (s *Service) monitorHost(h *hostConn, hv Hypervisor, refresh bool) {
	ctx, cancel := s.stop.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	doms, err := hv.List(ctx)
	if err != nil {
		if errors.Is(err, hypervisor.ErrUnavailable) {
			return // the connection's own events report it
		}
		s.log.Warn("monitor: list domains", "uri", h.uri, "err", err)
		return
	}
	rows, err := s.store.activeOnHost(ctx, h.uri)
	if err != nil {
		s.log.Warn("monitor: list vms", "uri", h.uri, "err", err)
		return
	}
	now := time.Now()
	present := make(map[string]hypervisor.DomainInfo, len(doms))
	h.mu.Lock()
	samples := make(map[string]cpuSample, len(doms))
	for _, d := range doms {
		present[d.ID] = d
		cur := cpuSample{cpu: d.CPUTime, at: now, percent: -1}
		if prev, ok := h.cpu[d.ID]; ok && now.After(prev.at) && d.VCPUs > 0 && d.CPUTime >= prev.cpu {
			cur.percent = 100 * float64(d.CPUTime-prev.cpu) / float64(now.Sub(prev.at)) / float64(d.VCPUs)
		}
		samples[d.ID] = cur
	}
	h.cpu = samples
	h.mu.Unlock()

	var seen []string
	var adopting sync.WaitGroup // not waited for: the monitor goes on
	for _, vm := range rows {
		rt := s.lookupRuntime(vm.ID)
		if rt != nil && (rt.busy() || rt.isDestroying()) {
			continue
		}
		if !s.ownsNow(vm.ID) {
			// Another replica's, unless its lease expired: then this one
			// adopts it, exactly as at a restart (no reboot).
			if s.owns(ctx, vm.ID) {
				d, ok := present[vm.ID]
				s.log.Info("adopting vm of an expired lease", "vm", vm.ID, "tenant", vm.TenantID)
				s.reconcileVM(ctx, hv, vm, rt, d, ok, &adopting)
			}
			continue
		}
		d, ok := present[vm.ID]
		if !ok {
			// Events usually beat this; it catches what they missed.
			switch {
			case vm.State == StateStopping:
				s.stopped(vm, rt, "shut down: domain gone")
			case vm.State == StateBooting && (vm.Phase == PhaseQueued || vm.Phase == PhaseDefining):
				s.failBoot(vm, nil, errors.New("boot abandoned before its domain was defined"))
			default:
				s.markLost(vm, "domain gone")
			}
			continue
		}
		seen = append(seen, vm.ID)
		if vm.State == StateRunning && d.State == hypervisor.StateRunning && (rt == nil || rt.getClient() == nil) {
			s.redial(hv, vm, d)
		}
	}
	if refresh {
		if err := s.store.touch(ctx, seen); err != nil {
			s.log.Warn("monitor: touch vms", "err", err)
		}
		s.refreshHost(h)
	}
}

// redial re-opens the agent session of a running VM that lost it, at most
// every 10 s per VM.
func (s *Service) redial(hv Hypervisor, vm VM, d hypervisor.DomainInfo) {
	rt := s.runtimeFor(vm)
	rt.mu.Lock()
	if s.cfg.Clock.Now().Before(rt.nextRedial) {
		rt.mu.Unlock()
		return
	}
	rt.nextRedial = s.cfg.Clock.Now().Add(10 * time.Second)
	rt.mu.Unlock()
	s.startTask(rt, func(ctx context.Context) {
		client, err := s.handshake(ctx, hv, vm, s.cfg.AdoptTimeout, nil)
		if err != nil {
			s.log.Info("agent redial failed", "vm", vm.ID, "channel_busy", channelBusy(err), "err", err)
			return
		}
		rt.setClient(client)
		s.watchAgent(rt, client)
		s.log.Info("agent session re-opened", "vm", vm.ID)
	})
}

// channelBusy reports whether opening a VM's agent channel failed because
// another client holds it (libvirt: "Active channel stream exists"), not
// because the VM or its agent is broken.
func channelBusy(err error) bool { return errors.Is(err, hypervisor.ErrConflict) }
