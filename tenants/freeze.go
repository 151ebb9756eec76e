package tenants

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Freeze is a tenant's incident-response freeze: while it holds, the
// tenant's sandboxes are destroyed and none may start, nor any VM.
type Freeze struct {
	TenantID string
	Since    time.Time
	Reason   string
	By       string // the operator's name as audited
}

// FrozenError refuses a start for a frozen tenant. It wraps errdefs.ErrConflict, so
// the API answers 409 with a detail naming the freeze.
type FrozenError struct{ Freeze Freeze }

func (e *FrozenError) Error() string {
	msg := "the tenant is frozen since " + e.Freeze.Since.UTC().Format(time.RFC3339) + " by a platform operator"
	if e.Freeze.Reason != "" {
		msg += " (" + e.Freeze.Reason + ")"
	}
	return msg + ": no sandbox or VM may start until it is unfrozen"
}

// Unwrap makes a FrozenError an errdefs.ErrConflict.
func (e *FrozenError) Unwrap() error { return errdefs.ErrConflict }

// freezeRow is the freeze columns of tenants.
type freezeRow struct {
	ID           string
	FrozenAt     *time.Time
	FrozenReason string
	FrozenBy     string
}

// maxFreezeReason bounds the free-text reason.
const maxFreezeReason = 500

// CheckFreezeReason validates a freeze's reason (empty is allowed here;
// the operator's form asks for one).
func CheckFreezeReason(reason string) error {
	return checkName("reason", strings.TrimSpace(reason), maxFreezeReason)
}

// FreezeTenant freezes the tenant (audited tenant.frozen, in the same
// transaction). Freezing a frozen tenant is errdefs.ErrConflict; an unknown one
// errdefs.ErrNotFound. Destroying its sandboxes is the caller's next step: tenants
// never calls sandbox.
func (s *Store) FreezeTenant(ctx context.Context, actor audit.Actor, tenantID, reason string) (Freeze, error) {
	reason = strings.TrimSpace(reason)
	if err := CheckFreezeReason(reason); err != nil {
		return Freeze{}, err
	}
	now := s.now()
	f := Freeze{TenantID: tenantID, Since: now, Reason: reason, By: actor.Name}
	if f.By == "" {
		f.By = actor.ID
	}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		cur, err := freezeOf(tx, tenantID)
		if err != nil {
			return err
		}
		if cur.FrozenAt != nil {
			return fmt.Errorf("%w: the tenant is already frozen since %s", errdefs.ErrConflict, cur.FrozenAt.UTC().Format(time.RFC3339))
		}
		if err := tx.Table("tenants").Where("id = ?", tenantID).
			Updates(map[string]any{"frozen_at": now, "frozen_reason": reason, "frozen_by": f.By}).Error; err != nil {
			return err
		}
		return s.write(tx, actor.Event(tenantID, audit.TypeTenantFrozen, "tenant", tenantID, map[string]any{"reason": reason}))
	})
	if err != nil {
		return Freeze{}, fmt.Errorf("freeze tenant %s: %w", tenantID, err)
	}
	return f, nil
}

// UnfreezeTenant lifts the tenant's freeze (audited tenant.unfrozen). A
// tenant that is not frozen is errdefs.ErrConflict.
func (s *Store) UnfreezeTenant(ctx context.Context, actor audit.Actor, tenantID string) error {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		cur, err := freezeOf(tx, tenantID)
		if err != nil {
			return err
		}
		if cur.FrozenAt == nil {
			return fmt.Errorf("%w: the tenant is not frozen", errdefs.ErrConflict)
		}
		if err := tx.Table("tenants").Where("id = ?", tenantID).
			Updates(map[string]any{"frozen_at": nil, "frozen_reason": "", "frozen_by": ""}).Error; err != nil {
			return err
		}
		return s.write(tx, actor.Event(tenantID, audit.TypeTenantUnfrozen, "tenant", tenantID,
			map[string]any{"frozen_since": cur.FrozenAt.UTC().Format(time.RFC3339), "reason": cur.FrozenReason}))
	})
	if err != nil {
		return fmt.Errorf("unfreeze tenant %s: %w", tenantID, err)
	}
	return nil
}

func freezeOf(tx *gorm.DB, tenantID string) (freezeRow, error) {
	var rows []freezeRow
	if err := tx.Table("tenants").Select("id, frozen_at, frozen_reason, frozen_by").Where("id = ?", tenantID).Scan(&rows).Error; err != nil {
		return freezeRow{}, err
	}
	if len(rows) == 0 {
		return freezeRow{}, errdefs.ErrNotFound
	}
	return rows[0], nil
}

// TenantFreeze returns the tenant's freeze and whether it is frozen.
func (s *Store) TenantFreeze(ctx context.Context, tenantID string) (Freeze, bool, error) {
	r, err := freezeOf(s.db.WithContext(ctx), tenantID)
	if err != nil {
		return Freeze{}, false, fmt.Errorf("tenant freeze %s: %w", tenantID, err)
	}
	if r.FrozenAt == nil {
		return Freeze{}, false, nil
	}
	return Freeze{TenantID: r.ID, Since: r.FrozenAt.UTC(), Reason: r.FrozenReason, By: r.FrozenBy}, true, nil
}

// CheckNotFrozen returns a *FrozenError when the tenant is frozen: the
// sandbox and VM create paths call it before they start anything.
func (s *Store) CheckNotFrozen(ctx context.Context, tenantID string) error {
	f, frozen, err := s.TenantFreeze(ctx, tenantID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil // an unknown tenant fails later with its own error
	}
	if err != nil {
		return err
	}
	if frozen {
		return &FrozenError{Freeze: f}
	}
	return nil
}

// FrozenTenants returns every frozen tenant's freeze by tenant id (the
// operator's tenant list).
func (s *Store) FrozenTenants(ctx context.Context) (map[string]Freeze, error) {
	var rows []freezeRow
	if err := s.db.WithContext(ctx).Table("tenants").Select("id, frozen_at, frozen_reason, frozen_by").
		Where("frozen_at IS NOT NULL").Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("frozen tenants: %w", err)
	}
	out := make(map[string]Freeze, len(rows))
	for _, r := range rows {
		out[r.ID] = Freeze{TenantID: r.ID, Since: r.FrozenAt.UTC(), Reason: r.FrozenReason, By: r.FrozenBy}
	}
	return out, nil
}
