package usage

import (
	"context"
	"fmt"
	"time"
)

// MonthToDate is a tenant's cost of the current calendar month (UTC) up
// to now, per day, with a forecast to the month's end and the same part of
// the month before for the trend.
type MonthToDate struct {
	Month, Now time.Time
	// Days are the month's days up to today's, every one present.
	Days  []Day
	Total Totals
	// Forecast is Total spread over the whole month at the rate of the
	// hours gone so far (a straight line: the same spend per hour).
	Forecast float64
	// Previous is the month before over as many hours from its start as
	// this month has had (shorter when that month was shorter).
	Previous Totals
}

// Trend is the change of Total against Previous as a share (0.25: a
// quarter more); ok is false when the month before cost nothing.
func (m MonthToDate) Trend() (share float64, ok bool) {
	prev := m.Previous.Cost.Float64()
	if prev <= 0 {
		return 0, false
	}
	return m.Total.Cost.Float64()/prev - 1, true
}

// MonthToDate returns the tenant's month to date at now.
func (s *Store) MonthToDate(ctx context.Context, tenantID string, now time.Time) (MonthToDate, error) {
	now = now.UTC()
	start := MonthStart(now)
	end := start.AddDate(0, 1, 0)
	m := MonthToDate{Month: start, Now: now}
	// The ledger is hourly: the hour now is in counts whole.
	upTo := now.Truncate(time.Hour).Add(time.Hour)
	var err error
	if m.Days, err = s.Daily(ctx, tenantID, Range{From: start, To: upTo}); err != nil {
		return m, fmt.Errorf("month to date of tenant %s: %w", tenantID, err)
	}
	if m.Total, err = s.Totals(ctx, tenantID, Range{From: start, To: upTo}); err != nil {
		return m, fmt.Errorf("month to date of tenant %s: %w", tenantID, err)
	}
	if gone := now.Sub(start); gone > 0 {
		m.Forecast = m.Total.Cost.Float64() * float64(end.Sub(start)) / float64(gone)
	} else {
		m.Forecast = m.Total.Cost.Float64()
	}
	prevStart := start.AddDate(0, -1, 0)
	prevTo := prevStart.Add(upTo.Sub(start))
	if prevTo.After(start) {
		prevTo = start
	}
	if m.Previous, err = s.Totals(ctx, tenantID, Range{From: prevStart, To: prevTo}); err != nil {
		return m, fmt.Errorf("month to date of tenant %s: %w", tenantID, err)
	}
	return m, nil
}
