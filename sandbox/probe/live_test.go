package probe_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/probe"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

func TestLiveFacts(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			ts := tenants.NewStore(d.DB, nil)
			actor := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
			a, err := ts.CreateTenant(ctx, actor, "live-a", "A")
			if err != nil {
				t.Fatal(err)
			}
			b, err := ts.CreateTenant(ctx, actor, "live-b", "B")
			if err != nil {
				t.Fatal(err)
			}
			// Records as the sandbox service leaves them, an hour of
			// lifetime each, seen two hours later.
			running := sandboxtest.Record(t, d.DB, a.ID, "dev")
			stopped := sandboxtest.RecordState(t, d.DB, a.ID, "dev", sandbox.StateStopped)
			sandboxtest.RecordState(t, d.DB, a.ID, "dev", sandbox.StateDestroyed)
			sandboxtest.RecordState(t, d.DB, a.ID, "dev", sandbox.StateFailed)
			sandboxtest.Record(t, d.DB, b.ID, "dev")
			now := time.Now().UTC().Truncate(time.Microsecond)
			for i, rec := range []string{"recordings/a/1.cast", ""} {
				sess := terminal.Session{ID: fmt.Sprintf("%s-term-%d", a.ID, i), TenantID: a.ID, SandboxID: running.ID, ArgvJSON: "[]",
					Cols: 80, Rows: 24, StartedAt: now.Add(time.Duration(-i) * time.Minute), Recording: rec, RetentionDays: 30, SeenAt: now}
				if err := d.DB.Create(&sess).Error; err != nil {
					t.Fatal(err)
				}
			}
			later := func() time.Time { return time.Now().Add(2 * time.Hour) }
			live := probe.NewLive(d.DB, later)

			f, err := live.Facts(ctx, a.ID, time.Now().Add(-time.Hour), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if f.Active != 1 || len(f.Overdue) != 1 || f.Overdue[0].ID != running.ID {
				t.Errorf("Got(Active, Overdue) = %d, %+v; want 1, [%s]", f.Active, f.Overdue, running.ID)
			}
			if len(f.Lingering) != 1 || f.Lingering[0].ID != stopped.ID {
				t.Errorf("Got(Lingering) = %+v; want [%s]", f.Lingering, stopped.ID)
			}
			if f.Sessions != 2 || f.Recorded != 1 || f.Unrecorded != 1 || f.LastRecording != a.ID+"-term-0" {
				t.Errorf("Got(Sessions, Recorded, Unrecorded, LastRecording) = %d, %d, %d, %q; want 2, 1, 1, %s-term-0",
					f.Sessions, f.Recorded, f.Unrecorded, f.LastRecording, a.ID)
			}
			if f.Ended != 2 || f.Destroyed != 1 {
				t.Errorf("Got(Ended, Destroyed) = %d, %d; want 2, 1", f.Ended, f.Destroyed)
			}
			// Within the grace nothing is late.
			f, err = probe.NewLive(d.DB, nil).Facts(ctx, a.ID, time.Now().Add(-time.Hour), time.Minute)
			if err != nil || len(f.Overdue) != 0 || len(f.Lingering) != 0 {
				t.Errorf("Got(Facts now) = %+v, %v; want nothing overdue or lingering", f, err)
			}
			if got, err := live.Sandbox(ctx, a.ID, running.ID); err != nil || got.State != "running" {
				t.Errorf("Got(Sandbox) = %+v, %v; want running", got, err)
			}
			if _, err := live.Sandbox(ctx, b.ID, running.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(Sandbox of another tenant) = %v; want ErrNotFound", err)
			}
		})
	}
}
