package runs

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// TestRerunUsesCurrentVersion: a re-run runs the workflow as it is now,
// trusted as far as the run it repeats; a deleted workflow's run, and a
// skipped run, are refused and nothing is written.
func TestRerunUsesCurrentVersion(t *testing.T) {
	ctx := context.Background()
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			eng := sandboxlessEngine(t, e)
			create := func(trust, reason string) Run {
				t.Helper()
				r, err := e.s.Create(ctx, admin, e.a.ID, NewRun{Version: e.v, Trigger: Trigger{Kind: "pull_request", Repository: "acme/app",
					SHA: "abc", PRNumber: 7, Trust: trust, TrustReason: reason}})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			trusted := create(workflow.TrustTrusted, "pull request from a branch of acme/app")
			untrusted := create(workflow.TrustUntrusted, "fork pull request from mallory/app (allow_forks)")
			skipped := create(workflow.TrustSkipped, "fork pull request from mallory/app (allow_forks not set)")
			v2, err := e.wf.Save(ctx, admin, e.a.ID, []byte(strings.Replace(source, "    run: echo two\n", "    run: echo two\n  - name: three\n    run: echo three\n", 1)), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, old := range []Run{trusted, untrusted} {
				again, err := eng.Rerun(ctx, admin, e.a.ID, old.ID)
				if err != nil {
					t.Fatalf("Rerun(%s run) = %v; want nil", old.Trust, err)
				}
				_, steps, err := e.s.Get(ctx, e.a.ID, again.ID)
				if err != nil {
					t.Fatal(err)
				}
				if again.WorkflowVersion != v2.Version || len(steps) != 3 || again.RerunOf != old.ID || again.Trust != old.Trust ||
					again.TrustReason != old.TrustReason || again.TriggerKind != TriggerRerun || again.SHA != "abc" {
					t.Errorf("Got(Rerun(%s run)) = version %d (%d steps), rerun of %q, trust %q (%q), trigger %s at %q; want version %d (3 steps), rerun of %s, trust %q (%q), rerun at abc",
						old.Trust, again.WorkflowVersion, len(steps), again.RerunOf, again.Trust, again.TrustReason, again.TriggerKind, again.SHA,
						v2.Version, old.ID, old.Trust, old.TrustReason)
				}
			}
			refused := []struct {
				name   string
				id     string
				before func()
				want   error
				says   string
			}{
				{"skipped", skipped.ID, nil, errdefs.ErrConflict, "was skipped (fork pull request from mallory/app (allow_forks not set))"},
				{"another tenant's", trusted.ID, nil, errdefs.ErrNotFound, ""},
				{"deleted workflow", trusted.ID, func() {
					if err := e.wf.Delete(ctx, admin, e.a.ID, "tests"); err != nil {
						t.Fatal(err)
					}
				}, errdefs.ErrConflict, "workflow tests was deleted: its runs cannot be re-run"},
			}
			for _, tt := range refused {
				t.Run(tt.name, func(t *testing.T) {
					if tt.before != nil {
						tt.before()
					}
					tenant := e.a.ID
					if tt.want == errdefs.ErrNotFound {
						tenant = e.b.ID
					}
					before := dbtest.Count(t, e.db)
					_, err := eng.Rerun(ctx, admin, tenant, tt.id)
					if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) {
						t.Errorf("Got(Rerun) = %v; want %v saying %q", err, tt.want, tt.says)
					}
					if ok, diff := dbtest.Equal(before, dbtest.Count(t, e.db)); !ok {
						t.Errorf("Got(refused Rerun) wrote %s; want nothing", diff)
					}
				})
			}
		})
	}
}
