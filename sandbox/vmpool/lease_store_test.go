package vmpool

import (
	"errors"
	"sync"
	"testing"

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
