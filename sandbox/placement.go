package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/sandbox/volumes"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// errNoRoom: no running VM of the tenant can take the sandbox now.
var errNoRoom = errors.New("no vm with room")

// maxPlaceAttempts bounds how often placement boots (or waits for) a VM
// before giving up.
const maxPlaceAttempts = 4

// place puts a recorded sandbox on one of its tenant's VMs: a running VM
// that already holds sandboxes and has room, else an idle (warm) one, else
// one booted for it within the pool and quota. It returns the VM, handed out
// to sandboxes (acquired), and its agent session.
func (s *Service) place(ctx context.Context, actor audit.Actor, sb Sandbox, plan volumes.Plan) (vmpool.VM, *agentproto.Client, error) {
	for attempt := 0; attempt < maxPlaceAttempts; attempt++ {
		vm, c, err := s.placeNow(ctx, sb, plan)
		if !errors.Is(err, errNoRoom) {
			return vm, c, err
		}
		if plan.Pin != "" {
			return vmpool.VM{}, nil, fmt.Errorf("%w: a volume it asks for is attached read-write to vm %s, which has no room for it", errdefs.ErrConflict, plan.Pin)
		}
		if err := s.growPool(ctx, actor, sb); err != nil {
			return vmpool.VM{}, nil, err
		}
	}
	return vmpool.VM{}, nil, fmt.Errorf("%w: no vm of the tenant had room after %d tries", vmpool.ErrUnavailable, maxPlaceAttempts)
}

// fits reports whether a VM holding load can take sb as well: a sandbox
// more than the VM's agent takes (the capacity rule), and memory limits
// within the VM's memory (times MemoryOvercommit).
func (s *Service) fits(vm vmpool.VM, load vmLoad, sb Sandbox) bool {
	limits := int(float64(vm.MemoryMiB-s.cfg.GuestReserveMiB) * s.cfg.MemoryOvercommit)
	return load.Sandboxes < perVM(vm.MemoryMiB, s.cfg.MaxPerVM) && sb.VCPUs <= vm.VCPUs &&
		sb.MemoryMiB <= vm.MemoryMiB-s.cfg.GuestReserveMiB && load.MemoryMiB+sb.MemoryMiB <= limits
}

// perVM is how many sandboxes a VM of memMiB holds: what its agent takes
// (agentproto.SandboxCapacity of the MemTotal it will see), within max
// when max is set.
func perVM(memMiB, max int) int {
	n := agentproto.SandboxCapacity(agentproto.GuestMemTotalMiB(memMiB))
	if max > 0 {
		n = min(n, max)
	}
	return n
}

// placeNow places sb on a VM that runs already, or answers errNoRoom. The
// tenant lock makes the choice and its record one step against other
// placements and releases.
func (s *Service) placeNow(ctx context.Context, sb Sandbox, plan volumes.Plan) (vmpool.VM, *agentproto.Client, error) {
	mu := s.tenantLock(sb.TenantID)
	mu.Lock()
	defer mu.Unlock()
	sts, err := s.vms.List(ctx, sb.TenantID)
	if err != nil {
		return vmpool.VM{}, nil, err
	}
	load, err := s.store.loadByVM(ctx, sb.TenantID)
	if err != nil {
		return vmpool.VM{}, nil, err
	}
	closed, err := s.vms.ClosedHosts(ctx)
	if err != nil {
		return vmpool.VM{}, nil, err
	}
	// The fullest VM with room first: sandboxes pack onto few VMs, so the
	// others go back to idle, to be reused or recycled.
	var cands []vmpool.VM
	for _, st := range sts {
		vm := st.VM
		if vm.State == vmpool.StateRunning && vm.AcquiredAt != nil && st.AgentConnected && !closed[vm.HostURI] && s.fits(vm, load[vm.ID], sb) {
			cands = append(cands, vm)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return load[cands[i].ID].Sandboxes > load[cands[j].ID].Sandboxes })
	// Volumes: only the VM a volume is attached read-write to, else the
	// ones holding its disks first.
	cands = volumes.Order(plan, cands, func(vm vmpool.VM) string { return vm.ID })
	if plan.Pin != "" && len(cands) == 0 {
		return vmpool.VM{}, nil, errNoRoom
	}
	for _, vm := range cands {
		c, err := s.vms.Agent(ctx, sb.TenantID, vm.ID)
		if err != nil {
			continue
		}
		if err := s.store.place(ctx, sb.ID, vm.ID); err != nil {
			return vmpool.VM{}, nil, err
		}
		return vm, c, nil
	}
	vm, err := s.vms.Acquire(ctx, sb.TenantID)
	switch {
	case errors.Is(err, vmpool.ErrNoIdleVM):
		return vmpool.VM{}, nil, errNoRoom
	case err != nil:
		return vmpool.VM{}, nil, err
	}
	release := func() {
		if err := s.vms.Release(context.WithoutCancel(ctx), sb.TenantID, vm.ID); err != nil {
			s.log.Warn("release vm", "vm", vm.ID, "err", err)
		}
	}
	if !s.fits(vm, vmLoad{}, sb) {
		// A VM of an older, smaller pool size: leave it idle for recycling.
		release()
		return vmpool.VM{}, nil, errNoRoom
	}
	c, err := s.vms.Agent(ctx, sb.TenantID, vm.ID)
	if err != nil {
		release()
		return vmpool.VM{}, nil, err
	}
	if err := s.store.place(ctx, sb.ID, vm.ID); err != nil {
		release()
		return vmpool.VM{}, nil, err
	}
	return vm, c, nil
}

// growPool makes a VM of the tenant available for sb: it waits for one that
// is booting already (a warm one on its way), or boots one. A pool or quota
// that allows no more VMs is the *errdefs.QuotaError saying which.
func (s *Service) growPool(ctx context.Context, actor audit.Actor, sb Sandbox) error {
	bmu := s.bootLock(sb.TenantID)
	bmu.Lock()
	defer bmu.Unlock()
	// Another create may have made room while this one waited for the lock.
	if ok, err := s.roomNow(ctx, sb); err != nil || ok {
		return err
	}
	sts, err := s.vms.List(ctx, sb.TenantID)
	if err != nil {
		return err
	}
	for _, st := range sts {
		if st.VM.State == vmpool.StateBooting {
			return s.waitRunning(ctx, sb.TenantID, st.VM.ID)
		}
	}
	vm, err := s.vms.Create(ctx, actor, sb.TenantID)
	if err != nil {
		return err
	}
	s.log.Info("booting a vm for a sandbox", "vm", vm.ID, "tenant", sb.TenantID, "sandbox", sb.ID)
	return s.waitRunning(ctx, sb.TenantID, vm.ID)
}

// roomNow reports whether placeNow would find a VM for sb.
func (s *Service) roomNow(ctx context.Context, sb Sandbox) (bool, error) {
	mu := s.tenantLock(sb.TenantID)
	mu.Lock()
	defer mu.Unlock()
	sts, err := s.vms.List(ctx, sb.TenantID)
	if err != nil {
		return false, err
	}
	load, err := s.store.loadByVM(ctx, sb.TenantID)
	if err != nil {
		return false, err
	}
	closed, err := s.vms.ClosedHosts(ctx)
	if err != nil {
		return false, err
	}
	for _, st := range sts {
		vm := st.VM
		if vm.State == vmpool.StateRunning && st.AgentConnected && !closed[vm.HostURI] && s.fits(vm, load[vm.ID], sb) {
			return true, nil // acquired with room, or idle
		}
	}
	return false, nil
}

// waitRunning waits until the tenant's VM has booted.
func (s *Service) waitRunning(ctx context.Context, tenantID, id string) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		vm, err := s.vms.VM(ctx, tenantID, id)
		if err != nil {
			return err
		}
		switch {
		case vm.State == vmpool.StateRunning:
			return nil
		case vm.State != vmpool.StateBooting:
			return fmt.Errorf("%w: vm %s did not boot: %s (%s)", vmpool.ErrUnavailable, id, vm.State, vm.StateReason)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for vm %s to boot: %w", id, ctx.Err())
		case <-t.C:
		}
	}
}

// releaseIfEmpty returns a VM to the tenant's idle pool once no active
// sandbox is placed on it.
func (s *Service) releaseIfEmpty(ctx context.Context, tenantID, vmID string) {
	if vmID == "" || s.vms.Started() != nil {
		return
	}
	mu := s.tenantLock(tenantID)
	mu.Lock()
	defer mu.Unlock()
	n, err := s.store.activeOnVM(ctx, vmID)
	if err != nil {
		s.log.Warn("release vm", "vm", vmID, "err", err)
		return
	}
	if n > 0 {
		return
	}
	if err := s.vms.Release(ctx, tenantID, vmID); err != nil && !errors.Is(err, errdefs.ErrConflict) && !errors.Is(err, errdefs.ErrNotFound) {
		s.log.Warn("release vm", "vm", vmID, "err", err)
	}
}
