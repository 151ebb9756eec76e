package vmpool_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// TestCreateRefusedWhileFrozen: a frozen tenant gets no VM, with an error
// naming the freeze and nothing written; unfrozen, the create goes on to
// its next check (here: no host, since this pool never started).
func TestCreateRefusedWhileFrozen(t *testing.T) {
	db := freshDB(t)
	store := tenants.NewStore(db, nil)
	op := audit.Actor{Kind: audit.ActorUser, ID: "op", Name: "op@platform.test"}
	tn, err := store.CreateTenant(ctx, op, "frozen-pool", "")
	if err != nil {
		t.Fatal(err)
	}
	bogus := "qemu+unix:///system?socket=" + t.TempDir() + "/no-libvirt-sock"
	svc, err := vmpool.New(ctx, db, vmpool.Config{URIs: []string{bogus}, DataDir: t.TempDir(), Freezes: store,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.FreezeTenant(ctx, op, tn.ID, "agent exfiltrating"); err != nil {
		t.Fatalf("FreezeTenant = %v", err)
	}
	before := counts(t, db)
	_, err = svc.Create(ctx, vmpool.SystemActor(), tn.ID)
	var fe *tenants.FrozenError
	if !errors.As(err, &fe) || !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "frozen") ||
		!strings.Contains(err.Error(), "agent exfiltrating") {
		t.Fatalf("Got(Create while frozen) = %v; want a FrozenError (conflict) naming the freeze and its reason", err)
	}
	sameCounts(t, db, before, "Create while frozen")

	if err := store.UnfreezeTenant(ctx, op, tn.ID); err != nil {
		t.Fatalf("UnfreezeTenant = %v", err)
	}
	if _, err := svc.Create(ctx, vmpool.SystemActor(), tn.ID); !errors.Is(err, vmpool.ErrUnavailable) || errors.As(err, &fe) {
		t.Errorf("Got(Create after unfreeze) = %v; want ErrUnavailable (no host), no longer the freeze", err)
	}
}
