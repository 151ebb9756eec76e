package vmpool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Pool returns the tenant's pool settings.
func (s *Service) Pool(ctx context.Context, tenantID string) (Pool, error) {
	return s.store.Pool(ctx, tenantID)
}

// Quota returns the tenant's quota.
func (s *Service) Quota(ctx context.Context, tenantID string) (tenants.Quota, error) {
	return s.tenants.Quota(ctx, tenantID)
}

// SetPool saves the tenant's pool settings (see Store.SetPool) and
// reconciles the pool at once.
func (s *Service) SetPool(ctx context.Context, actor audit.Actor, tenantID string, in PoolSettings) (Pool, error) {
	p, err := s.store.SetPool(ctx, actor, tenantID, in)
	if err != nil {
		return Pool{}, err
	}
	s.clearBackoff(tenantID)
	s.kick(tenantID)
	return p, nil
}

// guest loads the guest image to boot.
func (s *Service) guest() (image.Guest, error) {
	m, err := image.Load(s.cfg.DataDir)
	if err != nil {
		return image.Guest{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return m.Guest, nil
}

// Create boots one VM in the tenant's pool: it checks a host is reachable
// and the guest image is there, records the VM (pool and quota checked in
// the same transaction, audited vm.created) and returns it in state booting
// while the boot goes on in the background. With no reachable host nothing
// is written and the error wraps ErrUnavailable.
func (s *Service) Create(ctx context.Context, actor audit.Actor, tenantID string) (VM, error) {
	if s.cfg.Freezes != nil {
		if err := s.cfg.Freezes.CheckNotFrozen(ctx, tenantID); err != nil {
			return VM{}, fmt.Errorf("create vm: %w", err)
		}
	}
	pool, err := s.store.Pool(ctx, tenantID)
	if err != nil {
		return VM{}, err
	}
	live, err := s.liveCandidates(pool.MemoryMiB)
	if err != nil {
		return VM{}, fmt.Errorf("create vm: %w", err)
	}
	guest, err := s.guest()
	if err != nil {
		return VM{}, fmt.Errorf("create vm: %w", err)
	}
	vm, err := s.store.CreateVM(ctx, actor, tenantID, NewVM{Live: live, ImageVersion: guest.Version})
	if err != nil {
		return VM{}, err
	}
	s.startBoot(vm, guest)
	return vm, nil
}

// Destroy stops the tenant's VM at once and removes its domain, whatever
// it was doing (a boot under way is cancelled). It is audited vm.destroyed.
// Another tenant's VM is ErrNotFound; an ended one ErrConflict; with its host
// unreachable ErrUnavailable and nothing changes.
func (s *Service) Destroy(ctx context.Context, actor audit.Actor, tenantID, id string) (VM, error) {
	vm, err := s.store.VM(ctx, tenantID, id)
	if err != nil {
		return VM{}, err
	}
	if !vm.State.Active() {
		return VM{}, fmt.Errorf("destroy vm %s: %w: it is already %s", id, errdefs.ErrConflict, vm.State)
	}
	_, hv, err := s.liveHost(vm.HostURI)
	if err != nil {
		return VM{}, fmt.Errorf("destroy vm %s: %w", id, err)
	}
	rt := s.runtimeFor(vm)
	rt.setDestroying(true)
	if vm.State != StateStopping {
		if vm, err = s.store.beginStop(ctx, actor, tenantID, id, "destroyed", ""); err != nil {
			rt.setDestroying(false)
			return VM{}, err
		}
	}
	if err := s.destroyDomain(ctx, rt, hv, id); err != nil {
		// Stays stopping: the reconcile after libvirt comes back finishes it.
		return VM{}, fmt.Errorf("destroy vm %s: %w", id, err)
	}
	vm, _, err = s.store.end(ctx, id, []State{StateStopping}, StateStopped, "destroyed",
		eventPtr(actor.Event(tenantID, audit.TypeVMDestroyed, "vm", id, map[string]any{"host": vm.HostURI})))
	s.dropRuntime(id)
	s.kick(tenantID)
	if err != nil {
		return VM{}, err
	}
	return vm, nil
}

// destroyDomain cancels the VM's task, closes its agent session and
// destroys its domain (already gone is fine).
func (s *Service) destroyDomain(ctx context.Context, rt *runtime, hv Hypervisor, id string) error {
	rt.stopTask(errDestroyed, 60*time.Second)
	rt.closeClient()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	if err := hv.Destroy(ctx, id); err != nil && !errors.Is(err, hypervisor.ErrNotFound) {
		if errors.Is(err, hypervisor.ErrUnavailable) {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
	return nil
}

// Stop asks the agent of the tenant's running VM to shut the guest down. The
// VM is stopping until its domain ends (then stopped, audited vm.stopped);
// after StopTimeout it is destroyed. A VM that is not running is
// ErrConflict: destroy a booting one instead.
func (s *Service) Stop(ctx context.Context, actor audit.Actor, tenantID, id string) (VM, error) {
	vm, err := s.store.VM(ctx, tenantID, id)
	if err != nil {
		return VM{}, err
	}
	if vm.State != StateRunning {
		return VM{}, fmt.Errorf("stop vm %s: %w: it is %s; only a running vm stops gracefully (destroy it instead)", id, errdefs.ErrConflict, vm.State)
	}
	_, hv, err := s.liveHost(vm.HostURI)
	if err != nil {
		return VM{}, fmt.Errorf("stop vm %s: %w", id, err)
	}
	rt := s.runtimeFor(vm)
	client := rt.getClient()
	if client == nil {
		return VM{}, fmt.Errorf("stop vm %s: %w: its agent is not connected (destroy it instead)", id, errdefs.ErrConflict)
	}
	rt.mu.Lock()
	rt.stopActor = &actor
	rt.mu.Unlock()
	if vm, err = s.store.beginStop(ctx, actor, tenantID, id, "shutdown", ""); err != nil {
		return VM{}, err
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = client.Shutdown(sctx)
	cancel()
	if err != nil {
		s.log.Warn("agent shutdown failed: destroying", "vm", id, "err", err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		wait := s.cfg.StopTimeout
		if err != nil {
			wait = 0
		}
		select {
		case <-s.stop.Done():
			return
		case <-s.cfg.Clock.After(wait):
		}
		s.finishStop(hv, vm, actor)
	}()
	return vm, nil
}

// finishStop destroys a VM whose graceful stop did not end it in time.
func (s *Service) finishStop(hv Hypervisor, vm VM, actor audit.Actor) {
	ctx, cancel := s.stop.Bound(context.Background())
	defer cancel()
	cur, err := s.store.vmByID(ctx, vm.ID)
	if err != nil || cur.State != StateStopping {
		return
	}
	rt := s.runtimeFor(vm)
	rt.setDestroying(true)
	if err := s.destroyDomain(ctx, rt, hv, vm.ID); err != nil {
		s.log.Warn("destroy vm after stop timeout", "vm", vm.ID, "err", err)
		return
	}
	if _, changed, err := s.store.end(ctx, vm.ID, []State{StateStopping}, StateStopped, "shutdown timed out: destroyed",
		eventPtr(actor.Event(vm.TenantID, audit.TypeVMStopped, "vm", vm.ID, map[string]any{"forced": true}))); err != nil {
		s.log.Warn("record stopped vm", "vm", vm.ID, "err", err)
	} else if changed {
		s.log.Warn("vm did not stop in time: destroyed", "vm", vm.ID)
	}
	s.dropRuntime(vm.ID)
	s.kick(vm.TenantID)
}

// Recycle replaces the tenant's running VM with a fresh one of the current
// pool settings: in one transaction the old VM goes to stopping (audited
// vm.recycled) and the new one is recorded (vm.created; the old one no
// longer counts against the pool and quota), then the new one boots while
// the old one is destroyed.
func (s *Service) Recycle(ctx context.Context, actor audit.Actor, tenantID, id string) (old, replacement VM, err error) {
	if old, err = s.store.VM(ctx, tenantID, id); err != nil {
		return VM{}, VM{}, err
	}
	if old.State != StateRunning {
		return VM{}, VM{}, fmt.Errorf("recycle vm %s: %w: it is %s; only a running vm can be recycled", id, errdefs.ErrConflict, old.State)
	}
	_, oldHV, err := s.liveHost(old.HostURI)
	if err != nil {
		return VM{}, VM{}, fmt.Errorf("recycle vm %s: %w", id, err)
	}
	pool, err := s.store.Pool(ctx, tenantID)
	if err != nil {
		return VM{}, VM{}, err
	}
	live, err := s.liveCandidates(pool.MemoryMiB)
	if err != nil {
		return VM{}, VM{}, fmt.Errorf("recycle vm %s: %w", id, err)
	}
	guest, err := s.guest()
	if err != nil {
		return VM{}, VM{}, fmt.Errorf("recycle vm %s: %w", id, err)
	}
	rt := s.runtimeFor(old)
	rt.setDestroying(true)
	replacement, err = s.store.CreateVM(ctx, actor, tenantID, NewVM{Live: live, ImageVersion: guest.Version, Replaces: id})
	if err != nil {
		rt.setDestroying(false)
		return VM{}, VM{}, err
	}
	s.startBoot(replacement, guest)
	if err := s.destroyDomain(ctx, rt, oldHV, id); err != nil {
		return VM{}, VM{}, fmt.Errorf("recycle vm %s: %w", id, err)
	}
	old, _, err = s.store.end(ctx, id, []State{StateStopping}, StateStopped, "recycled", nil)
	s.dropRuntime(id)
	if err != nil {
		return VM{}, VM{}, err
	}
	return old, replacement, nil
}

// recycleAged destroys an idle VM past its recycle time (audited
// vm.recycled); the pool's warm setting decides whether it is replaced.
func (s *Service) recycleAged(ctx context.Context, vm VM) {
	_, hv, err := s.liveHost(vm.HostURI)
	if err != nil {
		return
	}
	rt := s.runtimeFor(vm)
	rt.setDestroying(true)
	if _, err := s.store.beginStop(ctx, SystemActor(), vm.TenantID, vm.ID, "recycled", audit.TypeVMRecycled); err != nil {
		rt.setDestroying(false)
		return
	}
	if err := s.destroyDomain(ctx, rt, hv, vm.ID); err != nil {
		s.log.Warn("recycle vm", "vm", vm.ID, "err", err)
		return
	}
	if _, _, err := s.store.end(ctx, vm.ID, []State{StateStopping}, StateStopped, "recycled", nil); err != nil {
		s.log.Warn("record recycled vm", "vm", vm.ID, "err", err)
	}
	s.dropRuntime(vm.ID)
	s.log.Info("vm recycled", "vm", vm.ID, "tenant", vm.TenantID, "age", s.cfg.Clock.Now().Sub(vm.CreatedAt).Round(time.Second))
}

// Acquire hands out one of the tenant's idle running VMs, checked alive
// with an agent ping: no boot is ever on this path. The pool then tops
// itself up to its warm count. ErrNoIdleVM when none is idle.
func (s *Service) Acquire(ctx context.Context, tenantID string) (VM, error) {
	vm, err := s.store.acquire(ctx, tenantID)
	if err != nil {
		return VM{}, err
	}
	s.kick(tenantID)
	rt := s.lookupRuntime(vm.ID)
	var client *agentproto.Client
	if rt != nil {
		client = rt.getClient()
	}
	if client == nil {
		_ = s.store.release(context.WithoutCancel(ctx), tenantID, vm.ID)
		return VM{}, fmt.Errorf("acquire vm %s: %w: its agent is not connected", vm.ID, ErrUnavailable)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := client.Ping(pctx); err != nil {
		_ = s.store.release(context.WithoutCancel(ctx), tenantID, vm.ID)
		return VM{}, fmt.Errorf("acquire vm %s: %w: %w", vm.ID, ErrUnavailable, err)
	}
	return vm, nil
}

// Release returns an acquired VM to the tenant's idle pool.
func (s *Service) Release(ctx context.Context, tenantID, id string) error {
	if err := s.store.release(ctx, tenantID, id); err != nil {
		return err
	}
	s.kick(tenantID)
	return nil
}

// Status is a VM with what is known of it live.
type Status struct {
	VM
	// CPUTime is the guest CPU time libvirt reported (0 when unknown).
	CPUTime time.Duration
	// CPUPercent is CPU use over the last monitor interval, as a share of
	// the VM's vCPUs; -1 when unknown.
	CPUPercent float64
	// Uptime is the guest's own uptime when the agent answered (Get), else
	// the time since the handshake.
	Uptime         time.Duration
	AgentConnected bool
	// Guest is the agent's stats snapshot (Get only; nil if it did not answer).
	Guest *agentproto.Stats
}

func (s *Service) status(vm VM) Status {
	st := Status{VM: vm, CPUPercent: -1}
	if vm.State == StateRunning && vm.StartedAt != nil {
		st.Uptime = s.cfg.Clock.Now().Sub(*vm.StartedAt) + time.Duration(vm.BootMS)*time.Millisecond
	}
	if h := s.hostByURI(vm.HostURI); h != nil && vm.State.Active() {
		h.mu.Lock()
		if c, ok := h.cpu[vm.ID]; ok {
			st.CPUTime, st.CPUPercent = c.cpu, c.percent
		}
		h.mu.Unlock()
	}
	if rt := s.lookupRuntime(vm.ID); rt != nil {
		st.AgentConnected = rt.getClient() != nil
	}
	return st
}

// List returns the tenant's VMs (active ones, then recently ended) with
// their last sampled CPU use.
func (s *Service) List(ctx context.Context, tenantID string) ([]Status, error) {
	vms, err := s.store.VMs(ctx, tenantID)
	return s.statuses(vms), err
}

// ListAll is List across every tenant, for platform operators.
func (s *Service) ListAll(ctx context.Context) ([]Status, error) {
	vms, err := s.store.AllVMs(ctx)
	return s.statuses(vms), err
}

// statuses is the status of each of vms, in their order (nil for none).
func (s *Service) statuses(vms []VM) []Status {
	if vms == nil {
		return nil
	}
	out := make([]Status, len(vms))
	for i, vm := range vms {
		out[i] = s.status(vm)
	}
	return out
}

// Get returns the tenant's VM with live numbers: libvirt's CPU time and,
// when its agent answers within a few seconds, the guest's own stats.
func (s *Service) Get(ctx context.Context, tenantID, id string) (Status, error) {
	vm, err := s.store.VM(ctx, tenantID, id)
	if err != nil {
		return Status{}, err
	}
	st := s.status(vm)
	if !vm.State.Active() {
		return st, nil
	}
	if _, hv, err := s.liveHost(vm.HostURI); err == nil {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if info, err := hv.Lookup(lctx, id); err == nil {
			st.CPUTime = info.CPUTime
		}
		cancel()
	}
	if rt := s.lookupRuntime(id); rt != nil && vm.State == StateRunning {
		if c := rt.getClient(); c != nil {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if gs, err := c.Stats(sctx); err == nil {
				st.Guest = &gs
				st.Uptime = gs.Uptime
			} else {
				s.log.Debug("agent stats", "vm", id, "err", err)
			}
			cancel()
		}
	}
	return st, nil
}

// kick asks the reconcile loop to look at a tenant's pool now.
func (s *Service) kick(tenantID string) {
	select {
	case s.kickc <- tenantID:
	default: // the periodic pass will get to it
	}
}
