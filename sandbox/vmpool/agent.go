package vmpool

import (
	"context"
	"fmt"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Agent returns the agent session of the tenant's running VM, for the
// sandbox service that places work on it. Another tenant's VM is
// errdefs.ErrNotFound; a VM that is not running is errdefs.ErrConflict;
// a running one whose session is down (the monitor re-opens it) is
// ErrUnavailable.
func (s *Service) Agent(ctx context.Context, tenantID, vmID string) (*agentproto.Client, error) {
	vm, err := s.store.VM(ctx, tenantID, vmID)
	if err != nil {
		return nil, err
	}
	if vm.State != StateRunning {
		return nil, fmt.Errorf("agent of vm %s: %w: the vm is %s", vmID, errdefs.ErrConflict, vm.State)
	}
	if rt := s.lookupRuntime(vmID); rt != nil {
		if c := rt.getClient(); c != nil {
			return c, nil
		}
	}
	return nil, fmt.Errorf("agent of vm %s: %w: its agent session is down", vmID, ErrUnavailable)
}

// VM returns the tenant's VM with that id as stored (no live numbers: Get
// asks libvirt and the agent).
func (s *Service) VM(ctx context.Context, tenantID, id string) (VM, error) {
	return s.store.VM(ctx, tenantID, id)
}

// CPUTime is the CPU time libvirt measured for the tenant's running VM
// since it started, read now: the host's own figure, which metering holds
// the guest's reports against. Another tenant's VM is errdefs.ErrNotFound;
// one that is not running is errdefs.ErrConflict.
func (s *Service) CPUTime(ctx context.Context, tenantID, vmID string) (time.Duration, error) {
	vm, err := s.store.VM(ctx, tenantID, vmID)
	if err != nil {
		return 0, err
	}
	if vm.State != StateRunning {
		return 0, fmt.Errorf("cpu time of vm %s: %w: the vm is %s", vmID, errdefs.ErrConflict, vm.State)
	}
	_, hv, err := s.liveHost(vm.HostURI)
	if err != nil {
		return 0, fmt.Errorf("cpu time of vm %s: %w", vmID, err)
	}
	info, err := hv.Lookup(ctx, vmID)
	if err != nil {
		return 0, fmt.Errorf("cpu time of vm %s: %w", vmID, err)
	}
	return info.CPUTime, nil
}
