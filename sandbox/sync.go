package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// loop checks the sandboxes every SyncInterval until Close.
func (s *Service) loop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
		if err := s.sync(ctx, false); err != nil && s.ctx.Err() == nil {
			s.log.Warn("sync sandboxes", "err", err)
		}
		cancel()
	}
}

// vmKey names one VM of one tenant.
type vmKey struct{ tenant, vm string }

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
//     destroyed in the guest;
//   - a VM handed out to sandboxes that holds none goes back to idle.
//
// Creates under way in this process are left alone.
func (s *Service) sync(ctx context.Context, startup bool) error {
	sbs, err := s.store.active(ctx)
	if err != nil {
		return err
	}
	now := s.cfg.Clock()
	abandoned := func(sb Sandbox) bool {
		return sb.State == StateCreating && (startup || now.Sub(sb.CreatedAt) > s.cfg.CreateTimeout)
	}
	s.pruneMissing(sbs)
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
		return err
	}
	for _, st := range all {
		vm := st.VM
		if vm.State != vmpool.StateRunning {
			continue
		}
		k := vmKey{vm.TenantID, vm.ID}
		// Every running VM is asked: one may hold a sandbox whose record
		// ended while its agent was out of reach.
		if _, ok := groups[k]; !ok && vm.AcquiredAt == nil && vm.SandboxesServed == 0 {
			continue // never held a sandbox
		}
		s.syncVM(ctx, vm, groups[k], abandoned)
		delete(groups, k)
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
	return nil
}

// syncVM checks the sandboxes of one running VM against its agent.
func (s *Service) syncVM(ctx context.Context, vm vmpool.VM, group []Sandbox, abandoned func(Sandbox) bool) {
	now := s.cfg.Clock()
	c, err := s.vms.Agent(ctx, vm.TenantID, vm.ID)
	if err != nil {
		return // its session is being re-opened: next time
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	list, err := c.ListSandboxes(lctx)
	cancel()
	if err != nil {
		s.log.Debug("list sandboxes of vm", "vm", vm.ID, "err", err)
		return
	}
	inGuest := make(map[string]agentproto.SandboxInfo, len(list.Sandboxes))
	for _, a := range list.Sandboxes {
		inGuest[a.ID] = a
	}
	known := make(map[string]bool, len(group))
	for _, sb := range group {
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
		case a.State == agentproto.SandboxRunning && sb.State == StateRunning && !now.Before(sb.ExpiresAt):
			if _, err := s.destroy(ctx, sb, SystemActor(), ReasonTimeout); err != nil {
				s.log.Warn("destroy expired sandbox", "sandbox", sb.ID, "err", err)
			}
		case a.State == agentproto.SandboxRunning && sb.State == StateRunning:
		default:
			// Stopped in the guest (or stopped here with its record left
			// there): record why, then clean it up.
			s.stopped(ctx, sb, a, stoppedAt(a, s.cfg.Clock()))
		}
	}
	for _, a := range list.Sandboxes {
		if known[a.ID] || s.isInflight(a.ID) || a.State == agentproto.SandboxCreating {
			continue
		}
		rec, err := s.store.byID(ctx, a.ID)
		switch {
		case err == nil && rec.TenantID != vm.TenantID:
			s.log.Error("a vm holds a sandbox of another tenant: destroying it", "vm", vm.ID, "sandbox", a.ID)
		case err == nil && rec.State.Active():
			continue // recorded since the list was read
		case err != nil && !errors.Is(err, tenants.ErrNotFound):
			continue
		}
		s.log.Warn("destroying a sandbox no active record accounts for", "vm", vm.ID, "sandbox", a.ID, "state", a.State)
		s.removeFromAgent(c, a.ID)
		if err := s.store.record(ctx, SystemActor().Event(vm.TenantID, audit.TypeSandboxDestroyed, "sandbox", a.ID,
			map[string]any{"vm": vm.ID, "reason": "orphan: no active record"})); err != nil {
			s.log.Warn("audit orphan sandbox", "err", err)
		}
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
// clock (its wall clock may be off). Nil when unknown.
func stoppedAt(a agentproto.SandboxInfo, hostNow time.Time) *time.Time {
	if a.Final == nil {
		return nil
	}
	at := hostNow.Add(-a.StoppedAgo)
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
