package audit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
)

// TestRetention: each tenant keeps its events for its own retention days
// (0 keeps everything), the deletion is itself audited, other tenants'
// events are untouched, and a second pass deletes nothing more.
func TestRetention(t *testing.T) {
	each(t, func(t *testing.T, db *gorm.DB) {
		now := time.Date(2031, 5, 6, 12, 0, 0, 0, time.UTC)
		clock := func() time.Time { return now }
		log := audit.NewLog(db, clock)
		// t1 keeps 30 days, t2 keeps everything, t3 keeps 1 day.
		days := map[string]int{"t1": 30, "t2": 0, "t3": 1}
		for tenant := range days {
			for _, age := range []int{400, 40, 31, 29, 0} {
				e := user.Event(tenant, audit.TypeLogin, "user", "u1", map[string]any{"age_days": age})
				e.Time = now.AddDate(0, 0, -age)
				if err := log.Record(ctx, e); err != nil {
					t.Fatalf("Record = %v", err)
				}
			}
		}
		r := audit.NewRetention(log, audit.RetentionConfig{
			Tenants: func(context.Context) ([]string, error) { return []string{"t1", "t2", "t3"}, nil },
			Days:    func(_ context.Context, id string) (int, error) { return days[id], nil },
		})
		n, err := r.PruneOnce(ctx)
		if err != nil {
			t.Fatalf("PruneOnce = %v", err)
		}
		if n != 3+0+4 {
			t.Errorf("Got(PruneOnce) = %d; want 7 deleted", n)
		}
		tests := []struct {
			tenant     string
			left       int // login events left
			pruneEvent bool
		}{
			{"t1", 2, true},
			{"t2", 5, false},
			{"t3", 1, true},
		}
		for _, tc := range tests {
			t.Run(tc.tenant, func(t *testing.T) {
				logins, err := log.List(ctx, tc.tenant, audit.Filter{Type: audit.TypeLogin})
				if err != nil {
					t.Fatalf("List = %v", err)
				}
				if len(logins) != tc.left {
					t.Errorf("Got(login events left) = %d; want %d", len(logins), tc.left)
				}
				for _, e := range logins {
					if e.Time.Before(now.AddDate(0, 0, -days[tc.tenant])) && days[tc.tenant] > 0 {
						t.Errorf("Got(event of %s) kept; want it pruned", e.Time)
					}
				}
				pruned, err := log.List(ctx, tc.tenant, audit.Filter{Type: audit.TypeAuditPruned})
				if err != nil {
					t.Fatalf("List = %v", err)
				}
				if got := len(pruned) == 1; got != tc.pruneEvent {
					t.Fatalf("Got(audit.pruned events) = %d; want one: %v", len(pruned), tc.pruneEvent)
				}
				if tc.pruneEvent && (pruned[0].ActorKind != audit.ActorSystem || pruned[0].Code != "SX5001I" || pruned[0].Details["deleted"] == nil) {
					t.Errorf("Got(audit.pruned) = %+v; want a system event with the count", pruned[0])
				}
			})
		}
		if n, err := r.PruneOnce(ctx); err != nil || n != 0 {
			t.Errorf("Got(second PruneOnce) = %d, %v; want 0, nil", n, err)
		}
	})
}

// TestRetentionErrors: a tenant whose policy cannot be read is skipped and
// the error reported; the others are still pruned.
func TestRetentionErrors(t *testing.T) {
	each(t, func(t *testing.T, db *gorm.DB) {
		now := time.Date(2031, 5, 6, 12, 0, 0, 0, time.UTC)
		log := audit.NewLog(db, func() time.Time { return now })
		for _, tenant := range []string{"ok", "broken"} {
			e := user.Event(tenant, audit.TypeLogin, "user", "u1", nil)
			e.Time = now.AddDate(-1, 0, 0)
			if err := log.Record(ctx, e); err != nil {
				t.Fatalf("Record = %v", err)
			}
		}
		errPolicy := errors.New("policy unreadable")
		r := audit.NewRetention(log, audit.RetentionConfig{
			Tenants: func(context.Context) ([]string, error) { return []string{"broken", "ok"}, nil },
			Days: func(_ context.Context, id string) (int, error) {
				if id == "broken" {
					return 0, errPolicy
				}
				return 7, nil
			},
		})
		n, err := r.PruneOnce(ctx)
		if !errors.Is(err, errPolicy) || n != 1 {
			t.Errorf("Got(PruneOnce) = %d, %v; want 1, %v", n, err, errPolicy)
		}
		left, _ := log.List(ctx, "broken", audit.Filter{Type: audit.TypeLogin})
		if len(left) != 1 {
			t.Errorf("Got(events of the broken tenant) = %d; want 1 kept", len(left))
		}
	})
}

// TestRetentionRun: the loop prunes at once, then once every Interval on
// its clock (a fake one here: the hour passes at once).
func TestRetentionRun(t *testing.T) {
	each(t, func(t *testing.T, db *gorm.DB) {
		clk := clockwork.NewFakeClockAt(time.Date(2031, 5, 6, 12, 0, 0, 0, time.UTC))
		log := audit.NewLog(db, clk.Now)
		record := func(age int) {
			t.Helper()
			e := user.Event("t1", audit.TypeLogin, "user", "u1", map[string]any{"age_days": age})
			e.Time = clk.Now().AddDate(0, 0, -age)
			if err := log.Record(ctx, e); err != nil {
				t.Fatalf("Record = %v", err)
			}
		}
		logins := func() int {
			t.Helper()
			l, err := log.List(ctx, "t1", audit.Filter{Type: audit.TypeLogin})
			if err != nil {
				t.Fatalf("List = %v", err)
			}
			return len(l)
		}
		passes := make(chan struct{}, 8)
		r := audit.NewRetention(log, audit.RetentionConfig{Interval: time.Hour, Clock: clk,
			Tenants: func(context.Context) ([]string, error) { passes <- struct{}{}; return []string{"t1"}, nil },
			Days:    func(context.Context, string) (int, error) { return 30, nil },
		})
		record(40)
		record(1)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { r.Run(rctx); close(done) }()
		defer func() { cancel(); <-done }()

		<-passes // the first pass, at once
		waitLogins(t, logins, 1)
		record(40)
		if err := clk.BlockUntilContext(ctx, 1); err != nil { // the loop's ticker
			t.Fatal(err)
		}
		clk.Advance(time.Hour)
		<-passes // the next one, an Interval later
		waitLogins(t, logins, 1)
		if n := len(passes); n != 0 {
			t.Errorf("Got(%d more passes) after one Interval; want none", n)
		}
	})
}

// waitLogins waits for a pass running in the background to leave want
// login events.
func waitLogins(t *testing.T, logins func() int, want int) {
	t.Helper()
	got := logins()
	for deadline := time.Now().Add(time.Minute); got != want && time.Now().Before(deadline); got = logins() {
		time.Sleep(5 * time.Millisecond)
	}
	if got != want {
		t.Fatalf("Got(login events left) = %d; want %d", got, want)
	}
}
