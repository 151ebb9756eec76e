package sandbox_test

import (
	"errors"
	"io"
	"testing"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// TestFreezeDestroysSandboxes (real VMs): freezing a tenant and destroying
// its sandboxes ends every live one in the guest, recorded destroyed with
// reason "frozen" and audited as the operator's, while their records and
// command history stay; a create is refused while frozen, naming the
// freeze, and works again once unfrozen.
func TestFreezeDestroysSandboxes(t *testing.T) {
	e := need(t)
	store := tenants.NewStore(e.db, nil)
	op := audit.Actor{Kind: audit.ActorUser, ID: "op", Name: "op@platform.test"}
	dev := audit.Actor{Kind: audit.ActorSystem, ID: "test", Name: "freeze test"}
	// A second service on the same database and pools, with freezes: the
	// shared one (without) keeps syncing every sandbox.
	svc := sandbox.New(e.db, e.pools(), sandbox.Config{DataDir: e.dataDir, Logger: e.log, DefaultTemplate: "busybox", Freezes: store})
	defer svc.Close()

	var live []sandbox.Sandbox
	for range 2 {
		sb, err := svc.Create(ctx, dev, e.a.ID, sandbox.Spec{MemoryMiB: 48})
		if err != nil {
			t.Fatalf("Create = %v", err)
		}
		live = append(live, sb)
	}
	if _, err := svc.Exec(ctx, dev, e.a.ID, live[0].ID, sandbox.ExecRequest{Cmd: []string{"echo", "before the freeze"}}, io.Discard, io.Discard); err != nil {
		t.Fatalf("Exec = %v", err)
	}

	if _, err := store.FreezeTenant(ctx, op, e.a.ID, "freeze test"); err != nil {
		t.Fatalf("FreezeTenant = %v", err)
	}
	defer func() {
		if err := store.UnfreezeTenant(ctx, op, e.a.ID); err != nil && !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("UnfreezeTenant = %v", err)
		}
	}()
	n, err := svc.DestroyTenant(ctx, op, e.a.ID, sandbox.ReasonFrozen)
	if err != nil || n < len(live) {
		t.Fatalf("Got(DestroyTenant) = %d, %v; want at least %d destroyed", n, err, len(live))
	}
	inGuest := e.guestSandboxes(t)
	for _, sb := range live {
		got, err := svc.Get(ctx, e.a.ID, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != sandbox.StateDestroyed || got.StateReason != sandbox.ReasonFrozen {
			t.Errorf("Got(sandbox %s) = %s (%s); want destroyed (frozen)", sb.ID, got.State, got.StateReason)
		}
		if _, ok := inGuest[sb.ID]; ok {
			t.Errorf("Got(sandbox %s in its guest) = present; want it gone", sb.ID)
		}
		evs := e.events(t, e.a.ID, audit.TypeSandboxDestroyed, sb.ID)
		if len(evs) != 1 || evs[0].ActorName != op.Name {
			t.Errorf("Got(sandbox.destroyed of %s) = %+v; want one, by the operator", sb.ID, evs)
		}
	}
	if execs, err := svc.Execs(ctx, e.a.ID, live[0].ID); err != nil || len(execs) != 1 {
		t.Errorf("Got(command records after the freeze) = %d, %v; want the command kept", len(execs), err)
	}

	var before int64
	e.db.Model(&sandbox.Sandbox{}).Where("tenant_id = ?", e.a.ID).Count(&before)
	_, err = svc.Create(ctx, dev, e.a.ID, sandbox.Spec{MemoryMiB: 48})
	var fe *tenants.FrozenError
	if !errors.As(err, &fe) || !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Got(Create while frozen) = %v; want a FrozenError", err)
	}
	var after int64
	e.db.Model(&sandbox.Sandbox{}).Where("tenant_id = ?", e.a.ID).Count(&after)
	if after != before {
		t.Errorf("Got(sandbox rows after a refused create) = %d; want %d", after, before)
	}

	if err := store.UnfreezeTenant(ctx, op, e.a.ID); err != nil {
		t.Fatalf("UnfreezeTenant = %v", err)
	}
	sb, err := svc.Create(ctx, dev, e.a.ID, sandbox.Spec{MemoryMiB: 48})
	if err != nil {
		t.Fatalf("Got(Create after unfreeze) = %v; want it to run", err)
	}
	if _, err := svc.Destroy(ctx, dev, e.a.ID, sb.ID); err != nil {
		t.Errorf("destroy: %v", err)
	}
}
