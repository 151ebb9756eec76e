package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/volumes"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// planVolumes checks the volumes a create asks for, before anything is
// written, and says where the sandbox may go.
func (s *Service) planVolumes(ctx context.Context, tenantID string, reqs []volumes.Request) (volumes.Plan, error) {
	if len(reqs) == 0 {
		return volumes.Plan{}, nil
	}
	if s.cfg.Volumes == nil {
		return volumes.Plan{}, errdefs.Invalid("volumes", "unsupported", "this server keeps no volumes")
	}
	return s.cfg.Volumes.Plan(ctx, tenantID, reqs)
}

// attachVolumes attaches and mounts sb's volumes on its VM and returns
// their binds.
func (s *Service) attachVolumes(ctx context.Context, actor audit.Actor, sb Sandbox, reqs []volumes.Request, c *agentproto.Client) ([]agentproto.VolumeBind, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	binds, err := s.cfg.Volumes.Attach(ctx, actor, sb.TenantID, sb.ID, sb.VMID, reqs, c)
	if err != nil {
		return nil, fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	return binds, nil
}

// volumesEnded releases the volumes of a sandbox that ended before its end
// is told further: the next create may want the same volume read-write.
func (s *Service) volumesEnded(tenantID, sandboxID, _ string) {
	if s.cfg.Volumes == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s.cfg.Volumes.Release(ctx, tenantID, sandboxID, func(vmID string) (volumes.Guest, error) {
		return s.vms.Agent(ctx, tenantID, vmID)
	})
}
