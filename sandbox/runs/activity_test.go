package runs

import (
	"context"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// TestActivity: runs per UTC day with their results (timed out counts as
// a failure, cancelled as neither), every day present, the top workflows
// and starters; another tenant's runs count for nothing. On SQLite and
// PostgreSQL.
func TestActivity(t *testing.T) {
	ctx := context.Background()
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			now := day
			s := NewStore(e.db, func() time.Time { return now })
			bv, err := e.wf.Save(ctx, admin, e.b.ID, []byte(source), nil)
			if err != nil {
				t.Fatal(err)
			}
			dev := audit.Actor{Kind: audit.ActorUser, ID: "u2", Name: "Dev"}
			run := func(tenantID string, v workflow.Version, who audit.Actor, at time.Time, end State) {
				t.Helper()
				now = at
				r, err := s.Create(ctx, who, tenantID, NewRun{Version: v, Trigger: Trigger{Kind: TriggerManual}})
				if err != nil {
					t.Fatalf("Create = %v", err)
				}
				if end != StateQueued {
					if err := s.finish(ctx, &r, end, "test", nil, 0); err != nil {
						t.Fatalf("finish = %v", err)
					}
				}
			}
			run(e.a.ID, e.v, admin, day.Add(time.Hour), StateSucceeded)
			run(e.a.ID, e.v, dev, day.Add(2*time.Hour), StateFailed)
			run(e.a.ID, e.v, dev, day.AddDate(0, 0, 2).Add(time.Hour), StateTimedOut)
			run(e.a.ID, e.v, dev, day.AddDate(0, 0, 2).Add(2*time.Hour), StateCancelled)
			run(e.a.ID, e.v, dev, day.AddDate(0, 0, 2).Add(3*time.Hour), StateQueued)
			run(e.a.ID, e.v, admin, day.AddDate(0, 0, -1), StateSucceeded) // before the span
			run(e.b.ID, bv, admin, day.Add(time.Hour), StateSucceeded)

			a, err := s.Activity(ctx, e.a.ID, day, day.AddDate(0, 0, 2), 5)
			if err != nil {
				t.Fatalf("Activity = %v", err)
			}
			want := []Day{{day, 2, 1, 1}, {day.AddDate(0, 0, 1), 0, 0, 0}, {day.AddDate(0, 0, 2), 3, 0, 1}}
			if len(a.Days) != len(want) {
				t.Fatalf("Got(days) = %+v; want %+v", a.Days, want)
			}
			for i, w := range want {
				if g := a.Days[i]; !g.Day.Equal(w.Day) || g.Runs != w.Runs || g.Succeeded != w.Succeeded || g.Failures != w.Failures {
					t.Errorf("Got(day %d) = %+v; want %+v", i, g, w)
				}
			}
			if a.Runs != 5 || a.Succeeded != 1 || a.Failures != 2 {
				t.Errorf("Got(totals) = %d runs, %d succeeded, %d failed; want 5, 1, 2", a.Runs, a.Succeeded, a.Failures)
			}
			if len(a.Workflows) != 1 || a.Workflows[0] != (Count{"tests", 5}) {
				t.Errorf("Got(top workflows) = %+v; want tests x5", a.Workflows)
			}
			if len(a.Starters) != 2 || a.Starters[0] != (Count{"Dev", 4}) || a.Starters[1] != (Count{admin.Name, 1}) {
				t.Errorf("Got(top starters) = %+v; want Dev x4, %s x1", a.Starters, admin.Name)
			}
			if one, err := s.Activity(ctx, e.a.ID, day, day.AddDate(0, 0, 2), 1); err != nil || len(one.Starters) != 1 {
				t.Errorf("Got(top 1) = %+v, %v; want one line", one.Starters, err)
			}
		})
	}
}
