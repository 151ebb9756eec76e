package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// loop checks the sandboxes every SyncInterval until Close.
func (s *Service) loop() {
	s.every(s.cfg.SyncInterval, 2*time.Minute, func(ctx context.Context) {
		if _, err := s.sync(ctx, false); err != nil && s.stop.Err() == nil {
			s.log.Warn("sync sandboxes", "err", err)
		}
	})
}

// every runs pass on the service's clock every interval until Close, each
// pass under a context that ends after bound or at Close. It ends the
// caller's s.wg share.
func (s *Service) every(interval, bound time.Duration, pass func(ctx context.Context)) {
	defer s.wg.Done()
	t := s.cfg.Clock.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop.Done():
			return
		case <-t.Chan():
		}
		ctx, cancel := s.stop.WithTimeout(context.Background(), bound)
		pass(ctx)
		cancel()
	}
}

// vmKey names one VM of one tenant.
type vmKey struct{ tenant, vm string }

// maxOrphansPerPass bounds, per VM and pass, the sandboxes its agent lists
// that no active record accounts for which the pass looks up, destroys in
// the guest and audits: a guest listing thousands of ids costs a few
// lookups and calls per pass, never thousands. The rest wait for the next
// passes (a real orphan is still cleaned up, a little later).
const maxOrphansPerPass = 4

// sync brings the stored sandboxes and the agents into agreement, and
// enforces lifetimes:
//   - a sandbox past its lifetime is destroyed (reason timeout);
//   - one the agent stopped (lifetime, idle, out of memory, killed) is
//     recorded stopped with the agent's reason, then destroyed;
//   - one the agent does not have, or whose VM ended, is failed;
//   - a create cut short (a restart) is adopted when its agent finished it,
//     and failed otherwise: at startup at once, later once it is older than
//     CreateTimeout (another process may be creating it);
//   - a sandbox an agent holds that no active record accounts for is
//     destroyed in the guest (a few per VM and pass);
//   - a VM handed out to sandboxes that holds none goes back to idle.
//
// Creates under way in this process are left alone. Each running VM is
// synced in its own goroutine within VMSyncTimeout, so a guest that answers
// slowly or never holds up its own VM only: a VM whose previous sync is
// still running is skipped. wait waits for the VM syncs this pass started.
func (s *Service) sync(ctx context.Context, startup bool) (wait func(), err error) {
	var wg sync.WaitGroup
	wait = wg.Wait
	sbs, err := s.store.active(ctx)
	if err != nil {
		return wait, err
	}
	now := s.cfg.Clock.Now()
	abandoned := func(sb Sandbox) bool {
		return sb.State == StateCreating && ((startup && !s.cfg.Replicated) || now.Sub(sb.CreatedAt) > s.cfg.CreateTimeout)
	}
	s.pruneMissing(sbs)
	// Commands of sandboxes that ended died with them.
	if n, err := s.store.closeExecsOfEnded(ctx, ReasonLost, s.servedExecs()); err != nil {
		s.log.Warn("close commands of ended sandboxes", "err", err)
	} else if n > 0 {
		s.log.Info("closed the records of commands whose sandbox ended", "commands", n)
	}
	groups := map[vmKey][]Sandbox{}
	for _, sb := range sbs {
		if s.isInflight(sb.ID) {
			continue
		}
		if sb.VMID == "" {
			if abandoned(sb) {
				s.fail(ctx, sb, "create interrupted before it was placed on a vm")
			}
			continue
		}
		k := vmKey{sb.TenantID, sb.VMID}
		groups[k] = append(groups[k], sb)
	}
	all, err := s.vms.ListAll(ctx)
	if err != nil {
		return wait, err
	}
	running := map[vmKey]bool{}
	defer s.pruneOrphans(running)
	for _, st := range all {
		vm := st.VM
		if vm.State != vmpool.StateRunning {
			continue
		}
		k := vmKey{vm.TenantID, vm.ID}
		running[k] = true
		group, held := groups[k]
		delete(groups, k)
		// Every running VM is asked: one may hold a sandbox whose record
		// ended while its agent was out of reach.
		if !held && vm.AcquiredAt == nil && vm.SandboxesServed == 0 {
			continue // never held a sandbox
		}
		if !s.beginVMSync(k) {
			s.log.Debug("vm still syncing from an earlier pass", "vm", vm.ID)
			continue
		}
		wg.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer wg.Done()
			defer s.endVMSync(k)
			// Not the pass's ctx: the pass does not wait for this.
			vctx, cancel := s.stop.WithTimeout(context.Background(), s.cfg.VMSyncTimeout)
			defer cancel()
			s.syncVM(vctx, vm, group, abandoned)
		}()
	}
	// Whatever is left sits on a VM that no longer runs.
	for k, group := range groups {
		vm, err := s.vms.VM(ctx, k.tenant, k.vm)
		reason := "its vm is gone"
		if err == nil {
			reason = fmt.Sprintf("its vm %s is %s", shortID(vm.ID), vm.State)
			if vm.StateReason != "" {
				reason += ": " + vm.StateReason
			}
		}
		for _, sb := range group {
			if vm.State == vmpool.StateBooting {
				continue // cannot be: sandboxes go to running VMs only
			}
			s.fail(ctx, sb, reason)
		}
	}
	return wait, nil
}

// beginVMSync marks a VM's sync as running, false when it already is.
func (s *Service) beginVMSync(k vmKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.syncing[k] {
		return false
	}
	s.syncing[k] = true
	return true
}

func (s *Service) endVMSync(k vmKey) {
	s.mu.Lock()
	delete(s.syncing, k)
	s.mu.Unlock()
}

// maxOrphansRemembered bounds the orphan ids remembered per VM.
const maxOrphansRemembered = 1024

// orphanDone reports whether the VM's agent already destroyed that orphan:
// a guest that keeps listing it is not asked (nor audited) again.
func (s *Service) orphanDone(k vmKey, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.orphans[k][id]
}

func (s *Service) noteOrphan(k vmKey, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.orphans[k]
	if m == nil || len(m) >= maxOrphansRemembered {
		m = map[string]bool{}
		s.orphans[k] = m
	}
	m[id] = true
}

// pruneOrphans forgets the orphans of VMs no longer running.
func (s *Service) pruneOrphans(running map[vmKey]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.orphans {
		if !running[k] {
			delete(s.orphans, k)
		}
	}
}

// validGuestID reports whether an id a guest listed can be a sandbox id at
// all: the canonical text of a UUID, as newID makes them. Anything else is
// the guest's invention: never looked up, destroyed or audited.
func validGuestID(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && u.String() == id
}

// syncVM checks the sandboxes of one running VM against its agent, within
// ctx (the VM's deadline).
func (s *Service) syncVM(ctx context.Context, vm vmpool.VM, group []Sandbox, abandoned func(Sandbox) bool) {
	now := s.cfg.Clock.Now()
	k := vmKey{vm.TenantID, vm.ID}
	c, err := s.vms.Agent(ctx, vm.TenantID, vm.ID)
	if err != nil {
		return // its session is being re-opened: next time
	}
	list, err := c.ListSandboxes(ctx)
	if err != nil {
		s.log.Debug("list sandboxes of vm", "vm", vm.ID, "err", err)
		return
	}
	s.syncExecs(ctx, c, vm, group)
	inGuest := make(map[string]agentproto.SandboxInfo, len(list.Sandboxes))
	invalid := 0
	var listed []agentproto.SandboxInfo
	for _, a := range list.Sandboxes {
		if !validGuestID(a.ID) {
			invalid++
			continue
		}
		if _, dup := inGuest[a.ID]; !dup {
			inGuest[a.ID] = a
			listed = append(listed, a)
		}
	}
	if invalid > 0 {
		if ok, folded := s.guestLog.Admit("invalid-ids:"+vm.ID, now); ok {
			s.log.Warn("the agent of a vm listed ids that are no sandbox ids: ignored", "vm", vm.ID, "tenant", vm.TenantID,
				"ids", invalid, "earlier_passes_folded", folded)
		}
	}
	known := make(map[string]bool, len(group))
	for _, sb := range group {
		if ctx.Err() != nil {
			return // the VM's deadline passed: next time
		}
		known[sb.ID] = true
		a, present := inGuest[sb.ID]
		if present {
			s.found(sb.ID)
		}
		switch {
		case !present && sb.State == StateStopped:
			s.stopped(ctx, sb, agentproto.SandboxInfo{Reason: sb.StateReason}, nil)
		case !present && sb.State == StateCreating:
			if abandoned(sb) {
				s.fail(ctx, sb, "create interrupted: the agent never finished it")
			}
		case !present:
			// Missing twice in a row: another process may be between the
			// agent's destroy and the record's.
			if s.missedTwice(sb.ID) {
				s.fail(ctx, sb, "vanished: its agent no longer has it")
			}
		case a.State == agentproto.SandboxCreating:
			// The agent is still at it: look again next time.
		case a.State == agentproto.SandboxRunning && sb.State == StateCreating:
			s.adopt(ctx, sb, a)
		case a.State == agentproto.SandboxRunning && sb.State == StateRunning && a.Paused != sb.Paused():
			s.reapplyPause(ctx, sb, a)
		case a.State == agentproto.SandboxRunning && sb.State == StateRunning && !sb.Paused() && !now.Before(sb.ExpiresAt):
			if _, err := s.destroy(ctx, sb, SystemActor(), ReasonTimeout); err != nil {
				s.log.Warn("destroy expired sandbox", "sandbox", sb.ID, "err", err)
			}
		case a.State == agentproto.SandboxRunning && sb.State == StateRunning:
		default:
			// Stopped in the guest (or stopped here with its record left
			// there): record why, then clean it up.
			s.stopped(ctx, sb, a, s.stoppedAt(ctx, sb, a))
		}
	}
	examined, skipped := 0, 0
	for _, a := range listed {
		if known[a.ID] || s.isInflight(a.ID) || a.State == agentproto.SandboxCreating || s.orphanDone(k, a.ID) {
			continue
		}
		if examined >= maxOrphansPerPass || ctx.Err() != nil {
			skipped++
			continue
		}
		examined++
		rec, err := s.store.byID(ctx, a.ID)
		switch {
		case err == nil && rec.TenantID != vm.TenantID:
			s.log.Error("a vm holds a sandbox of another tenant: destroying it", "vm", vm.ID, "sandbox", a.ID)
		case err == nil && rec.State.Active():
			continue // recorded since the list was read
		case err != nil && !errors.Is(err, errdefs.ErrNotFound):
			continue
		}
		s.log.Warn("destroying a sandbox no active record accounts for", "vm", vm.ID, "sandbox", a.ID, "state", a.State)
		if _, err := c.DestroySandbox(ctx, a.ID); err != nil && !errors.Is(err, agentproto.ErrNotFound) {
			s.log.Warn("remove orphan sandbox from its agent", "vm", vm.ID, "sandbox", a.ID, "err", err)
			continue // asked again next time
		}
		s.noteOrphan(k, a.ID)
		ok, folded := s.guestLog.Admit("orphans:"+vm.ID, now)
		if !ok {
			continue
		}
		details := map[string]any{"vm": vm.ID, "reason": "orphan: no active record"}
		if folded > 0 {
			details["suppressed"] = folded
		}
		if err := s.store.record(ctx, SystemActor().Event(vm.TenantID, audit.TypeSandboxDestroyed, "sandbox", a.ID, details)); err != nil {
			s.log.Warn("audit orphan sandbox", "err", err)
		}
	}
	if skipped > 0 {
		s.log.Warn("more sandboxes without a record than a pass takes: the rest wait", "vm", vm.ID, "tenant", vm.TenantID,
			"examined", examined, "waiting", skipped)
	}
	if vm.AcquiredAt != nil && len(group) == 0 {
		s.releaseIfEmpty(ctx, vm.TenantID, vm.ID)
	}
}

// missedTwice notes that a sandbox is missing from its agent and reports
// whether it was missing at the previous sync too.
func (s *Service) missedTwice(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.missing[id] {
		delete(s.missing, id)
		return true
	}
	s.missing[id] = true
	return false
}

// pruneMissing forgets sandboxes that are no longer active.
func (s *Service) pruneMissing(active []Sandbox) {
	ids := make(map[string]bool, len(active))
	for _, sb := range active {
		ids[sb.ID] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.missing {
		if !ids[id] {
			delete(s.missing, id)
		}
	}
}

func (s *Service) found(id string) {
	s.mu.Lock()
	delete(s.missing, id)
	s.mu.Unlock()
}

// adopt takes over a sandbox whose create was cut short but which its agent
// finished.
func (s *Service) adopt(ctx context.Context, sb Sandbox, a agentproto.SandboxInfo) {
	_, changed, err := s.store.transition(ctx, sb.ID, change{
		From: []State{StateCreating}, To: StateRunning, Reason: "adopted: its create was interrupted but the agent finished it",
		Actor: "system", Set: map[string]any{"guest_ready_ms": a.Startup.Ready.Milliseconds()},
	})
	if err != nil {
		s.log.Warn("adopt sandbox", "sandbox", sb.ID, "err", err)
		return
	}
	if changed {
		s.log.Info("sandbox adopted", "sandbox", sb.ID, "tenant", sb.TenantID, "vm", sb.VMID)
	}
}

// stoppedAt is when, on the host's clock, the agent took the final sample
// of a sandbox that stopped: the agent says how long ago on its monotonic
// clock (its wall clock may be off). Nil when unknown. The guest's figure
// is clamped to what the host saw: never in the future, never before the
// last sample the host took of the sandbox running (else its start), so a
// guest can neither bill past now nor erase the time since that sample.
func (s *Service) stoppedAt(ctx context.Context, sb Sandbox, a agentproto.SandboxInfo) *time.Time {
	if a.Final == nil {
		return nil
	}
	now := s.store.now()
	floor := now
	if sb.StartedAt != nil {
		floor = *sb.StartedAt
	}
	if m, err := s.usage.Meter(ctx, sb.TenantID, sb.ID); err == nil && m.LastSampleAt != nil {
		floor = *m.LastSampleAt
	}
	ago := min(max(a.StoppedAgo, 0), max(now.Sub(floor), 0))
	at := now.Add(-ago)
	return &at
}

// stopped records a sandbox its agent stopped (audited sandbox.stopped),
// with its final sample and when it stopped (end; nil: now), then destroys
// what is left of it.
func (s *Service) stopped(ctx context.Context, sb Sandbox, a agentproto.SandboxInfo, end *time.Time) {
	reason := a.Reason
	if reason == "" {
		reason = "stopped"
	}
	if sb.State != StateStopped {
		ev := SystemActor().Event(sb.TenantID, audit.TypeSandboxStopped, "sandbox", sb.ID, map[string]any{"vm": sb.VMID})
		out, changed, err := s.store.transition(ctx, sb.ID, change{
			From: []State{StateCreating, StateRunning}, To: StateStopped, Reason: reason, Actor: "agent", Audit: &ev,
			Final: a.Final, End: end,
		})
		if err != nil {
			s.log.Warn("record stopped sandbox", "sandbox", sb.ID, "err", err)
			return
		}
		if !changed {
			return
		}
		sb = out
		s.log.Info("sandbox stopped by its agent", "sandbox", sb.ID, "tenant", sb.TenantID, "reason", reason)
	} else {
		reason = sb.StateReason
	}
	if _, err := s.destroy(ctx, sb, SystemActor(), reason); err != nil {
		s.log.Warn("clean up stopped sandbox", "sandbox", sb.ID, "err", err)
	}
}

func shortID(id string) string {
	if len(id) > 13 {
		return id[len(id)-12:]
	}
	return id
}
