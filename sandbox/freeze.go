package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
)

// ReasonFrozen ends the sandboxes of a tenant an operator froze.
const ReasonFrozen = "frozen"

// Freezes tells whether a tenant is frozen (incident response).
// *tenants.Store implements it; a frozen tenant's error wraps
// errdefs.ErrConflict and names the freeze.
type Freezes interface {
	CheckNotFrozen(ctx context.Context, tenantID string) error
}

func (s *Service) checkNotFrozen(ctx context.Context, tenantID string) error {
	if s.cfg.Freezes == nil {
		return nil
	}
	if err := s.cfg.Freezes.CheckNotFrozen(ctx, tenantID); err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	return nil
}

// DestroyTenant destroys every live sandbox of the tenant with reason,
// each audited sandbox.destroyed as actor's; recordings, command records
// and logs stay. Creates under way are waited for (up to CreateTimeout)
// and then destroyed too. It returns how many it destroyed; with sandboxes
// it could not destroy, the first error.
func (s *Service) DestroyTenant(ctx context.Context, actor audit.Actor, tenantID, reason string) (int, error) {
	deadline := time.Now().Add(s.cfg.CreateTimeout)
	n := 0
	var first error
	for {
		var live []Sandbox
		err := s.store.db.WithContext(ctx).Session(&gorm.Session{}).Where("tenant_id = ? AND state IN ?", tenantID,
			[]State{StateCreating, StateRunning, StateStopped}).Order("id").Find(&live).Error
		if err != nil {
			return n, fmt.Errorf("destroy sandboxes of %s: %w", tenantID, err)
		}
		if len(live) == 0 {
			return n, first
		}
		if err := s.unavailable("destroy sandboxes"); err != nil {
			return n, err
		}
		creating := 0
		for _, sb := range live {
			if sb.State == StateCreating {
				creating++
				continue
			}
			if _, err := s.destroy(ctx, sb, actor, reason); err != nil {
				s.log.Warn("destroy sandbox of tenant", "sandbox", sb.ID, "tenant", tenantID, "reason", reason, "err", err)
				if first == nil {
					first = err
				}
				continue
			}
			n++
		}
		if creating == 0 || first != nil {
			return n, first
		}
		if time.Now().After(deadline) {
			return n, fmt.Errorf("destroy sandboxes of %s: %d still being created", tenantID, creating)
		}
		select {
		case <-ctx.Done():
			return n, errors.Join(first, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
