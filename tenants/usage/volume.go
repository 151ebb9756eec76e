package usage

import (
	"context"
	"fmt"
	"math/bits"
	"sort"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

// VolumePeriod is one stretch of time a volume had one provisioned size:
// from StartedAt until EndedAt (nil: it still has it). sandbox/volumes
// writes them in the transactions that create, resize and delete volumes.
type VolumePeriod struct {
	ID         string     `gorm:"column:id;primaryKey"`
	TenantID   string     `gorm:"column:tenant_id"`
	VolumeID   string     `gorm:"column:volume_id"`
	VolumeName string     `gorm:"column:volume_name"`
	SizeGiB    int        `gorm:"column:size_gib"`
	StartedAt  time.Time  `gorm:"column:started_at"`
	EndedAt    *time.Time `gorm:"column:ended_at"`
}

// TableName is the GORM table of VolumePeriod.
func (VolumePeriod) TableName() string { return "volume_usage" }

// OpenVolumePeriod records, inside tx, that the tenant's volume has sizeGiB
// provisioned from at on.
func OpenVolumePeriod(tx *gorm.DB, tenantID, volumeID, name string, sizeGiB int, at time.Time) error {
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("open volume usage: %w", err)
	}
	p := VolumePeriod{ID: id.String(), TenantID: tenantID, VolumeID: volumeID, VolumeName: name, SizeGiB: sizeGiB, StartedAt: ts(at)}
	if err := tx.Create(&p).Error; err != nil {
		return fmt.Errorf("open volume usage of %s: %w", volumeID, err)
	}
	return nil
}

// CloseVolumePeriod ends, inside tx, the tenant's volume's open period at at.
func CloseVolumePeriod(tx *gorm.DB, tenantID, volumeID string, at time.Time) error {
	err := tx.Model(&VolumePeriod{}).Where("tenant_id = ? AND volume_id = ? AND ended_at IS NULL", tenantID, volumeID).
		Update("ended_at", ts(at)).Error
	if err != nil {
		return fmt.Errorf("close volume usage of %s: %w", volumeID, err)
	}
	return nil
}

// Volume storage is billed per GiB held for a calendar month (UTC): a GiB
// held for the whole of any month is one GiB-month, whatever its length.
const (
	SkuVolume       = "volume-storage"
	VolumeUnit      = "GiB-Months"
	volumeDesc      = "storage provisioned for the volume"
	volumeService   = "Stockade Volumes"
	volumeResource  = "Volume"
	volumeQtyDigits = quantityScale // GiB-months to 13 decimals
)

// VolumeCharge is one volume at one size over one part of a UTC day with
// one price: the export's row and the pages' figures.
type VolumeCharge struct {
	TenantID   string    `json:"tenant_id"`
	VolumeID   string    `json:"volume_id"`
	VolumeName string    `json:"volume_name"`
	SizeGiB    int       `json:"size_gib"`
	From       time.Time `json:"from"`
	To         time.Time `json:"to"`
	// qty is GiB-months in 10^-13 units: size × the share of the calendar
	// month [From, To) is, cut (not rounded) at 13 decimals, so the cost
	// is exactly the quantity shown times the unit price.
	qty   uint64
	Price Price `json:"-"`
	Cost  Money `json:"cost"`
}

// GiBMonths is the quantity as an exact decimal of GiB-months.
func (c VolumeCharge) GiBMonths() string {
	return string(appendDecimal(nil, 0, c.qty, volumeQtyDigits))
}

// UnitPrice is the price of a GiB-month as an exact decimal.
func (c VolumeCharge) UnitPrice() string {
	return string(appendDecimal(nil, 0, priceUnits(c.Price.VolumeGiBMonth), PriceScale))
}

// gibMonthsE13 is sizeGiB held over d inside a month of monthLen, in
// 10^-13 GiB-months, cut.
func gibMonthsE13(sizeGiB int, d, monthLen time.Duration) uint64 {
	gibMS := uint64(max(sizeGiB, 0)) * uint64(max(d.Milliseconds(), 0))
	hi, lo := bits.Mul64(gibMS, 1e13)
	q, _ := bits.Div64(hi, lo, uint64(monthLen.Milliseconds())) // hi < month ms: sizes are bounded
	return q
}

// VolumeCharges returns the volume storage of the tenant (every tenant's for
// tenantID "", the operators' export) over r, ordered by start, tenant and
// volume: each period with a size, clipped to r and to now (a volume still
// held is billed up to now), cut at UTC days and price changes.
func (s *Store) VolumeCharges(ctx context.Context, tenantID string, r Range) ([]VolumeCharge, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	ps, err := s.LoadPrices(ctx)
	if err != nil {
		return nil, err
	}
	from, to := ts(r.From), ts(r.To)
	now := ts(s.clock.Now())
	q := s.db.WithContext(ctx).Where("started_at < ? AND (ended_at IS NULL OR ended_at > ?)", to, from)
	if tenantID != "" {
		q = q.Where("tenant_id = ?", tenantID)
	}
	var periods []VolumePeriod
	if err := q.Order("started_at, tenant_id, volume_id").Find(&periods).Error; err != nil {
		return nil, fmt.Errorf("volume usage: %w", err)
	}
	var out []VolumeCharge
	for _, p := range periods {
		start, end := p.StartedAt.UTC(), now
		if p.EndedAt != nil {
			end = p.EndedAt.UTC()
		}
		start, end = maxTime(start, from), minTime(end, to)
		for day := start.Truncate(24 * time.Hour); day.Before(end); day = day.Add(24 * time.Hour) {
			a, b := maxTime(start, day), minTime(end, day.Add(24*time.Hour))
			if !a.Before(b) {
				continue
			}
			month := MonthStart(a)
			monthLen := month.AddDate(0, 1, 0).Sub(month)
			for _, seg := range ps.segments(p.TenantID, a, b) {
				qty := gibMonthsE13(p.SizeGiB, seg.to.Sub(seg.from), monthLen)
				out = append(out, VolumeCharge{TenantID: p.TenantID, VolumeID: p.VolumeID, VolumeName: p.VolumeName,
					SizeGiB: p.SizeGiB, From: seg.from, To: seg.to, qty: qty, Price: seg.price,
					Cost: mulMoney(qty, priceUnits(seg.price.VolumeGiBMonth), 1)})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].From.Before(out[j].From) })
	return out, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// VolumeLine is one volume's storage over a period: the usage page's row.
type VolumeLine struct {
	VolumeID   string `json:"volume_id"`
	VolumeName string `json:"volume_name"`
	SizeGiB    int    `json:"size_gib"` // the last size in the period
	GiBMonths  string `json:"gib_months"`
	Cost       Money  `json:"cost"`
	Currency   string `json:"currency"`
}

// SumVolumes adds charges up per volume, costliest first.
func SumVolumes(cs []VolumeCharge) []VolumeLine {
	idx := map[string]int{}
	var out []VolumeLine
	var qty []uint64
	for _, c := range cs {
		i, ok := idx[c.VolumeID]
		if !ok {
			i = len(out)
			idx[c.VolumeID] = i
			out = append(out, VolumeLine{VolumeID: c.VolumeID, VolumeName: c.VolumeName})
			qty = append(qty, 0)
		}
		out[i].SizeGiB, out[i].Currency = c.SizeGiB, c.Price.Currency
		out[i].Cost = out[i].Cost.Add(c.Cost)
		qty[i] += c.qty
	}
	for i := range out {
		out[i].GiBMonths = string(appendDecimal(nil, 0, qty[i], volumeQtyDigits))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Cost.Cmp(out[j].Cost) > 0 })
	return out
}
