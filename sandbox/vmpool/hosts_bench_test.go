package vmpool

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/benchrec"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// BenchmarkPlacement: placement throughput (CreateVM with the host picked
// in its transaction, host rows locked) with 2 hosts, against 1 host, on
// PostgreSQL when configured (else SQLite): 8 tenants creating at once, 200
// VMs in all. placements/s for each; 2-hosts-ratio is 2 hosts' throughput
// over 1 host's (>= 1: the second host costs nothing; the row locks
// serialise placements either way).
func BenchmarkPlacement(b *testing.B) {
	run := func(hosts int) float64 {
		db := dbtest.SQLite(b)
		if dsn := os.Getenv(dbtest.EnvPostgres); dsn != "" {
			db = dbtest.Postgres(b, dsn)
		}
		e := &storeEnv{db: db, now: time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)}
		e.store, e.tenants, e.log = NewStore(db, e.clock), tenants.NewStore(db, e.clock), audit.NewLog(db, e.clock)
		var live []string
		for i := 0; i < hosts; i++ {
			uri := fmt.Sprintf("qemu+tcp://127.0.0.1:%d/system", i+1)
			if _, err := e.store.AddHost(bg, admin, Host{URI: uri, CPUs: 64, MemoryKiB: 1 << 40}); err != nil {
				b.Fatal(err)
			}
			live = append(live, uri)
		}
		const tenantsN, perTenant = 8, 25
		var tns []string
		for i := 0; i < tenantsN; i++ {
			tn, err := e.tenants.CreateTenant(bg, admin, fmt.Sprintf("bench-%d", i), "")
			if err != nil {
				b.Fatal(err)
			}
			t := tn.ID
			q := tenants.DefaultQuota()
			q.MaxVMs, q.MaxVCPUs, q.MaxMemoryMiB = 100, 100, 1<<20
			if _, err := e.tenants.SetQuota(bg, admin, t, q); err != nil {
				b.Fatal(err)
			}
			if _, err := e.store.SetPool(bg, admin, t, PoolSettings{VCPUs: 1, MemoryMiB: 256, MaxVMs: 100}); err != nil {
				b.Fatal(err)
			}
			tns = append(tns, t)
		}
		start := time.Now()
		var wg sync.WaitGroup
		for _, t := range tns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < perTenant; j++ {
					if _, err := e.store.CreateVM(bg, admin, t, NewVM{Live: live}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return float64(tenantsN*perTenant) / time.Since(start).Seconds()
	}
	for i := 0; i < b.N; i++ {
		one := run(1)
		two := run(2)
		b.ReportMetric(one, "1-host-placements/s")
		b.ReportMetric(two, "2-hosts-placements/s")
		benchrec.Record(b, benchrec.Result{Name: "placement_2_hosts_vs_1", Value: two, Unit: "placements/s", Baseline: one})
	}
}
