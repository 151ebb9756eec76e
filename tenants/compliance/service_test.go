package compliance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/policy"
)

var admin = audit.Actor{Kind: audit.ActorUser, ID: "u1", Name: "Ada Admin"}

type env struct {
	db       *gorm.DB
	pol      *policy.Store
	store    *tenants.Store
	svc      *Service
	clock    *clockwork.FakeClock
	tenantA  string
	tenantB  string
	platform Platform
}

func eachDB(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			c := clockwork.NewFakeClockAt(time.Now().UTC().Truncate(time.Second))
			e := &env{db: d.DB, clock: c, store: tenants.NewStore(d.DB, c.Now)}
			var err error
			if e.pol, err = policy.NewStore(d.DB, c.Now); err != nil {
				t.Fatal(err)
			}
			for i, slug := range []string{"comp-a", "comp-b"} {
				ten, err := e.store.CreateTenant(ctx, admin, slug, slug)
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					e.tenantA = ten.ID
				} else {
					e.tenantB = ten.ID
				}
			}
			e.platform = Platform{Gateway: true, SecretsEncrypted: true, OperatorContacts: []string{"ops@example.test"}}
			if e.svc, err = New(d.DB, Config{Policies: e.pol, Tenants: e.store, Platform: e.platform, Clock: c,
				Interval: 50 * time.Millisecond, ProbeInterval: -1}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.svc.Close() })
			fn(t, e)
		})
	}
}

func statusOf(items []Item, id string) Status { return itemOf(items, id).Status }

func TestItemsEvaluateOnceAndKeepSince(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		items, err := e.svc.Items(ctx, e.tenantA)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != len(ItemIDs()) {
			t.Fatalf("Got(len(Items)) = %d; want %d", len(items), len(ItemIDs()))
		}
		// No probe has run and this server has no sandboxes: probe-backed
		// items warn, and say why.
		if got := statusOf(items, ItemSSHKeys); got != StatusWarn {
			t.Errorf("Got(ssh_keys) = %s; want warn before any probe run", got)
		}
		first := itemOf(items, ItemEgressRestricted)
		hist, err := e.svc.History(ctx, e.tenantA, 0)
		if err != nil || len(hist) != len(ItemIDs()) {
			t.Fatalf("Got(History) = %d changes, %v; want one first evaluation per item", len(hist), err)
		}
		e.clock.Advance(time.Minute)
		again, err := e.svc.Evaluate(ctx, e.tenantA)
		if err != nil {
			t.Fatal(err)
		}
		if it := itemOf(again, ItemEgressRestricted); !it.Since.Equal(first.Since) || !it.CheckedAt.After(first.CheckedAt) {
			t.Errorf("Got(re-evaluated egress) since %v checked %v; want since kept %v, checked later than %v", it.Since, it.CheckedAt, first.Since, first.CheckedAt)
		}
		if hist, _ := e.svc.History(ctx, e.tenantA, 0); len(hist) != len(ItemIDs()) {
			t.Errorf("Got(History after an unchanged evaluation) = %d changes; want %d", len(hist), len(ItemIDs()))
		}
		stored, err := e.svc.Items(ctx, e.tenantA)
		if err != nil || len(stored) != len(ItemIDs()) || stored[0].ID != ItemHostIsolation {
			t.Fatalf("Got(Items) = %v, %v; want every item in checklist order", stored, err)
		}
		if other, _ := e.svc.History(ctx, e.tenantB, 0); len(other) != 0 {
			t.Errorf("Got(History of tenant B) = %v; want none: B was never evaluated", other)
		}
	})
}

func TestPolicyChangeTurnsItemsWithinACycle(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		before, err := e.svc.Evaluate(ctx, e.tenantA)
		if err != nil {
			t.Fatal(err)
		}
		if statusOf(before, ItemEgressRestricted) != StatusWarn || statusOf(before, ItemTimeLimits) != StatusWarn {
			// warn: no probe run yet; the policy part passes.
			t.Fatalf("Got(egress, time) = %s, %s; want warn (no probe yet)", statusOf(before, ItemEgressRestricted), statusOf(before, ItemTimeLimits))
		}
		if err := e.svc.Start(ctx); err != nil {
			t.Fatal(err)
		}
		doc := policy.Defaults()
		doc.Network.Egress.Default = policy.EgressAllow
		doc.Lifetime.MaxTimeoutSeconds, doc.Lifetime.DefaultTimeoutSeconds = 604800, 604800
		e.clock.Advance(time.Minute)
		if _, err := e.pol.Save(ctx, admin, e.tenantA, policy.Edit{Doc: doc, Reason: "open it up"}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			items, err := e.svc.Items(ctx, e.tenantA)
			if err != nil {
				t.Fatal(err)
			}
			if statusOf(items, ItemEgressRestricted) == StatusFail {
				it := itemOf(items, ItemEgressRestricted)
				if !it.Since.After(itemOf(before, ItemEgressRestricted).Since) || it.Evidence[0].Link != "/policy/versions/1" {
					t.Errorf("Got(egress) since %v evidence %+v; want a new since and a link to version 1", it.Since, it.Evidence[0])
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Got(egress_restricted) = %s 5 s after the policy change; want fail within one cycle", statusOf(items, ItemEgressRestricted))
			}
			e.clock.Advance(50 * time.Millisecond) // the loop's ticker: one cycle
			time.Sleep(20 * time.Millisecond)
		}
		hist, err := e.svc.History(ctx, e.tenantA, 5)
		if err != nil || len(hist) == 0 || hist[0].ItemID != ItemEgressRestricted || hist[0].From != StatusWarn || hist[0].To != StatusFail {
			t.Fatalf("Got(History[0]) = %+v, %v; want egress_restricted warn -> fail", hist, err)
		}
		evs, err := audit.NewLog(e.db, nil).List(ctx, e.tenantA, audit.Filter{Type: audit.TypeComplianceStatusChanged})
		if err != nil || len(evs) != 1 || evs[0].TargetID != ItemEgressRestricted || evs[0].Details["to"] != "fail" {
			t.Errorf("Got(status_changed events) = %+v, %v; want one for egress_restricted to fail", evs, err)
		}
	})
}

func TestProbeRunsAreTenantScoped(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		if _, err := e.svc.RunProbe(ctx, admin, e.tenantA); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Got(RunProbe without sandboxes) = %v; want ErrUnavailable", err)
		}
		end := e.clock.Now()
		row := runRow{ID: "0190aaaa-0000-7000-8000-000000000001", TenantID: e.tenantA, SandboxID: "sb-1", State: RunCompleted,
			StartedAt: end.Add(-time.Minute), EndedAt: &end, Checks: `[{"id":"ssh_keys","name":"x","outcome":"blocked","detail":"none"}]`, Output: "PROBE ssh_keys blocked none\n"}
		if err := e.db.Create(&row).Error; err != nil {
			t.Fatal(err)
		}
		got, err := e.svc.ProbeRun(ctx, e.tenantA, row.ID)
		if err != nil || got.SandboxID != "sb-1" || len(got.Checks) != 1 || got.Checks[0].Outcome != OutcomeBlocked || got.EndedAt == nil {
			t.Errorf("Got(ProbeRun) = %+v, %v; want the stored run", got, err)
		}
		if _, err := e.svc.ProbeRun(ctx, e.tenantB, row.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(ProbeRun of another tenant) = %v; want ErrNotFound", err)
		}
		if runs, err := e.svc.ProbeRuns(ctx, e.tenantB, 0); err != nil || len(runs) != 0 {
			t.Errorf("Got(ProbeRuns of tenant B) = %v, %v; want none", runs, err)
		}
		if runs, err := e.svc.ProbeRuns(ctx, e.tenantA, 0); err != nil || len(runs) != 1 {
			t.Errorf("Got(ProbeRuns of tenant A) = %v, %v; want the one", runs, err)
		}
		items, err := e.svc.Evaluate(ctx, e.tenantA)
		if err != nil {
			t.Fatal(err)
		}
		// The run reports only ssh_keys: that item rests on it, others
		// warn that their checks were not reported.
		if it := itemOf(items, ItemSSHKeys); it.Status != StatusPass || it.Evidence[len(it.Evidence)-1].Link != "/compliance/probes/"+row.ID {
			t.Errorf("Got(ssh_keys) = %+v; want pass backed by the run", it)
		}
		if got := statusOf(items, ItemResourceLimits); got != StatusWarn {
			t.Errorf("Got(resource_limits) = %s; want warn: the run did not report memory or cpu", got)
		}
	})
}

func TestInterruptedRunsFail(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		now := e.clock.Now()
		old := runRow{ID: "0190aaaa-0000-7000-8000-0000000000a1", TenantID: e.tenantA, State: RunRunning, StartedAt: now.Add(-2 * time.Hour),
			Checks: "[]", Output: "# started\n"}
		recent := runRow{ID: "0190aaaa-0000-7000-8000-0000000000a2", TenantID: e.tenantA, State: RunRunning, StartedAt: now.Add(-time.Minute), Checks: "[]"}
		for _, r := range []runRow{old, recent} {
			if err := e.db.Create(&r).Error; err != nil {
				t.Fatal(err)
			}
		}
		if err := e.svc.failInterrupted(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := e.svc.ProbeRun(ctx, e.tenantA, old.ID)
		if err != nil || got.State != RunFailed || got.EndedAt == nil || got.Output != "# started\n\nprobe failed: interrupted: the server running it stopped\n" {
			t.Errorf("Got(old running run) = %+v, %v; want failed as interrupted", got, err)
		}
		if got, err := e.svc.ProbeRun(ctx, e.tenantA, recent.ID); err != nil || got.State != RunRunning {
			t.Errorf("Got(recent running run) = %+v, %v; want still running", got, err)
		}
	})
}
