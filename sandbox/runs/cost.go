package runs

import (
	"context"
	"fmt"

	"github.com/stockade-dev/stockade/tenants/usage"
)

// ledger is what LedgerCosts needs of *usage.Store.
type ledger interface {
	Entries(ctx context.Context, tenantID, sandboxID string) ([]usage.Entry, error)
	LoadPrices(ctx context.Context) (usage.Prices, error)
}

// LedgerCosts prices a run's sandbox from the usage ledger: each hour's row
// at the price in force for the tenant in that hour.
func LedgerCosts(l ledger) Costs { return ledgerCosts{l} }

type ledgerCosts struct{ l ledger }

func (c ledgerCosts) SandboxCost(ctx context.Context, tenantID, sandboxID string) (float64, error) {
	entries, err := c.l.Entries(ctx, tenantID, sandboxID)
	if err != nil {
		return 0, err
	}
	if len(entries) == 0 {
		return 0, nil
	}
	ps, err := c.l.LoadPrices(ctx)
	if err != nil {
		return 0, fmt.Errorf("price sandbox %s: %w", sandboxID, err)
	}
	var total usage.Money
	for _, e := range entries {
		s := usage.Sums{AllocVCPUMS: e.AllocVCPUMS, AllocMiBMS: e.AllocMiBMS, WallMS: e.WallMS, CPUNS: e.CPUNS,
			EgressUpBytes: e.EgressUpBytes, EgressDownBytes: e.EgressDownBytes}
		total = total.Add(s.Charge(ps.At(tenantID, e.PeriodStart)))
	}
	return total.Float64(), nil
}
