package vmpool

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/replicas"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// TestVMQuotaAcrossReplicas: two replicas (two stores, each on its own
// connection pool to one PostgreSQL database) racing 50 VM creates for a
// tenant at its quota never exceed it: the quota check and the insert are
// one transaction holding the tenant's row lock.
func TestVMQuotaAcrossReplicas(t *testing.T) {
	db := dbtest.Postgres(t, dbtest.PostgresDSN(t))
	stores := []*Store{NewStore(db, nil), NewStore(dbtest.Reopen(t, db), nil)}
	if err := stores[0].upsertHost(bg, Host{URI: "test:///host", Health: HealthOK, CPUs: 4}); err != nil {
		t.Fatal(err)
	}
	ts := tenants.NewStore(db, nil)
	tn, err := ts.CreateTenant(bg, admin, "vm-quota-replicas", "")
	if err != nil {
		t.Fatal(err)
	}
	q := tenants.DefaultQuota()
	q.MaxVMs, q.MaxVCPUs, q.MaxMemoryMiB = 4, 64, 64000
	if _, err := ts.SetQuota(bg, admin, tn.ID, q); err != nil {
		t.Fatal(err)
	}
	if _, err := stores[0].SetPool(bg, admin, tn.ID, PoolSettings{VCPUs: 1, MemoryMiB: 256, MaxVMs: 4}); err != nil {
		t.Fatal(err)
	}
	const tries = 50
	var wg sync.WaitGroup
	errs := make([]error, tries)
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = stores[i%2].CreateVM(bg, admin, tn.ID, NewVM{HostURI: "test:///host"})
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, errdefs.ErrQuota):
			t.Errorf("Got(CreateVM) = %v; want nil or ErrQuota", err)
		}
	}
	active, err := stores[1].activeOf(bg, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ok != 4 || len(active) != 4 {
		t.Errorf("Got(created by two replicas, active) = %d, %d; want 4, 4 (the quota)", ok, len(active))
	}
}

// TestAcquireOnlyOwnedVMs: with replicas, a replica hands out only idle
// VMs whose channel it owns; another replica's idle VM is not its to give.
func TestAcquireOnlyOwnedVMs(t *testing.T) {
	eachDB(t, func(t *testing.T, e *storeEnv) {
		tn := e.tenant(t, "acquire-owned")
		regs := make([]*replicas.Registry, 2)
		stores := make([]*Store, 2)
		for i := range regs {
			r, err := replicas.New(e.db, replicas.Config{InternalURL: "http://r.internal:1", Key: make([]byte, 32)})
			if err != nil {
				t.Fatal(err)
			}
			regs[i] = r
			stores[i] = NewStore(e.db, time.Now)
			stores[i].leases = r
		}
		vm, err := stores[0].CreateVM(bg, admin, tn, NewVM{HostURI: "test:///host"})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := stores[0].markRunning(bg, vm.ID, ready{AgentVersion: "a", KernelVersion: "k", DomainUUID: "u"}); err != nil || !ok {
			t.Fatalf("markRunning = %v, %v", ok, err)
		}
		if got, err := stores[1].acquire(bg, tn); !errors.Is(err, ErrNoIdleVM) {
			t.Errorf("Got(acquire by the other replica) = %s, %v; want ErrNoIdleVM", got.ID, err)
		}
		if got, err := stores[0].acquire(bg, tn); err != nil || got.ID != vm.ID {
			t.Errorf("Got(acquire by the owner) = %s, %v; want %s", got.ID, err, vm.ID)
		}
	})
}
