package runs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// sandboxlessEngine is an engine on e without sandboxes: the runs it
// starts fail at once, saying so. It closes at the end of the test.
func sandboxlessEngine(t *testing.T, e env) *Engine {
	t.Helper()
	eng := NewEngine(e.s, e.wf, nil, Config{})
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := eng.Close(cctx); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return eng
}

// TestStartManual: the one way a person starts a run (the page and the
// API) checks the ref, the SHA and the manual trigger before writing
// anything, and records a trusted manual run by the caller, audited.
func TestStartManual(t *testing.T) {
	ctx := context.Background()
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			eng := sandboxlessEngine(t, e)
			if _, err := e.wf.Save(ctx, admin, e.a.ID, []byte("name: pr-only\ntriggers:\n  - event: pull_request\nsteps:\n  - name: one\n    run: echo one\n"), nil); err != nil {
				t.Fatal(err)
			}
			if _, err := e.wf.Save(ctx, admin, e.a.ID, []byte(strings.Replace(source, "name: tests\n", "name: gone\n", 1)), nil); err != nil {
				t.Fatal(err)
			}
			if err := e.wf.Delete(ctx, admin, e.a.ID, "gone"); err != nil {
				t.Fatal(err)
			}
			refused := []struct {
				name, tenant, workflow string
				m                      Manual
				want                   error
				field                  string
			}{
				{"ref too long", e.a.ID, "tests", Manual{Ref: strings.Repeat("r", 256)}, errdefs.ErrInvalid, "ref"},
				{"ref with a newline", e.a.ID, "tests", Manual{Ref: "main\nX-Injected: 1"}, errdefs.ErrInvalid, "ref"},
				{"ref with NUL", e.a.ID, "tests", Manual{Ref: "ma\x00in"}, errdefs.ErrInvalid, "ref"},
				{"sha not hex", e.a.ID, "tests", Manual{SHA: "zzzzzzz"}, errdefs.ErrInvalid, "sha"},
				{"sha too short", e.a.ID, "tests", Manual{SHA: "abc"}, errdefs.ErrInvalid, "sha"},
				{"no manual trigger", e.a.ID, "pr-only", Manual{}, errdefs.ErrInvalid, "name"},
				{"unknown workflow", e.a.ID, "nope", Manual{}, errdefs.ErrNotFound, ""},
				{"deleted workflow", e.a.ID, "gone", Manual{}, errdefs.ErrNotFound, ""},
				{"another tenant's workflow", e.b.ID, "tests", Manual{}, errdefs.ErrNotFound, ""},
			}
			for _, tt := range refused {
				t.Run(tt.name, func(t *testing.T) {
					before := dbtest.Count(t, e.db)
					_, err := eng.StartManual(ctx, admin, tt.tenant, tt.workflow, tt.m)
					var fe *errdefs.FieldError
					if !errors.Is(err, tt.want) || (tt.field != "" && (!errors.As(err, &fe) || fe.Field != tt.field)) {
						t.Errorf("Got(StartManual) = %v; want %v on field %q", err, tt.want, tt.field)
					}
					if ok, diff := dbtest.Equal(before, dbtest.Count(t, e.db)); !ok {
						t.Errorf("Got(refused StartManual) wrote %s; want nothing", diff)
					}
				})
			}

			r, err := eng.StartManual(ctx, admin, e.a.ID, "tests", Manual{Ref: "  main ", SHA: "ABCDEF1"})
			if err != nil {
				t.Fatalf("StartManual() = %v", err)
			}
			got, steps, err := e.s.Get(ctx, e.a.ID, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.TriggerKind != TriggerManual || got.Ref != "main" || got.SHA != "abcdef1" || got.Sender != admin.Name ||
				got.CreatedBy != admin.Name || got.Trust != workflow.TrustTrusted || got.WorkflowVersion != e.v.Version || len(steps) != 2 {
				t.Errorf("Got(run) = trigger %s at %q/%q by %q (%q), trust %s, version %d, %d steps; want manual at main/abcdef1 by %s, trusted, version %d, 2 steps",
					got.TriggerKind, got.Ref, got.SHA, got.Sender, got.CreatedBy, got.Trust, got.WorkflowVersion, len(steps), admin.Name, e.v.Version)
			}
			evs, err := audit.NewLog(e.db, nil).List(ctx, e.a.ID, audit.Filter{Type: audit.TypeWorkflowRunCreated})
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 1 || evs[0].TargetID != r.ID || evs[0].Details["trigger"] != TriggerManual || evs[0].Details["ref"] != "main" {
				t.Errorf("Got(%s events) = %+v; want one for run %s, manual at main", audit.TypeWorkflowRunCreated, evs, r.ID)
			}
			// It was started: the engine (without sandboxes) ends it.
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := eng.Close(cctx); err != nil {
				t.Fatal(err)
			}
			if ended, _, err := e.s.Get(ctx, e.a.ID, r.ID); err != nil || !ended.State.Ended() {
				t.Errorf("Got(run after Close) = %s, %v; want ended (it was started)", ended.State, err)
			}
		})
	}
}
