package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
)

// ReasonFrozen ends the sandboxes of a tenant an operator froze.
const ReasonFrozen = "frozen"

// EndText says why a sandbox destroyed with reason ended, in words, for
// its terminals and their recordings: a freeze says so.
func EndText(reason string) string {
	if rest, ok := strings.CutPrefix(reason, ReasonFrozen); ok && (rest == "" || rest[0] == ' ') {
		return "the sandbox was destroyed: its tenant was frozen by a platform operator" + rest
	}
	return "the sandbox was destroyed (" + reason + ")"
}

// ReasonText is a state reason in words for pages ("frozen": ended by a
// freeze of its tenant).
func ReasonText(reason string) string {
	if rest, ok := strings.CutPrefix(reason, ReasonFrozen); ok && (rest == "" || rest[0] == ' ') {
		return "ended by a freeze of its tenant" + rest
	}
	return reason
}

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

// liveStates are the states a freeze destroys.
var liveStates = []State{StateCreating, StateRunning, StateStopped}

// LiveCount is how many sandboxes of the tenant DestroyTenant would
// destroy now: what a freeze's confirmation says it destroys.
func (s *Service) LiveCount(ctx context.Context, tenantID string) (int, error) {
	var n int64
	if err := s.store.db.WithContext(ctx).Model(&Sandbox{}).Where("tenant_id = ? AND state IN ?", tenantID, liveStates).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count live sandboxes of %s: %w", tenantID, err)
	}
	return int(n), nil
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
			liveStates).Order("id").Find(&live).Error
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
