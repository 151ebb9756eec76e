package sandbox_test

import (
	"errors"
	"testing"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/policy"
)

// TestPolicyOnVMs: with the tenant policy wired in, a create above its
// limits is refused before anything is recorded, and one within them runs
// with the policy's defaults and pids limit and records the version it
// started under.
func TestPolicyOnVMs(t *testing.T) {
	e := need(t)
	actor := audit.Actor{Kind: audit.ActorSystem, ID: "test", Name: "policy test"}
	ps, err := policy.NewStore(e.db, nil)
	if err != nil {
		t.Fatal(err)
	}
	doc := policy.Defaults()
	doc.Resources.MaxMemoryMiB, doc.Resources.DefaultMemoryMiB, doc.Resources.MaxPids = 256, 48, 64
	doc.Lifetime.MaxTimeoutSeconds, doc.Lifetime.DefaultTimeoutSeconds = 900, 600
	v, err := ps.Save(ctx, actor, e.a.ID, policy.Edit{Doc: doc, Reason: "policy on VMs test"})
	if err != nil {
		t.Fatal(err)
	}
	// A second service on the same database and pools, with policies:
	// the shared one (without) keeps syncing every sandbox.
	svc := sandbox.New(e.db, e.pools(), sandbox.Config{DataDir: e.dataDir, Logger: e.log, DefaultTemplate: "busybox", Policies: ps})
	defer svc.Close()

	var before int64
	e.db.Model(&sandbox.Sandbox{}).Where("tenant_id = ?", e.a.ID).Count(&before)
	for _, tc := range []struct {
		spec  sandbox.Spec
		field string
	}{
		{sandbox.Spec{MemoryMiB: 300}, "memory_mib"},
		{sandbox.Spec{TimeoutSeconds: 901}, "timeout_seconds"},
	} {
		_, err := svc.Create(ctx, actor, e.a.ID, tc.spec)
		var fe *errdefs.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || fe.Rule != "policy" {
			t.Errorf("Got(Create(%+v)) = %v; want a policy error on %s", tc.spec, err, tc.field)
		}
	}
	var after int64
	e.db.Model(&sandbox.Sandbox{}).Where("tenant_id = ?", e.a.ID).Count(&after)
	if after != before {
		t.Errorf("Got(sandbox rows after refused creates) = %d; want %d (nothing recorded)", after, before)
	}

	sb, err := svc.Create(ctx, actor, e.a.ID, sandbox.Spec{})
	if err != nil {
		t.Fatalf("Create(within the policy) = %v", err)
	}
	defer func() {
		if _, err := svc.Destroy(ctx, actor, e.a.ID, sb.ID); err != nil {
			t.Errorf("destroy: %v", err)
		}
	}()
	if sb.PolicyVersion != v.Version || sb.MemoryMiB != 48 || sb.TimeoutSeconds != 600 {
		t.Errorf("Got(sandbox) = policy v%d, %d MiB, %d s; want v%d, the policy's 48 MiB and 600 s", sb.PolicyVersion, sb.MemoryMiB, sb.TimeoutSeconds, v.Version)
	}
	st, err := svc.Get(ctx, e.a.ID, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Stats == nil || st.Stats.PidsMax != 64 {
		t.Errorf("Got(stats) = %+v; want pids.max 64 from the policy", st.Stats)
	}
	if evs := e.events(t, e.a.ID, audit.TypeSandboxCreated, sb.ID); len(evs) != 1 || evs[0].Details["policy_version"] != float64(v.Version) {
		t.Errorf("Got(sandbox.created details) = %+v; want policy_version %d", evs, v.Version)
	}
}
