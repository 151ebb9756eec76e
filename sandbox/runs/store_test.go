package runs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

var admin = audit.Actor{Kind: audit.ActorUser, ID: "u1", Name: "Ada Admin"}

const source = `name: tests
triggers:
  - event: manual
  - event: pull_request
steps:
  - name: one
    run: echo one
  - name: two
    run: echo two
`

type env struct {
	name string
	db   *gorm.DB
	s    *Store
	wf   *workflow.Store
	a, b tenants.Tenant
	v    workflow.Version // tenant A's "tests" v1
}

func envs(t *testing.T) []env {
	t.Helper()
	ctx := context.Background()
	var out []env
	for _, d := range dbtest.Databases(t) {
		ts := tenants.NewStore(d.DB, nil)
		a, err := ts.CreateTenant(ctx, admin, "runs-a", "A")
		if err != nil {
			t.Fatal(err)
		}
		b, err := ts.CreateTenant(ctx, admin, "runs-b", "B")
		if err != nil {
			t.Fatal(err)
		}
		wf, err := workflow.NewStore(d.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		v, err := wf.Save(ctx, admin, a.ID, []byte(source), nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, env{name: d.Name, db: d.DB, s: NewStore(d.DB, nil), wf: wf, a: a, b: b, v: v})
	}
	return out
}

func TestCreateGetList(t *testing.T) {
	ctx := context.Background()
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			r1, err := e.s.Create(ctx, admin, e.a.ID, NewRun{Version: e.v, Trigger: Trigger{Kind: TriggerManual, Ref: "main"}})
			if err != nil {
				t.Fatalf("Create() = %v", err)
			}
			if r1.Number != 1 || r1.State != StateQueued || r1.CreatedBy != admin.Name || r1.WorkflowVersion != 1 {
				t.Errorf("Create() = %+v; want run 1, queued, by %s, version 1", r1, admin.Name)
			}
			r2, err := e.s.Create(ctx, admin, e.a.ID, NewRun{Version: e.v, Trigger: Trigger{Kind: TriggerManual}})
			if err != nil || r2.Number != 2 {
				t.Fatalf("Create() second = %+v, %v; want number 2", r2, err)
			}
			got, steps, err := e.s.Get(ctx, e.a.ID, r1.ID)
			if err != nil || got.Ref != "main" || len(steps) != 2 || steps[0].Name != "one" || steps[1].State != StepPending {
				t.Errorf("Get() = %+v, %+v, %v; want ref main, steps one, two pending", got, steps, err)
			}
			list, err := e.s.List(ctx, e.a.ID, Filter{})
			if err != nil || len(list) != 2 || list[0].ID != r2.ID {
				t.Errorf("List() = %v, %v; want [r2 r1]", list, err)
			}
			if l, err := e.s.List(ctx, e.a.ID, Filter{Before: r2.ID}); err != nil || len(l) != 1 || l[0].ID != r1.ID {
				t.Errorf("List(before r2) = %v, %v; want [r1]", l, err)
			}
			if l, err := e.s.List(ctx, e.a.ID, Filter{State: StateRunning}); err != nil || len(l) != 0 {
				t.Errorf("List(running) = %v, %v; want none", l, err)
			}
			if _, err := e.s.List(ctx, e.a.ID, Filter{State: "bogus"}); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("List(bogus state) = %v; want ErrInvalid", err)
			}
			var n int64
			e.db.Table("audit_events").Where("tenant_id = ? AND type = ?", e.a.ID, audit.TypeWorkflowRunCreated).Count(&n)
			if n != 2 {
				t.Errorf("workflow.run_created events = %d; want 2", n)
			}

			// Tenant B sees none of it and cannot create runs of A's workflow.
			if _, _, err := e.s.Get(ctx, e.b.ID, r1.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Get(B, A's run) = %v; want ErrNotFound", err)
			}
			if l, err := e.s.List(ctx, e.b.ID, Filter{}); err != nil || len(l) != 0 {
				t.Errorf("List(B) = %v, %v; want none", l, err)
			}
			if _, err := e.s.Create(ctx, admin, e.b.ID, NewRun{Version: e.v, Trigger: Trigger{Kind: TriggerManual}}); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Create(B, A's workflow) = %v; want ErrNotFound", err)
			}
			if _, err := e.s.cancelQueued(ctx, admin, e.b.ID, r1.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("cancelQueued(B, A's run) = %v; want ErrNotFound", err)
			}

			// Cancel a queued run; a second cancel conflicts.
			c, err := e.s.cancelQueued(ctx, admin, e.a.ID, r1.ID)
			if err != nil || c.State != StateCancelled || c.EndedAt == nil {
				t.Errorf("cancelQueued() = %+v, %v; want cancelled with an end", c, err)
			}
			if _, steps, _ := e.s.Get(ctx, e.a.ID, r1.ID); steps[0].State != StepSkipped {
				t.Errorf("steps after cancel = %+v; want skipped", steps)
			}
			if _, err := e.s.cancelQueued(ctx, admin, e.a.ID, r1.ID); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("cancelQueued(cancelled) = %v; want ErrConflict", err)
			}
			if err := e.s.start(ctx, &c); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("start(cancelled) = %v; want ErrConflict", err)
			}
		})
	}
}

func TestDeliverDeduplicates(t *testing.T) {
	ctx := context.Background()
	gh := audit.Actor{Kind: audit.ActorSystem, ID: "github"}
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			d := Delivery{DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", Event: "pull_request", Action: "opened", Repository: "acme/app"}
			nr := NewRun{Version: e.v, Trigger: Trigger{Kind: "pull_request", Repository: "acme/app", SHA: "abc", PRNumber: 7}}
			rs, err := e.s.Deliver(ctx, gh, e.a.ID, d, []NewRun{nr})
			if err != nil || len(rs) != 1 || rs[0].DeliveryID != d.DeliveryID || rs[0].PRNumber != 7 {
				t.Fatalf("Deliver() = %+v, %v; want one run of the delivery", rs, err)
			}
			before := dbtest.Count(t, e.db)
			if _, err := e.s.Deliver(ctx, gh, e.a.ID, d, []NewRun{nr}); !errors.Is(err, ErrDuplicateDelivery) {
				t.Errorf("Deliver(again) = %v; want ErrDuplicateDelivery", err)
			}
			if ok, diff := dbtest.Equal(before, dbtest.Count(t, e.db)); !ok {
				t.Errorf("Deliver(again) wrote %s; want nothing", diff)
			}
			// Another tenant may receive the same id (ids are per hook).
			if _, err := e.s.Deliver(ctx, gh, e.b.ID, d, nil); err != nil {
				t.Errorf("Deliver(B, same id) = %v; want nil", err)
			}
			// Concurrent redeliveries: exactly one wins.
			d2 := Delivery{DeliveryID: "second", Event: "pull_request"}
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for i := range errs {
				wg.Add(1)
				go func() { defer wg.Done(); _, errs[i] = e.s.Deliver(ctx, gh, e.a.ID, d2, []NewRun{nr}) }()
			}
			wg.Wait()
			ok := wins(t, errs)
			if ok != 1 {
				t.Errorf("concurrent Deliver() succeeded %d times; want 1", ok)
			}
			if l, _ := e.s.List(ctx, e.a.ID, Filter{}); len(l) != 2 {
				t.Errorf("runs after deliveries = %d; want 2", len(l))
			}
		})
	}
}

func TestConcurrentNumbers(t *testing.T) {
	ctx := context.Background()
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			const n = 6
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = e.s.Create(ctx, admin, e.a.ID, NewRun{Version: e.v, Trigger: Trigger{Kind: TriggerManual}})
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil && !errors.Is(err, errdefs.ErrConflict) {
					t.Errorf("concurrent Create() = %v", err)
				}
			}
			l, _ := e.s.List(ctx, e.a.ID, Filter{})
			seen := map[int]bool{}
			for _, r := range l {
				if seen[r.Number] {
					t.Errorf("number %d given twice", r.Number)
				}
				seen[r.Number] = true
			}
		})
	}
}

func TestFinishAndInterrupted(t *testing.T) {
	ctx := context.Background()
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			r, err := e.s.Create(ctx, admin, e.a.ID, NewRun{Version: e.v, Trigger: Trigger{Kind: TriggerManual}})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.s.start(ctx, &r); err != nil || r.State != StateRunning {
				t.Fatalf("start() = %v, state %s; want running", err, r.State)
			}
			code := 0
			st := Step{RunID: r.ID, TenantID: r.TenantID, Index: 0, Name: "one", State: StepSucceeded, ExitCode: &code, DurationMS: 12,
				Output: "one\n"}
			if err := e.s.saveStep(ctx, &st); err != nil {
				t.Fatal(err)
			}
			if err := e.s.setSandbox(ctx, &r, "sb-1"); err != nil {
				t.Fatal(err)
			}
			got, err := e.s.Interrupted(ctx)
			if err != nil || len(got) != 1 || got[0].SandboxID != "sb-1" || got[0].State != StateFailed {
				t.Fatalf("Interrupted() = %+v, %v; want the run, failed, with its sandbox", got, err)
			}
			_, steps, _ := e.s.Get(ctx, e.a.ID, r.ID)
			if steps[0].State != StepSucceeded || *steps[0].ExitCode != 0 || steps[1].State != StepSkipped {
				t.Errorf("steps = %+v; want one succeeded, two skipped", steps)
			}
			arts := []Artifact{{Path: "a.txt", Size: 3}}
			if err := e.s.finish(ctx, &r, StateSucceeded, "", arts, 1.5); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("finish(ended) = %v; want ErrConflict", err)
			}
			if again, _ := e.s.Interrupted(ctx); len(again) != 0 {
				t.Errorf("Interrupted() again = %v; want none", again)
			}
		})
	}
}

func TestLog(t *testing.T) {
	l := NewLog(10, 2)
	fmt.Fprint(l, "hello ")
	past, cut, s := l.Subscribe()
	if string(past) != "hello " || cut != 0 {
		t.Errorf("Subscribe() past = %q, cut %d; want %q, 0", past, cut, "hello ")
	}
	fmt.Fprint(l, "world")
	if got := string(<-s.C); got != "world" {
		t.Errorf("<-C = %q; want world", got)
	}
	// Bounded: the oldest bytes go.
	past, cut, s2 := l.Subscribe()
	if string(past) != "ello world" || cut != 1 {
		t.Errorf("Subscribe() past = %q, cut %d; want %q, 1", past, cut, "ello world")
	}
	s2.Close()
	// A subscriber that does not read is dropped, not waited for.
	for i := 0; i < 5; i++ {
		fmt.Fprint(l, "x")
	}
	n := 0
	for range s.C {
		n++
	}
	if n != 2 || !s.Dropped() {
		t.Errorf("slow subscriber got %d chunks, dropped %v; want 2, true", n, s.Dropped())
	}
	_, _, s3 := l.Subscribe()
	l.Close()
	if _, open := <-s3.C; open || s3.Dropped() {
		t.Errorf("after Close: channel open %v, dropped %v; want closed, not dropped", open, s3.Dropped())
	}
	if _, _, s4 := l.Subscribe(); func() bool { _, open := <-s4.C; return open }() {
		t.Errorf("Subscribe() to an ended log gave an open channel")
	}
}

// TestDeliverDeduplicatesBodies: a body seen before (its digest) is the
// same delivery whatever its id, per tenant.
func TestDeliverDeduplicatesBodies(t *testing.T) {
	ctx := context.Background()
	gh := audit.Actor{Kind: audit.ActorSystem, ID: "github"}
	const digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			nr := NewRun{Version: e.v, Trigger: Trigger{Kind: "pull_request", Repository: "acme/app", SHA: "abc", PRNumber: 7}}
			if _, err := e.s.Deliver(ctx, gh, e.a.ID, Delivery{DeliveryID: "d-1", Event: "pull_request", BodySHA256: digest}, []NewRun{nr}); err != nil {
				t.Fatalf("Deliver(d-1) = %v; want nil", err)
			}
			before := dbtest.Count(t, e.db)
			if _, err := e.s.Deliver(ctx, gh, e.a.ID, Delivery{DeliveryID: "d-2", Event: "pull_request", BodySHA256: digest}, []NewRun{nr}); !errors.Is(err, ErrDuplicateDelivery) {
				t.Errorf("Deliver(d-2, same body) = %v; want ErrDuplicateDelivery", err)
			}
			if ok, diff := dbtest.Equal(before, dbtest.Count(t, e.db)); !ok {
				t.Errorf("Deliver(d-2, same body) wrote %s; want nothing", diff)
			}
			if _, err := e.s.Deliver(ctx, gh, e.b.ID, Delivery{DeliveryID: "d-2", Event: "pull_request", BodySHA256: digest}, nil); err != nil {
				t.Errorf("Deliver(B, same body) = %v; want nil (digests are per tenant)", err)
			}
			// Deliveries without a digest (recorded before there were
			// digests) do not collide with each other.
			for _, id := range []string{"old-1", "old-2"} {
				if _, err := e.s.Deliver(ctx, gh, e.a.ID, Delivery{DeliveryID: id, Event: "push"}, nil); err != nil {
					t.Errorf("Deliver(%s, no digest) = %v; want nil", id, err)
				}
			}
			// The same body under several new ids at once: one wins.
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = e.s.Deliver(ctx, gh, e.a.ID, Delivery{DeliveryID: fmt.Sprintf("race-%d", i), Event: "pull_request",
						BodySHA256: "ab" + digest[2:]}, []NewRun{nr})
				}()
			}
			wg.Wait()
			ok := wins(t, errs)
			if ok != 1 {
				t.Errorf("concurrent Deliver(same body) succeeded %d times; want 1", ok)
			}
			var stored string
			if err := e.db.Table("github_deliveries").Where("tenant_id = ? AND delivery_id = ?", e.a.ID, "d-1").Pluck("body_sha256", &stored).Error; err != nil || stored != digest {
				t.Errorf("Got(stored digest of d-1) = %q, %v; want %q", stored, err, digest)
			}
		})
	}
}

// TestTrustRecorded: a run keeps how far its trigger was trusted; a
// skipped one is recorded ended, its steps skipped, and is never queued.
func TestTrustRecorded(t *testing.T) {
	ctx := context.Background()
	gh := audit.Actor{Kind: audit.ActorSystem, ID: "github"}
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			tests := []struct {
				name      string
				trust     string
				reason    string
				wantTrust string
				wantState State
				wantStep  string
			}{
				{"unset is trusted", "", "", workflow.TrustTrusted, StateQueued, StepPending},
				{"untrusted", workflow.TrustUntrusted, "fork pull request from mallory/app (allow_forks)", workflow.TrustUntrusted, StateQueued, StepPending},
				{"skipped", workflow.TrustSkipped, "fork pull request from mallory/app (allow_forks not set)", workflow.TrustSkipped, StateSkipped, StepSkipped},
			}
			for i, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					nr := NewRun{Version: e.v, Trigger: Trigger{Kind: "pull_request", Repository: "acme/app", Trust: tt.trust, TrustReason: tt.reason}}
					rs, err := e.s.Deliver(ctx, gh, e.a.ID, Delivery{DeliveryID: fmt.Sprintf("trust-%d", i), Event: "pull_request"}, []NewRun{nr})
					if err != nil || len(rs) != 1 {
						t.Fatalf("Deliver() = %v, %v; want one run", rs, err)
					}
					r, steps, err := e.s.Get(ctx, e.a.ID, rs[0].ID)
					if err != nil {
						t.Fatal(err)
					}
					if r.Trust != tt.wantTrust || r.TrustReason != tt.reason || r.State != tt.wantState || rs[0].State != tt.wantState {
						t.Errorf("Got(run) = trust %q (%q), state %s; want %q (%q), %s", r.Trust, r.TrustReason, r.State, tt.wantTrust, tt.reason, tt.wantState)
					}
					if tt.wantState == StateSkipped && (r.EndedAt == nil || r.StartedAt != nil || r.StateReason != tt.reason) {
						t.Errorf("Got(skipped run) ended %v started %v reason %q; want ended, never started, saying why", r.EndedAt, r.StartedAt, r.StateReason)
					}
					for _, st := range steps {
						if st.State != tt.wantStep {
							t.Errorf("Got(step %q) = %s; want %s", st.Name, st.State, tt.wantStep)
						}
					}
				})
			}
			q, err := e.s.Queued(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range q {
				if r.State == StateSkipped || r.Trust == workflow.TrustSkipped {
					t.Errorf("Got(Queued()) holds skipped run %s; want it never queued", r.ID)
				}
			}
			if l, err := e.s.List(ctx, e.a.ID, Filter{State: StateSkipped}); err != nil || len(l) != 1 {
				t.Errorf("Got(List(state skipped)) = %d runs, %v; want 1", len(l), err)
			}
		})
	}
}

// wins counts the concurrent deliveries that were recorded; every other
// one must be ErrDuplicateDelivery.
func wins(t *testing.T, errs []error) int {
	t.Helper()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrDuplicateDelivery):
		default:
			t.Errorf("concurrent Deliver() = %v; want nil or ErrDuplicateDelivery", err)
		}
	}
	return ok
}
