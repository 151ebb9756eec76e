package usage

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/dbtime"
)

// Store reads and writes usage. Every tenant-scoped read takes the tenant.
type Store struct {
	db    *gorm.DB
	clock dbtime.Clock
}

// NewStore returns a store on db (migrated); clock nil means time.Now.
func NewStore(db *gorm.DB, clock func() time.Time) *Store {
	return &Store{db: db, clock: clock}
}

// DB is the store's database, for callers that meter inside their own
// transactions (Open, Observe, Egress).
func (s *Store) DB() *gorm.DB { return s.db }

// Observe accounts one sample of a sandbox in its own transaction.
func (s *Store) Observe(ctx context.Context, sandboxID string, sample *Sample, end *time.Time) (Meter, error) {
	var m Meter
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		m, err = Observe(tx, sandboxID, sample, end)
		return err
	})
	return m, err
}

// Meter returns the tenant's sandbox meter (ErrNoMeter when it never ran).
func (s *Store) Meter(ctx context.Context, tenantID, sandboxID string) (Meter, error) {
	var m Meter
	err := s.db.WithContext(ctx).Take(&m, "tenant_id = ? AND sandbox_id = ?", tenantID, sandboxID).Error
	if err == gorm.ErrRecordNotFound {
		return Meter{}, fmt.Errorf("sandbox %s: %w", sandboxID, ErrNoMeter)
	}
	if err != nil {
		return Meter{}, fmt.Errorf("usage meter of sandbox %s: %w", sandboxID, err)
	}
	return m, nil
}

// OpenMeters returns every meter not closed yet, of every tenant (the
// sampler's work list and the metrics' live figures).
func (s *Store) OpenMeters(ctx context.Context) ([]Meter, error) {
	var out []Meter
	if err := s.db.WithContext(ctx).Where("closed_at IS NULL").Order("tenant_id, sandbox_id").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("open usage meters: %w", err)
	}
	return out, nil
}

// PruneSamples deletes raw samples older than before (the ledger keeps
// the totals).
func (s *Store) PruneSamples(ctx context.Context, before time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Where("at < ?", ts(before)).Delete(&SampleRow{})
	if res.Error != nil {
		return 0, fmt.Errorf("prune usage samples: %w", res.Error)
	}
	return res.RowsAffected, nil
}

// Samples returns the tenant's sandbox samples, oldest first (at most
// limit, the latest ones).
func (s *Store) Samples(ctx context.Context, tenantID, sandboxID string, limit int) ([]SampleRow, error) {
	var out []SampleRow
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND sandbox_id = ?", tenantID, sandboxID).
		Order("at DESC").Limit(limit).Find(&out).Error
	if err != nil {
		return nil, fmt.Errorf("usage samples of sandbox %s: %w", sandboxID, err)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}
