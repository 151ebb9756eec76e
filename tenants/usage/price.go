package usage

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"sort"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Price is one version of a price book: the platform's list price (TenantID
// "") or a tenant's override, in force from EffectiveFrom until a later
// version of the same book.
type Price struct {
	ID            string    `gorm:"column:id;primaryKey" json:"id"`
	TenantID      string    `gorm:"column:tenant_id" json:"tenant_id"`
	EffectiveFrom time.Time `gorm:"column:effective_from" json:"effective_from"`
	Currency      string    `gorm:"column:currency" json:"currency"`
	// VCPUSecond is the price of one vCPU held for one second.
	VCPUSecond float64 `gorm:"column:vcpu_second" json:"vcpu_second"`
	// GiBSecond is the price of one GiB of memory held for one second.
	GiBSecond float64 `gorm:"column:gib_second" json:"gib_second"`
	// CPUSecond is the price of one second of CPU time measured (on top of
	// the allocation; usually 0).
	CPUSecond float64 `gorm:"column:cpu_second" json:"cpu_second"`
	// EgressGB is the price of 10^9 bytes through the egress gateway, both
	// directions counted.
	EgressGB float64 `gorm:"column:egress_gb" json:"egress_gb"`
	// VolumeGiBMonth is the price of one GiB of volume provisioned for one
	// calendar month (UTC), prorated to the millisecond.
	VolumeGiBMonth float64   `gorm:"column:volume_gib_month" json:"volume_gib_month"`
	CreatedBy      string    `gorm:"column:created_by" json:"created_by"`
	CreatedAt      time.Time `gorm:"column:created_at" json:"created_at"`
}

// TableName is the GORM table of Price.
func (Price) TableName() string { return "price_books" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (p *Price) AfterFind(*gorm.DB) error {
	p.EffectiveFrom, p.CreatedAt = p.EffectiveFrom.UTC(), p.CreatedAt.UTC()
	return nil
}

// DefaultPrice is the list price until an operator sets one: in line with
// what hosted agent sandboxes charge (per vCPU-second and GiB-second held).
func DefaultPrice() Price {
	return Price{ID: "default", Currency: "USD", VCPUSecond: 0.000014, GiBSecond: 0.0000045, EgressGB: 0.05, VolumeGiBMonth: 0.08,
		EffectiveFrom: time.Unix(0, 0).UTC()}
}

var currencyCode = regexp.MustCompile(`^[A-Z]{3}$`)

// maxUnitPrice bounds each price, so a slip of the decimal point is refused.
const maxUnitPrice = 1000

func (p Price) validate() error {
	if !currencyCode.MatchString(p.Currency) {
		return errdefs.Invalid("currency", "iso4217", "must be a three-letter ISO 4217 code such as USD or EUR")
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"vcpu_second", p.VCPUSecond}, {"gib_second", p.GiBSecond}, {"cpu_second", p.CPUSecond}, {"egress_gb", p.EgressGB}, {"volume_gib_month", p.VolumeGiBMonth}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || f.v > maxUnitPrice {
			return errdefs.Invalid(f.name, "range", fmt.Sprintf("must be a price between 0 and %d", maxUnitPrice))
		}
		// Costs are exact in integer units of 10^-PriceScale of a price.
		if x := f.v * 1e9; math.Abs(x-math.Round(x)) > 1e-3 {
			return errdefs.Invalid(f.name, "precision", fmt.Sprintf("may have at most %d decimal places (0.000000001)", PriceScale))
		}
	}
	return nil
}

// SetPrice adds a version to the platform's price book (p.TenantID "") or a
// tenant's; it is in force from p.EffectiveFrom (zero: now), audited
// usage.price_set. A tenant that does not exist is ErrNotFound.
//
// A version prices the ledger hours that start at or after its
// EffectiveFrom, which may not be before now: an hour already used (billed,
// exported, perhaps invoiced) keeps the price it had, whatever is set later.
func (s *Store) SetPrice(ctx context.Context, actor audit.Actor, p Price) (Price, error) {
	if err := p.validate(); err != nil {
		return Price{}, err
	}
	now := s.clock.Now()
	if p.EffectiveFrom.IsZero() {
		p.EffectiveFrom = now
	}
	p.EffectiveFrom = ts(p.EffectiveFrom)
	if p.EffectiveFrom.Before(now) {
		return Price{}, errdefs.Invalid("effective_from", "past", fmt.Sprintf(
			"must be now or later (it is %s): a price never changes hours already used; leave it empty for now", now.Format(time.RFC3339)))
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Price{}, fmt.Errorf("set price: %w", err)
	}
	p.ID, p.CreatedBy, p.CreatedAt = id.String(), actor.ID, now
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if p.TenantID != "" {
			var n int64
			if err := tx.Table("tenants").Where("id = ?", p.TenantID).Count(&n).Error; err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("tenant %s: %w", p.TenantID, errdefs.ErrNotFound)
			}
		}
		// Belt and braces against a clock behind the ledger's (another
		// replica's): no hour it would price may hold usage yet.
		var used int64
		q := tx.Model(&Entry{}).Where("period_start >= ?", p.EffectiveFrom)
		if p.TenantID != "" {
			q = q.Where("tenant_id = ?", p.TenantID)
		}
		if err := q.Count(&used).Error; err != nil {
			return err
		}
		if used > 0 {
			return errdefs.Invalid("effective_from", "billed", "usage is already recorded from that instant on: a price never changes hours already used")
		}
		if err := tx.Create(&p).Error; err != nil {
			return err
		}
		e := actor.Event(p.TenantID, audit.TypePriceSet, "price_book", p.ID, map[string]any{
			"currency": p.Currency, "vcpu_second": p.VCPUSecond, "gib_second": p.GiBSecond, "cpu_second": p.CPUSecond,
			"egress_gb": p.EgressGB, "volume_gib_month": p.VolumeGiBMonth, "effective_from": p.EffectiveFrom, "scope": scope(p.TenantID),
		})
		e.Time = now
		return audit.Write(tx, e)
	})
	if err != nil {
		return Price{}, fmt.Errorf("set price (%s): %w", scope(p.TenantID), err)
	}
	return p, nil
}

func scope(tenantID string) string {
	if tenantID == "" {
		return "platform"
	}
	return "tenant"
}

// PriceHistory returns the versions of a book, newest first: the platform's
// for tenantID "", else the tenant's own overrides.
func (s *Store) PriceHistory(ctx context.Context, tenantID string) ([]Price, error) {
	out := []Price{}
	err := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID).Order("effective_from DESC, created_at DESC").Find(&out).Error
	if err != nil {
		return nil, fmt.Errorf("price history: %w", err)
	}
	return out, nil
}

// Prices resolves which price applies to a tenant at any instant.
type Prices struct {
	platform []Price            // effective_from ascending
	tenant   map[string][]Price // tenant id -> its overrides, ascending
}

// LoadPrices reads the whole price book (platform and every tenant's
// overrides; a few rows) for resolving many ledger rows without a query each.
func (s *Store) LoadPrices(ctx context.Context) (Prices, error) {
	var all []Price
	if err := s.db.WithContext(ctx).Order("effective_from ASC, created_at ASC").Find(&all).Error; err != nil {
		return Prices{}, fmt.Errorf("load prices: %w", err)
	}
	ps := Prices{tenant: map[string][]Price{}}
	for _, p := range all {
		if p.TenantID == "" {
			ps.platform = append(ps.platform, p)
		} else {
			ps.tenant[p.TenantID] = append(ps.tenant[p.TenantID], p)
		}
	}
	return ps, nil
}

// At returns the price in force for the tenant at t: the tenant's latest
// override from before t, else the platform's, else DefaultPrice.
func (ps Prices) At(tenantID string, t time.Time) Price {
	if p, ok := latest(ps.tenant[tenantID], t); ok {
		return p
	}
	if p, ok := latest(ps.platform, t); ok {
		return p
	}
	return DefaultPrice()
}

// latest is the last of versions (ascending) in force at t.
func latest(versions []Price, t time.Time) (Price, bool) {
	i := sort.Search(len(versions), func(i int) bool { return versions[i].EffectiveFrom.After(t) })
	if i == 0 {
		return Price{}, false
	}
	return versions[i-1], true
}

// segments splits [from, to) where the tenant's price changes, each piece
// with the price in force over it.
func (ps Prices) segments(tenantID string, from, to time.Time) []segment {
	cuts := []time.Time{from, to}
	for _, list := range [][]Price{ps.platform, ps.tenant[tenantID]} {
		for _, p := range list {
			if p.EffectiveFrom.After(from) && p.EffectiveFrom.Before(to) {
				cuts = append(cuts, p.EffectiveFrom)
			}
		}
	}
	sort.Slice(cuts, func(i, j int) bool { return cuts[i].Before(cuts[j]) })
	var out []segment
	for i := 0; i+1 < len(cuts); i++ {
		if cuts[i].Equal(cuts[i+1]) {
			continue
		}
		out = append(out, segment{from: cuts[i], to: cuts[i+1], price: ps.At(tenantID, cuts[i])})
	}
	return out
}

type segment struct {
	from, to time.Time
	price    Price
}
