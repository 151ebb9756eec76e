package vmpool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox/replicas"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// replica is one control-plane replica in-process: its VM pool and its
// registration (the two-process harness is cmd/stockade's).
type replica struct {
	svc *vmpool.Service
	reg *replicas.Registry
}

// newReplica starts a replica's registry and VM pool on db.
func newReplica(tb testing.TB, db *gorm.DB, dataDir, name string, bootConcurrency int) replica {
	tb.Helper()
	reg, err := replicas.New(db, replicas.Config{InternalURL: "http://" + name + ".internal:1", Key: make([]byte, 32),
		Logger: testLogger(tb).With("replica", name)})
	if err != nil {
		tb.Fatal(err)
	}
	if err := reg.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { reg.Close(context.Background()) })
	svc := startService(tb, db, vmpool.Config{URIs: []string{systemURI}, DataDir: dataDir, Logger: testLogger(tb).With("replica", name),
		ConnectTimeout: 30 * time.Second, BootConcurrency: bootConcurrency, Leases: reg})
	return replica{svc: svc, reg: reg}
}

// waitFor polls cond every 100 ms until it holds, failing after timeout
// (generous: a bound on a hang, not a speed check).
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("still waiting after %v: %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestReplicasNeverTouchEachOthersVMs is issue 19's bug: two replicas on
// one PostgreSQL database and one libvirtd. The second one's reconcile used
// to take every active VM row for its own: it failed the first one's queued
// boots ("boot interrupted before its domain was defined") and tried to
// adopt its running VMs. With channel leases the second leaves the first's
// VMs alone (no channel opened, nothing ended); when the first dies without
// a word, its leases expire and the second adopts its VMs without rebooting
// them (the same guest, a new agent session).
func TestReplicasNeverTouchEachOthersVMs(t *testing.T) {
	dsn := dbtest.PostgresDSN(t)
	dataDir, _ := needVMs(t)
	db := dbtest.Postgres(t, dsn)
	ts := tenants.NewStore(db, nil)
	tn, err := ts.CreateTenant(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, "replicas", "")
	if err != nil {
		t.Fatal(err)
	}
	// One boot at a time on a: its second VM waits queued, with no domain
	// yet, while the first boots.
	a := newReplica(t, db, dataDir, "a", 1)
	cleanupInstallation(t, a.svc.InstallationID())
	var ids []string
	for i := 0; i < 2; i++ {
		vm, err := a.svc.Create(ctx, vmpool.SystemActor(), tn.ID)
		if err != nil {
			t.Fatalf("Create = %v", err)
		}
		ids = append(ids, vm.ID)
	}
	b := newReplica(t, db, dataDir, "b", 2) // its Start reconciles the host at once
	defer func() {
		for _, id := range ids {
			b.svc.Destroy(context.Background(), vmpool.SystemActor(), tn.ID, id)
			a.svc.Destroy(context.Background(), vmpool.SystemActor(), tn.ID, id)
		}
	}()

	for _, id := range ids {
		waitVMRunning(t, a.svc, tn.ID, id, 5*time.Minute)
	}
	hellos := map[string]int{}
	uptimes := map[string]time.Duration{}
	for _, id := range ids {
		owner, err := b.reg.OwnerOf(ctx, id)
		if err != nil || owner.ID != a.reg.Self().ID {
			t.Errorf("Got(OwnerOf(%s)) = %s, %v; want replica a, which booted it", id, owner.ID, err)
		}
		c, err := a.svc.Agent(ctx, tn.ID, id)
		if err != nil {
			t.Fatalf("Got(a.Agent(%s)) = %v; want its session", id, err)
		}
		hellos[id], uptimes[id] = c.Hello().SessionNumber, c.Hello().Uptime
		if _, err := b.svc.Agent(ctx, tn.ID, id); !errors.Is(err, vmpool.ErrUnavailable) {
			t.Errorf("Got(b.Agent(%s)) = %v; want ErrUnavailable: b never opens a's channel", id, err)
		}
	}

	// a dies: no clean shutdown, its leases are left to expire.
	a.svc.Close() // its agent sessions close; the VMs run on
	a.reg.Abandon()
	for _, id := range ids {
		waitFor(t, 2*time.Minute, "b adopts "+id, func() bool {
			c, err := b.svc.Agent(ctx, tn.ID, id)
			return err == nil && c.Hello().SessionNumber > hellos[id]
		})
		c, _ := b.svc.Agent(ctx, tn.ID, id)
		if got := c.Hello().Uptime; got < uptimes[id] {
			t.Errorf("Got(guest uptime after failover) = %v < %v before; want the same guest, not rebooted", got, uptimes[id])
		}
		vm, err := b.svc.VM(ctx, tn.ID, id)
		if err != nil || vm.State != vmpool.StateRunning {
			t.Errorf("Got(VM %s after failover) = %s (%s), %v; want running", id, vm.State, vm.StateReason, err)
		}
		if owner, err := b.reg.OwnerOf(ctx, id); err != nil || owner.ID != b.reg.Self().ID || b.reg.Epoch(id) != 2 {
			t.Errorf("Got(OwnerOf(%s) after failover) = %s epoch %d, %v; want b at epoch 2", id, owner.ID, b.reg.Epoch(id), err)
		}
	}
	if st := b.reg.Stats(); st.Failovers != int64(len(ids)) {
		t.Errorf("Got(b's failovers) = %d; want %d", st.Failovers, len(ids))
	}
	for _, id := range ids {
		if _, err := b.svc.Destroy(ctx, vmpool.SystemActor(), tn.ID, id); err != nil {
			t.Errorf("Destroy(%s) = %v", id, err)
		}
	}
	if ls, err := b.reg.Leases(ctx); err != nil || len(ls) != 0 {
		t.Errorf("Got(leases after the VMs ended) = %+v, %v; want none", ls, err)
	}
}

// waitVMRunning polls svc's store until the VM runs, failing at once if it
// ended.
func waitVMRunning(t *testing.T, svc *vmpool.Service, tenantID, id string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		vm, err := svc.Store().VM(ctx, tenantID, id)
		if err != nil {
			t.Fatalf("VM(%s) = %v", id, err)
		}
		if vm.State == vmpool.StateRunning {
			return
		}
		if !vm.State.Active() {
			t.Fatalf("VM %s ended %s (%s); want running: the other replica must never end a VM it does not own", id, vm.State, vm.StateReason)
		}
		if time.Now().After(deadline) {
			t.Fatalf("VM %s still %s/%s after %v; want running", id, vm.State, vm.Phase, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
