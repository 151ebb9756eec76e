package sandbox

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// TestQuotaAcrossReplicas: two replicas (two stores, each on its own
// connection pool to one PostgreSQL database) racing 50 sandbox creates for
// a tenant at its quota never exceed it: the check and the insert are one
// transaction holding the tenant's row lock.
func TestQuotaAcrossReplicas(t *testing.T) {
	dsn := dbtest.PostgresDSN(t)
	db := dbtest.Postgres(t, dsn)
	stores := []*Store{NewStore(db, nil), NewStore(dbtest.Reopen(t, db), nil)}
	ctx := context.Background()
	tn := newTenant(t, db, "quota-replicas")
	q := tenants.DefaultQuota()
	q.MaxSandboxes, q.MaxVCPUs, q.MaxMemoryMiB = 5, 64, 64000
	if _, err := tenants.NewStore(db, nil).SetQuota(ctx, testActor, tn.ID, q); err != nil {
		t.Fatal(err)
	}
	ok := createdOrMaxSandboxes(t, raceCreates(ctx, stores, tn.ID, 50))
	if n := count(t, db, "sandboxes", tn.ID); ok != 5 || n != 5 {
		t.Errorf("Got(created by two replicas) = %d, rows %d; want 5, 5 (the quota)", ok, n)
	}
}

// raceCreates makes tries sandboxes of 1 vCPU and 100 MiB at once, taking
// turns among stores, and returns each one's error.
func raceCreates(ctx context.Context, stores []*Store, tenantID string, tries int) []error {
	var wg sync.WaitGroup
	errs := make([]error, tries)
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = stores[i%len(stores)].create(ctx, testActor, newRecord(tenantID, i, 1, 100))
		}()
	}
	wg.Wait()
	return errs
}

// createdOrMaxSandboxes counts the creates that succeeded, failing the test
// for any error but the max_sandboxes quota.
func createdOrMaxSandboxes(t *testing.T, errs []error) int {
	t.Helper()
	ok := 0
	for _, err := range errs {
		var qe *errdefs.QuotaError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &qe) && qe.Quota == tenants.QuotaMaxSandboxes:
		default:
			t.Errorf("Got(create) = %v; want success or the max_sandboxes quota", err)
		}
	}
	return ok
}
