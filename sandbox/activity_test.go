package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// TestDailyCreated: sandboxes made per UTC day, every day of the span
// present (zero on a day without any), the tenant's own only. On SQLite
// and PostgreSQL.
func TestDailyCreated(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			now := day
			st := NewStore(d.DB, func() time.Time { return now })
			a, b := newTenant(t, d.DB, "daily-a-"+d.Name), newTenant(t, d.DB, "daily-b-"+d.Name)
			mk := func(tenantID string, at time.Time) {
				t.Helper()
				now = at
				if err := st.create(ctx, testActor, newRecord(tenantID, 0, 1, 64)); err != nil {
					t.Fatalf("create = %v", err)
				}
			}
			mk(a.ID, day.Add(time.Hour))                    // Dec 1
			mk(a.ID, day.Add(23*time.Hour+59*time.Minute))  // Dec 1, just before midnight
			mk(a.ID, day.AddDate(0, 0, 2).Add(time.Minute)) // Dec 3
			mk(a.ID, day.AddDate(0, 0, -1))                 // Nov 30: before the span
			mk(b.ID, day.AddDate(0, 0, 1).Add(2*time.Hour)) // Dec 2, of B
			got, err := st.DailyCreated(ctx, a.ID, day.Add(5*time.Hour), day.AddDate(0, 0, 3).Add(time.Hour))
			if err != nil {
				t.Fatalf("DailyCreated = %v", err)
			}
			want := []int{2, 0, 1, 0}
			if len(got) != len(want) {
				t.Fatalf("Got(days) = %+v; want %d days from December 1", got, len(want))
			}
			for i, w := range want {
				if !got[i].Day.Equal(day.AddDate(0, 0, i)) || got[i].Created != w {
					t.Errorf("Got(day %d) = %s %d; want %s %d", i, got[i].Day, got[i].Created, day.AddDate(0, 0, i), w)
				}
			}
			// A span longer than the bound keeps its newest days.
			long, err := st.DailyCreated(ctx, a.ID, day.AddDate(-2, 0, 0), day)
			if err != nil || len(long) != maxActivityDays || !long[len(long)-1].Day.Equal(day) || long[len(long)-1].Created != 2 {
				t.Errorf("Got(two years) = %d days, %v; want the newest %d", len(long), err, maxActivityDays)
			}
		})
	}
}
