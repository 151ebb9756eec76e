package app

import (
	"context"
	"time"

	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// sweep is the housekeeping loop: expired sessions and idempotency keys,
// and egress events past their retention (the usage ledger keeps their
// bytes).
func (a *App) sweep(ctx context.Context) {
	days := a.cfg.EgressRetentionDays
	if days <= 0 {
		days = 90
	}
	t := time.NewTicker(15 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := a.Store.DeleteExpiredSessions(ctx); err != nil {
				a.log.Warn("sweep sessions", "err", err)
			} else if n > 0 {
				a.log.Info("swept expired sessions", "count", n)
			}
			if n, err := a.Egress.Prune(ctx, time.Now().AddDate(0, 0, -days)); err != nil {
				a.log.Warn("prune egress events", "err", err)
			} else if n > 0 {
				a.log.Info("pruned egress events", "count", n, "retention_days", days)
			}
			// Tenant templates: superseded unused versions, stale builds, orphan files.
			if res, err := a.Templates.GC(ctx); err != nil {
				a.log.Warn("template gc", "err", err)
			} else if res != (templates.GCResult{}) {
				a.log.Info("template gc", "superseded", res.Superseded, "stale_builds", res.Stale, "files", res.Files)
			}
			// Idempotency keys are remembered 24 h.
			if n, err := a.Store.DeleteExpiredIdempotencyKeys(ctx); err != nil {
				a.log.Warn("sweep idempotency keys", "err", err)
			} else if n > 0 {
				a.log.Info("swept expired idempotency keys", "count", n)
			}
		}
	}
}

// retention is audit retention: each tenant's policy audit.retention_days
// (0 keeps everything); every deletion is itself audited (audit.pruned).
func (a *App) retention() *audit.Retention {
	return audit.NewRetention(a.Audit, audit.RetentionConfig{Logger: a.log, Clock: a.Clock,
		Tenants: func(ctx context.Context) ([]string, error) {
			ts, err := a.Store.ListTenants(ctx)
			ids := make([]string, 0, len(ts))
			for _, t := range ts {
				ids = append(ids, t.ID)
			}
			return ids, err
		},
		Days: func(ctx context.Context, tenantID string) (int, error) {
			v, err := a.Policies.Current(ctx, tenantID)
			return v.Doc.Audit.RetentionDays, err
		},
	})
}
