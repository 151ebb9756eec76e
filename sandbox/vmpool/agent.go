package vmpool

import (
	"context"
	"fmt"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants"
)

// Agent returns the agent session of the tenant's running VM, for the
// sandbox service that places work on it. Another tenant's VM is
// tenants.ErrNotFound; a VM that is not running is tenants.ErrConflict;
// a running one whose session is down (the monitor re-opens it) is
// ErrUnavailable.
func (s *Service) Agent(ctx context.Context, tenantID, vmID string) (*agentproto.Client, error) {
	vm, err := s.store.VM(ctx, tenantID, vmID)
	if err != nil {
		return nil, err
	}
	if vm.State != StateRunning {
		return nil, fmt.Errorf("agent of vm %s: %w: the vm is %s", vmID, tenants.ErrConflict, vm.State)
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
