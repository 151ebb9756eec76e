package usage_test

import (
	"math"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/usage"
)

// TestMonthToDate: the month's cost so far per day (every day up to today
// present) adds up to its total; the forecast spreads it over the month at
// the rate so far; the month before is read over the same hours from its
// start only, for the trend; another tenant's usage counts for nothing.
func TestMonthToDate(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		a, b := e.tenant(t, "mtd-a"), e.tenant(t, "mtd-b")
		run := func(tenantID, id string, vcpus int, at time.Time, d time.Duration) {
			t.Helper()
			e.open(t, tenantID, id, vcpus, 512, at)
			end := at.Add(d)
			e.observe(t, id, &usage.Sample{At: end, CPUNS: d.Nanoseconds() / 2}, &end)
		}
		now := time.Date(2026, 12, 10, 11, 30, 0, 0, time.UTC)
		run(a.ID, "dec-3", 2, time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC), 2*time.Hour)
		run(a.ID, "dec-10", 1, time.Date(2026, 12, 10, 10, 0, 0, 0, time.UTC), time.Hour)
		run(a.ID, "nov-4", 1, time.Date(2026, 11, 4, 9, 0, 0, 0, time.UTC), time.Hour)
		run(a.ID, "nov-20", 4, time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC), 5*time.Hour) // after the same part of November
		run(b.ID, "b-dec", 4, time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC), 3*time.Hour)

		m, err := e.store.MonthToDate(ctx, a.ID, now)
		if err != nil {
			t.Fatalf("MonthToDate = %v", err)
		}
		dec := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		want, err := e.store.Totals(ctx, a.ID, usage.Range{From: dec, To: now.Truncate(time.Hour).Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if m.Total.Cost.IsZero() || m.Total.Cost.Cmp(want.Cost) != 0 {
			t.Errorf("Got(month-to-date cost) = %s; want %s, not zero", m.Total.Cost, want.Cost)
		}
		if len(m.Days) != 10 || !m.Days[0].Day.Equal(dec) || !m.Days[9].Day.Equal(dec.AddDate(0, 0, 9)) {
			t.Fatalf("Got(days) = %d from %v; want December 1 to 10", len(m.Days), m.Days[0].Day)
		}
		var days usage.Money
		for _, d := range m.Days {
			days = days.Add(d.Cost)
		}
		if days.Cmp(m.Total.Cost) != 0 || !m.Days[1].Cost.IsZero() || m.Days[2].Cost.IsZero() {
			t.Errorf("Got(days' cost) = %s (Dec 2: %s, Dec 3: %s); want %s, on December 3 and 10 only", days, m.Days[1].Cost, m.Days[2].Cost, m.Total.Cost)
		}
		gone := now.Sub(dec).Hours()
		if f := m.Total.Cost.Float64() * 31 * 24 / gone; math.Abs(m.Forecast-f) > 1e-9 {
			t.Errorf("Got(forecast) = %v; want %v (the month at the rate so far)", m.Forecast, f)
		}
		nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
		prev, err := e.store.Totals(ctx, a.ID, usage.Range{From: nov, To: nov.Add(now.Truncate(time.Hour).Add(time.Hour).Sub(dec))})
		if err != nil {
			t.Fatal(err)
		}
		if m.Previous.Cost.IsZero() || m.Previous.Cost.Cmp(prev.Cost) != 0 {
			t.Errorf("Got(previous month to the same point) = %s; want %s (November 4 only)", m.Previous.Cost, prev.Cost)
		}
		if tr, ok := m.Trend(); !ok || math.Abs(tr-(m.Total.Cost.Float64()/prev.Cost.Float64()-1)) > 1e-9 || tr <= 0 {
			t.Errorf("Got(trend) = %v, %v; want the rise over November's same days", tr, ok)
		}
		// B: its own December only, nothing the month before.
		mb, err := e.store.MonthToDate(ctx, b.ID, now)
		if err != nil {
			t.Fatal(err)
		}
		if mb.Total.Cost.IsZero() || mb.Total.Cost.Cmp(m.Total.Cost) == 0 || !mb.Previous.Cost.IsZero() {
			t.Errorf("Got(B's month to date) = %s, before %s; want its own cost, nothing before", mb.Total.Cost, mb.Previous.Cost)
		}
		if _, ok := mb.Trend(); ok {
			t.Errorf("Got(B's trend) ok; want none without a month before")
		}
	})
}
