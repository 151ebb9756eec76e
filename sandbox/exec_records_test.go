package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// TestStoreCloseLostExecs: open command records are closed once, with an
// end and a reason, and a real end already recorded is never overwritten.
// On SQLite and PostgreSQL.
func TestStoreCloseLostExecs(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			st := NewStore(d.DB, nil)
			tn := newTenant(t, d.DB, "lost-"+d.Name)
			running, ended := newRecord(tn.ID, 1, 1, 128), newRecord(tn.ID, 2, 1, 128)
			running.State, ended.State = StateRunning, StateFailed
			for _, sb := range []*Sandbox{running, ended} {
				if err := d.DB.Create(sb).Error; err != nil {
					t.Fatal(err)
				}
			}
			old := time.Now().UTC().Add(-time.Hour)
			mk := func(sb *Sandbox, done bool) ExecRecord {
				id, _ := newID()
				rec := ExecRecord{ID: id, SandboxID: sb.ID, TenantID: tn.ID, ArgvJSON: `["sleep","1"]`, StartedAt: old}
				if done {
					end, code := old.Add(time.Second), 0
					rec.EndedAt, rec.ExitCode, rec.Reason = &end, &code, "exited"
				}
				if err := d.DB.Create(&rec).Error; err != nil {
					t.Fatal(err)
				}
				return rec
			}
			lost, survived, finished, inEnded, served := mk(running, false), mk(running, false), mk(running, true), mk(ended, false), mk(ended, false)

			open, err := st.openExecs(ctx, []string{running.ID}, time.Now())
			if err != nil || len(open) != 2 {
				t.Fatalf("Got(openExecs()) = %d records, %v; want 2", len(open), err)
			}
			if open, _ := st.openExecs(ctx, []string{running.ID}, old); len(open) != 0 {
				t.Errorf("Got(openExecs(before they started)) = %d records; want 0", len(open))
			}
			if done, err := st.closeExec(ctx, lost, nil, ReasonLost, 0); !done || err != nil {
				t.Errorf("Got(closeExec(lost)) = %v, %v; want true", done, err)
			}
			if done, _ := st.closeExec(ctx, lost, nil, "again", 0); done {
				t.Errorf("Got(closeExec(closed already)) = true; want false")
			}
			if done, _ := st.closeExec(ctx, finished, nil, ReasonLost, 0); done {
				t.Errorf("Got(closeExec(finished)) = true; want false: a real end stays")
			}
			if n, err := st.closeExecsOfEnded(ctx, ReasonLost, []string{served.ID}); n != 1 || err != nil {
				t.Errorf("Got(closeExecsOfEnded()) = %d, %v; want 1", n, err)
			}
			want := map[string]string{lost.ID: ReasonLost, survived.ID: "", finished.ID: "exited", inEnded.ID: ReasonLost, served.ID: ""}
			for id, reason := range want {
				var rec ExecRecord
				if err := d.DB.First(&rec, "id = ?", id).Error; err != nil {
					t.Fatal(err)
				}
				if rec.Reason != reason || (rec.EndedAt != nil) != (reason != "") {
					t.Errorf("Got(record %s) = reason %q, ended %v; want reason %q", id, rec.Reason, rec.EndedAt, reason)
				}
				if id == lost.ID && (rec.DurationMS < time.Hour.Milliseconds()-60000 || rec.EndedAt.Before(old)) {
					t.Errorf("Got(lost record) = duration %d ms, end %v; want about an hour, after its start", rec.DurationMS, rec.EndedAt)
				}
			}
		})
	}
}
