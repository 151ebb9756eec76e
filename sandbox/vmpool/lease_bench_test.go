package vmpool_test

import (
	"context"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/benchrec"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// BenchmarkFailover: two replicas on one PostgreSQL database; the first
// boots a VM and dies without a word (its leases left to expire). Reported:
// the time from its death until the second owns the VM again with a live
// agent session (failover-s; target <= 15 s: a 10 s lease, a 2 s monitor
// pass, the handshake).
func BenchmarkFailover(b *testing.B) {
	dsn := dbtest.PostgresDSN(b)
	dataDir, _ := needVMs(b)
	db := dbtest.Postgres(b, dsn)
	tn, err := tenants.NewStore(db, nil).CreateTenant(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "bench"}, "failover-bench", "")
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		a := newReplica(b, db, dataDir, "a", 1)
		cleanupInstallation(b, a.svc.InstallationID())
		vm, err := a.svc.Create(ctx, vmpool.SystemActor(), tn.ID)
		if err != nil {
			b.Fatal(err)
		}
		other := newReplica(b, db, dataDir, "b", 1)
		waitFor(b, 5*time.Minute, "vm running on a", func() bool {
			_, err := a.svc.Agent(ctx, tn.ID, vm.ID)
			return err == nil
		})
		b.StartTimer()
		a.svc.Close()
		a.reg.Abandon()
		died := time.Now()
		waitFor(b, 2*time.Minute, "b adopts the vm", func() bool {
			_, err := other.svc.Agent(ctx, tn.ID, vm.ID)
			return err == nil
		})
		total += time.Since(died)
		b.StopTimer()
		if _, err := other.svc.Destroy(context.Background(), vmpool.SystemActor(), tn.ID, vm.ID); err != nil {
			b.Fatal(err)
		}
		other.svc.Close()
		other.reg.Close(context.Background())
	}
	benchrec.Record(b, benchrec.Result{Name: "failover_s", Value: total.Seconds() / float64(b.N), Unit: "s"})
}
