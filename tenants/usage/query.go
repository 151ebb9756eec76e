package usage

import (
	"context"
	"fmt"
	"sort"
	"time"

	"gorm.io/gorm"
)

// Sums are ledger quantities in the ledger's own exact units.
type Sums struct {
	AllocVCPUMS     int64 `gorm:"column:alloc_vcpu_ms" json:"-"`
	AllocMiBMS      int64 `gorm:"column:alloc_mib_ms" json:"-"`
	WallMS          int64 `gorm:"column:wall_ms" json:"-"`
	CPUNS           int64 `gorm:"column:cpu_ns" json:"-"`
	EgressUpBytes   int64 `gorm:"column:egress_up_bytes" json:"egress_up_bytes"`
	EgressDownBytes int64 `gorm:"column:egress_down_bytes" json:"egress_down_bytes"`
	IOReadBytes     int64 `gorm:"column:io_read_bytes" json:"io_read_bytes"`
	IOWriteBytes    int64 `gorm:"column:io_write_bytes" json:"io_write_bytes"`
	MemoryPeakBytes int64 `gorm:"column:memory_peak_bytes" json:"memory_peak_bytes"`
}

// Add adds b to a (the memory peak is the larger of the two).
func (a *Sums) Add(b Sums) {
	a.AllocVCPUMS += b.AllocVCPUMS
	a.AllocMiBMS += b.AllocMiBMS
	a.WallMS += b.WallMS
	a.CPUNS += b.CPUNS
	a.EgressUpBytes += b.EgressUpBytes
	a.EgressDownBytes += b.EgressDownBytes
	a.IOReadBytes += b.IOReadBytes
	a.IOWriteBytes += b.IOWriteBytes
	a.MemoryPeakBytes = max(a.MemoryPeakBytes, b.MemoryPeakBytes)
}

// VCPUSeconds is the vCPU allocation in vCPU-seconds.
func (a Sums) VCPUSeconds() float64 { return float64(a.AllocVCPUMS) / 1e3 }

// GiBSeconds is the memory allocation in GiB-seconds.
func (a Sums) GiBSeconds() float64 { return float64(a.AllocMiBMS) / 1024 / 1e3 }

// CPUSeconds is the CPU time measured.
func (a Sums) CPUSeconds() float64 { return float64(a.CPUNS) / 1e9 }

// WallSeconds is how long sandboxes held their allocation.
func (a Sums) WallSeconds() float64 { return float64(a.WallMS) / 1e3 }

// EgressBytes is everything through the egress gateway, both directions.
func (a Sums) EgressBytes() int64 { return a.EgressUpBytes + a.EgressDownBytes }

// EgressGB is EgressBytes in GB (10^9 bytes).
func (a Sums) EgressGB() float64 { return float64(a.EgressBytes()) / 1e9 }

// Totals are sums with their cost, exact.
type Totals struct {
	Sums
	Cost     Money  `json:"cost"`
	Currency string `json:"currency"`
}

// Add adds quantities priced at p.
func (t *Totals) Add(s Sums, p Price) {
	t.Sums.Add(s)
	t.Cost = t.Cost.Add(s.Charge(p))
	t.Currency = p.Currency
}

const sumColumns = "COALESCE(SUM(alloc_vcpu_ms),0) AS alloc_vcpu_ms, COALESCE(SUM(alloc_mib_ms),0) AS alloc_mib_ms, " +
	"COALESCE(SUM(wall_ms),0) AS wall_ms, COALESCE(SUM(cpu_ns),0) AS cpu_ns, " +
	"COALESCE(SUM(egress_up_bytes),0) AS egress_up_bytes, COALESCE(SUM(egress_down_bytes),0) AS egress_down_bytes, " +
	"COALESCE(SUM(io_read_bytes),0) AS io_read_bytes, COALESCE(SUM(io_write_bytes),0) AS io_write_bytes, " +
	"COALESCE(MAX(memory_peak_bytes),0) AS memory_peak_bytes"

// Range is a half-open period [From, To) of ledger hours: an hour counts
// when it starts inside it.
type Range struct{ From, To time.Time }

// Check reports a range that is empty or backwards.
func (r Range) Check() error {
	if r.From.IsZero() || r.To.IsZero() {
		return fmt.Errorf("a period needs a start and an end")
	}
	if !r.To.After(r.From) {
		return fmt.Errorf("the period ends (%s) before it starts (%s)", r.To.Format(time.RFC3339), r.From.Format(time.RFC3339))
	}
	return nil
}

// eachSegment runs fn over the parts of r with one price each, fn querying
// the ledger rows of the tenant in that part.
func (s *Store) eachSegment(ctx context.Context, ps Prices, tenantID string, r Range, fn func(q *gorm.DB, p Price) error) error {
	for _, seg := range ps.segments(tenantID, ts(r.From), ts(r.To)) {
		q := s.db.WithContext(ctx).Model(&Entry{}).
			Where("tenant_id = ? AND period_start >= ? AND period_start < ?", tenantID, seg.from, seg.to)
		if err := fn(q, seg.price); err != nil {
			return err
		}
	}
	return nil
}

// Totals sums the tenant's usage over r, priced; Cost includes the
// volume storage of r (VolumeCharges).
func (s *Store) Totals(ctx context.Context, tenantID string, r Range) (Totals, error) {
	ps, err := s.LoadPrices(ctx)
	if err != nil {
		return Totals{}, err
	}
	t := Totals{Currency: ps.At(tenantID, r.To).Currency}
	err = s.eachSegment(ctx, ps, tenantID, r, func(q *gorm.DB, p Price) error {
		var sums Sums
		if err := q.Select(sumColumns).Scan(&sums).Error; err != nil {
			return err
		}
		t.Add(sums, p)
		return nil
	})
	if err != nil {
		return Totals{}, fmt.Errorf("usage totals of tenant %s: %w", tenantID, err)
	}
	vc, err := s.VolumeCharges(ctx, tenantID, r)
	if err != nil {
		return Totals{}, fmt.Errorf("usage totals of tenant %s: %w", tenantID, err)
	}
	for _, c := range vc {
		t.Cost = t.Cost.Add(c.Cost)
	}
	return t, nil
}

// Day is one UTC day of a tenant's usage.
type Day struct {
	Day time.Time `json:"day"`
	Totals
}

// Daily returns the tenant's usage per UTC day over r, every day of r
// present (zero when nothing ran).
func (s *Store) Daily(ctx context.Context, tenantID string, r Range) ([]Day, error) {
	ps, err := s.LoadPrices(ctx)
	if err != nil {
		return nil, err
	}
	byDay := map[time.Time]*Totals{}
	err = s.eachSegment(ctx, ps, tenantID, r, func(q *gorm.DB, p Price) error {
		var rows []struct {
			PeriodStart time.Time `gorm:"column:period_start"`
			Sums
		}
		if err := q.Select("period_start, " + sumColumns).Group("period_start").Scan(&rows).Error; err != nil {
			return err
		}
		for _, row := range rows {
			d := row.PeriodStart.UTC().Truncate(24 * time.Hour)
			if byDay[d] == nil {
				byDay[d] = &Totals{}
			}
			byDay[d].Add(row.Sums, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("daily usage of tenant %s: %w", tenantID, err)
	}
	// Volume storage: its charges are cut at UTC days.
	vc, err := s.VolumeCharges(ctx, tenantID, r)
	if err != nil {
		return nil, fmt.Errorf("daily usage of tenant %s: %w", tenantID, err)
	}
	for _, c := range vc {
		d := c.From.UTC().Truncate(24 * time.Hour)
		if byDay[d] == nil {
			byDay[d] = &Totals{Currency: c.Price.Currency}
		}
		byDay[d].Cost = byDay[d].Cost.Add(c.Cost)
	}
	cur := ps.At(tenantID, r.To).Currency
	var out []Day
	for d := ts(r.From).Truncate(24 * time.Hour); d.Before(r.To); d = d.Add(24 * time.Hour) {
		t := Totals{Currency: cur}
		if x := byDay[d]; x != nil {
			t = *x
		}
		out = append(out, Day{Day: d, Totals: t})
	}
	return out, nil
}

// Group keys for Top.
const (
	BySandbox  = "sandbox_id"
	ByUser     = "user_id"
	ByTemplate = "template"
)

// Line is one group of Top.
type Line struct {
	Key string `json:"key"`
	Totals
}

// Top returns the tenant's usage over r grouped by one of BySandbox,
// ByUser, ByTemplate, costliest first, at most limit lines.
func (s *Store) Top(ctx context.Context, tenantID string, r Range, by string, limit int) ([]Line, error) {
	switch by {
	case BySandbox, ByUser, ByTemplate:
	default:
		return nil, fmt.Errorf("usage by %q: unknown grouping", by)
	}
	ps, err := s.LoadPrices(ctx)
	if err != nil {
		return nil, err
	}
	groups := map[string]*Totals{}
	err = s.eachSegment(ctx, ps, tenantID, r, func(q *gorm.DB, p Price) error {
		var rows []struct {
			Key string `gorm:"column:k"`
			Sums
		}
		if err := q.Select(by + " AS k, " + sumColumns).Group(by).Scan(&rows).Error; err != nil {
			return err
		}
		for _, row := range rows {
			if groups[row.Key] == nil {
				groups[row.Key] = &Totals{}
			}
			groups[row.Key].Add(row.Sums, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("usage of tenant %s by %s: %w", tenantID, by, err)
	}
	out := make([]Line, 0, len(groups))
	for k, t := range groups {
		out = append(out, Line{Key: k, Totals: *t})
	}
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].Cost.Cmp(out[j].Cost); c != 0 {
			return c > 0
		}
		return out[i].Key < out[j].Key
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Entries returns the ledger rows of the tenant's sandbox, oldest first.
func (s *Store) Entries(ctx context.Context, tenantID, sandboxID string) ([]Entry, error) {
	var out []Entry
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND sandbox_id = ?", tenantID, sandboxID).
		Order("period_start").Find(&out).Error
	if err != nil {
		return nil, fmt.Errorf("usage of sandbox %s: %w", sandboxID, err)
	}
	return out, nil
}

// MonthStart is the first instant of t's calendar month, UTC: the period
// of the monthly quota and of a billing period.
func MonthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// CPUSecondsSince is the CPU time the tenant's sandboxes used from since
// on, inside tx (the quota check of a create): the larger of what their
// guests measured and the share of their VMs' CPU time libvirt measured
// while they ran. A guest that under-reports (a counter that never moves)
// is still held to what its VM really burnt.
func CPUSecondsSince(tx *gorm.DB, tenantID string, since time.Time) (float64, error) {
	var row struct {
		CPU int64 `gorm:"column:cpu"`
		VM  int64 `gorm:"column:vm"`
	}
	err := tx.Model(&Entry{}).Select("COALESCE(SUM(cpu_ns), 0) AS cpu, COALESCE(SUM(vm_cpu_ns), 0) AS vm").
		Where("tenant_id = ? AND period_start >= ?", tenantID, ts(since).Truncate(Period)).Scan(&row).Error
	if err != nil {
		return 0, fmt.Errorf("cpu time of tenant %s: %w", tenantID, err)
	}
	return float64(max(row.CPU, row.VM)) / 1e9, nil
}

// CPUSecondsThisMonth is CPUSecondsSince the start of the current month.
func (s *Store) CPUSecondsThisMonth(ctx context.Context, tenantID string) (float64, error) {
	return CPUSecondsSince(s.db.WithContext(ctx), tenantID, MonthStart(s.clock.Now()))
}

// TenantTotal is one tenant's line in the operator's view.
type TenantTotal struct {
	TenantID string `json:"tenant_id"`
	Totals
}

// AllTenants returns every tenant's totals over r that used anything,
// costliest first.
func (s *Store) AllTenants(ctx context.Context, r Range) ([]TenantTotal, error) {
	var ids []string
	err := s.db.WithContext(ctx).Model(&Entry{}).Distinct("tenant_id").
		Where("period_start >= ? AND period_start < ?", ts(r.From), ts(r.To)).Pluck("tenant_id", &ids).Error
	if err != nil {
		return nil, fmt.Errorf("tenants with usage: %w", err)
	}
	out := make([]TenantTotal, 0, len(ids))
	for _, id := range ids {
		t, err := s.Totals(ctx, id, r)
		if err != nil {
			return nil, err
		}
		out = append(out, TenantTotal{TenantID: id, Totals: t})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cost.Cmp(out[j].Cost) > 0 })
	return out, nil
}
