package audit

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"
	"gorm.io/gorm"
)

// PrunerActorID is the audit actor id of the retention loop.
const PrunerActorID = "audit-retention"

// Prune deletes the tenant's events older than before and records an
// audit.pruned event naming the cutoff and the count, in the same
// transaction: the log says what it no longer holds. Nothing older: no
// event, 0. This is the one deletion the log allows.
func (l *Log) Prune(ctx context.Context, tenantID string, before time.Time, retentionDays int) (int64, error) {
	before = before.UTC().Truncate(time.Microsecond)
	var n int64
	err := l.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Where("tenant_id = ? AND occurred_at < ?", tenantID, before).Delete(&Event{})
		if res.Error != nil {
			return res.Error
		}
		n = res.RowsAffected
		if n == 0 {
			return nil
		}
		e := Event{TenantID: tenantID, Type: TypeAuditPruned, ActorKind: ActorSystem, ActorID: PrunerActorID, ActorName: "audit retention",
			Details: map[string]any{"before": before.Format(time.RFC3339), "deleted": n, "retention_days": retentionDays}}
		if err := complete(&e, l.clock); err != nil {
			return err
		}
		return tx.Create(&e).Error
	})
	if err != nil {
		return 0, fmt.Errorf("prune audit events of %s: %w", tenantID, err)
	}
	return n, nil
}

// RetentionConfig configures a Retention loop.
type RetentionConfig struct {
	// Tenants lists the tenant ids to prune; required.
	Tenants func(ctx context.Context) ([]string, error)
	// Days gives a tenant's retention in days (the policy's
	// audit.retention_days); 0 or less keeps everything; required.
	Days func(ctx context.Context, tenantID string) (int, error)
	// Interval between passes; default 1 h.
	Interval time.Duration
	// Clock times the passes (the cut-off is the Log's own clock); default
	// the real one.
	Clock  clockwork.Clock
	Logger *slog.Logger
}

// Retention deletes each tenant's audit events older than its retention.
type Retention struct {
	log *Log
	cfg RetentionConfig
}

// NewRetention returns the retention loop on l.
func NewRetention(l *Log, cfg RetentionConfig) *Retention {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Hour
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Retention{log: l, cfg: cfg}
}

// PruneOnce runs one pass over every tenant and returns how many events it
// deleted. A tenant that fails is logged and skipped; the first error is
// returned after the pass.
func (r *Retention) PruneOnce(ctx context.Context) (int64, error) {
	ids, err := r.cfg.Tenants(ctx)
	if err != nil {
		return 0, fmt.Errorf("audit retention: tenants: %w", err)
	}
	var total int64
	var first error
	for _, id := range ids {
		days, err := r.cfg.Days(ctx, id)
		if err != nil {
			r.cfg.Logger.Warn("audit retention: policy", "tenant", id, "err", err)
			if first == nil {
				first = err
			}
			continue
		}
		if days <= 0 {
			continue // keep forever
		}
		n, err := r.log.Prune(ctx, id, r.log.clock().AddDate(0, 0, -days), days)
		if err != nil {
			r.cfg.Logger.Warn("audit retention", "tenant", id, "err", err)
			if first == nil {
				first = err
			}
			continue
		}
		if n > 0 {
			r.cfg.Logger.Info("audit events pruned", "tenant", id, "deleted", n, "retention_days", days)
		}
		total += n
	}
	return total, first
}

// Run prunes at once and then every Interval until ctx ends.
func (r *Retention) Run(ctx context.Context) {
	t := r.cfg.Clock.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		_, _ = r.PruneOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
	}
}
