package sandbox

import (
	"context"
	"fmt"
	"time"
)

// DayCount is how many sandboxes a tenant created on one UTC day.
type DayCount struct {
	Day     time.Time
	Created int
}

// maxActivityDays bounds the days DailyCreated reads.
const maxActivityDays = 92

// DailyCreated returns the sandboxes the tenant created per UTC day from
// from's day to to's (inclusive), every day present, at most
// maxActivityDays (the newest).
func (s *Store) DailyCreated(ctx context.Context, tenantID string, from, to time.Time) ([]DayCount, error) {
	first, last := from.UTC().Truncate(24*time.Hour), to.UTC().Truncate(24*time.Hour)
	if d := last.AddDate(0, 0, -(maxActivityDays - 1)); first.Before(d) {
		first = d
	}
	var rows []struct {
		CreatedAt time.Time `gorm:"column:created_at"`
	}
	if err := s.db.WithContext(ctx).Model(&Sandbox{}).Select("created_at").
		Where("tenant_id = ? AND created_at >= ? AND created_at < ?", tenantID, first, last.Add(24*time.Hour)).
		Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("sandboxes per day of tenant %s: %w", tenantID, err)
	}
	n := map[time.Time]int{}
	for _, r := range rows {
		n[r.CreatedAt.UTC().Truncate(24*time.Hour)]++
	}
	var out []DayCount
	for d := first; !d.After(last); d = d.Add(24 * time.Hour) {
		out = append(out, DayCount{Day: d, Created: n[d]})
	}
	return out, nil
}
