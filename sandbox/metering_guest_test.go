package sandbox_test

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/usage"
)

// eachGuestDB runs fn on a guest environment over SQLite and, when
// STOCKADE_TEST_POSTGRES is set, PostgreSQL.
func eachGuestDB(t *testing.T, cfg sandbox.Config, fn func(t *testing.T, e *guestEnv)) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) { fn(t, newGuestEnv(t, d.DB, cfg)) })
	}
}

// scrapeCPU returns stockade_tenant_month_cpu_seconds of the tenant, and
// whether the scrape read everything.
func scrapeCPU(t *testing.T, us *usage.Store, slug string) (float64, bool) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(usage.NewCollector(us, usage.MetricsConfig{}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() = %v", err)
	}
	var cpu, up float64
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "stockade_usage_metrics_up":
				up = m.GetGauge().GetValue()
			case "stockade_tenant_month_cpu_seconds":
				if label(m, "tenant") == slug {
					cpu = m.GetGauge().GetValue()
				}
			}
		}
	}
	return cpu, up == 1
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestSamplerHoldsInflatedCounters: a guest reports every counter at its
// maximum through the real protocol, then one less.
// What reaches the ledger is at most vCPUs x elapsed per sandbox, and the
// tenant's totals, the operator's all-tenant view, both exports and the
// metrics scrape all still read. The old sampler put math.MaxInt64 in the
// ledger (and wrapped the unsigned ones negative): the sums overflowed.
func TestSamplerHoldsInflatedCounters(t *testing.T) {
	eachGuestDB(t, sandbox.Config{}, func(t *testing.T, e *guestEnv) {
		tn := e.tenant(t, "inflated")
		vm, g := e.vm(t, tn.ID)
		sb1, sb2 := e.sandbox(t, tn.ID, vm, g, 1), e.sandbox(t, tn.ID, vm, g, 1)
		start := e.clock.Now()
		for pass, cpu := range []time.Duration{math.MaxInt64, math.MaxInt64 - 1} {
			g.set(func(g *guest) {
				for _, id := range []string{sb1.ID, sb2.ID} {
					g.stats[id] = agentproto.SandboxStats{CPUUsage: cpu, MemoryCurrent: math.MaxUint64, MemoryPeak: math.MaxUint64,
						Pids: math.MaxUint64, IOReadBytes: math.MaxUint64 - uint64(pass), IOWriteBytes: math.MaxUint64 - uint64(pass)}
				}
			})
			e.clock.Advance(10 * time.Second)
			if err := e.svc.SamplePass(ctx); err != nil {
				t.Fatal(err)
			}
		}
		elapsed := e.clock.Now().Sub(start)
		us := usage.NewStore(e.db, e.clock.Now)
		for _, sb := range []sandbox.Sandbox{sb1, sb2} {
			es, err := us.Entries(ctx, tn.ID, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			var cpu, io, peak int64
			for _, en := range es {
				cpu += en.CPUNS
				io += en.IOReadBytes
				peak = max(peak, en.MemoryPeakBytes)
			}
			if want := elapsed.Nanoseconds(); cpu != want {
				t.Errorf("Got(ledger cpu_ns of %s) = %d; want %d (1 vCPU x %v)", sb.ID, cpu, want, elapsed)
			}
			if io < 0 || io > int64(usage.MaxIOBytesPerSecond*elapsed.Seconds()) {
				t.Errorf("Got(ledger io_read_bytes of %s) = %d; want 0..%d", sb.ID, io, int64(usage.MaxIOBytesPerSecond*elapsed.Seconds()))
			}
			if want := int64(sb.MemoryMiB) << 20; peak != want {
				t.Errorf("Got(ledger memory peak of %s) = %d; want the sandbox's memory %d", sb.ID, peak, want)
			}
		}
		month := usage.Range{From: usage.MonthStart(e.clock.Now()), To: usage.MonthStart(e.clock.Now()).AddDate(0, 1, 0)}
		want := 2 * elapsed.Seconds()
		tot, err := us.Totals(ctx, tn.ID, month)
		if err != nil || tot.CPUSeconds() != want {
			t.Errorf("Got(Totals()) = %v s, %v; want %v s", tot.CPUSeconds(), err, want)
		}
		all, err := us.AllTenants(ctx, month)
		if err != nil || len(all) != 1 || all[0].CPUSeconds() != want {
			t.Errorf("Got(AllTenants()) = %+v, %v; want the tenant with %v s", all, err, want)
		}
		for _, f := range []string{"csv", "json"} {
			if _, err := us.Export(ctx, &bytes.Buffer{}, usage.ExportQuery{Range: month, Format: f}); err != nil {
				t.Errorf("Got(Export(%s)) = %v; want nil", f, err)
			}
		}
		if got, up := scrapeCPU(t, us, tn.Slug); !up || got != want {
			t.Errorf("Got(metrics cpu seconds, up) = %v, %v; want %v, true", got, up, want)
		}
	})
}

// TestSamplerCrossChecksLibvirtCPU: a guest whose CPU counter never moves
// does not evade the CPU-hours quota: the sampler reads libvirt's CPU time
// of the VM beside each sample, and the quota counts the larger. The old
// sampler counted the guest's word only: 0.
func TestSamplerCrossChecksLibvirtCPU(t *testing.T) {
	eachGuestDB(t, sandbox.Config{}, func(t *testing.T, e *guestEnv) {
		tn := e.tenant(t, "constant")
		vm, g := e.vm(t, tn.ID)
		e.sandbox(t, tn.ID, vm, g, 1) // its counters stay at 0
		before, err := e.vms.CPUTime(ctx, tn.ID, vm.ID)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			e.clock.Advance(10 * time.Second)
			if err := e.svc.SamplePass(ctx); err != nil {
				t.Fatal(err)
			}
		}
		after, err := e.vms.CPUTime(ctx, tn.ID, vm.ID)
		if err != nil {
			t.Fatal(err)
		}
		us := usage.NewStore(e.db, e.clock.Now)
		got, err := us.CPUSecondsThisMonth(ctx, tn.ID)
		if err != nil {
			t.Fatal(err)
		}
		if limit := (after - before).Seconds(); got <= 0 || got > limit {
			t.Errorf("Got(CPUSecondsThisMonth) = %v; want > 0 and at most libvirt's %v over the passes", got, limit)
		}
	})
}

// TestSyncClampsStoppedAgo: a guest dates a sandbox's stop with
// StoppedAgo. Far in the past it is held to the last sample the host took;
// negative (the future) it is held to now. The old host billed a stop in
// the future up to then, an hour of ledger rows at a time.
func TestSyncClampsStoppedAgo(t *testing.T) {
	eachGuestDB(t, sandbox.Config{}, func(t *testing.T, e *guestEnv) {
		tn := e.tenant(t, "stoppedago")
		vm, g := e.vm(t, tn.ID)
		past, future := e.sandbox(t, tn.ID, vm, g, 1), e.sandbox(t, tn.ID, vm, g, 1)
		start := e.clock.Now()
		e.clock.Advance(10 * time.Second)
		if err := e.svc.SamplePass(ctx); err != nil {
			t.Fatal(err)
		}
		sampled := e.clock.Now()
		e.clock.Advance(10 * time.Second)
		for id, ago := range map[string]time.Duration{past.ID: 100 * 365 * 24 * time.Hour, future.ID: -1000 * time.Hour} {
			g.set(func(g *guest) {
				a := g.sandboxes[id]
				a.State, a.Reason, a.StoppedAgo = agentproto.SandboxStopped, "idle timeout", ago
				a.Final = &agentproto.SandboxStats{ID: id}
				g.sandboxes[id] = a
			})
		}
		if err := e.svc.SyncPass(ctx); err != nil {
			t.Fatal(err)
		}
		us := usage.NewStore(e.db, e.clock.Now)
		for _, tc := range []struct {
			sb   sandbox.Sandbox
			want time.Time
		}{{past, sampled}, {future, e.clock.Now()}} {
			m, err := us.Meter(ctx, tn.ID, tc.sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if m.ClosedAt == nil || !m.ClosedAt.Equal(tc.want) {
				t.Errorf("Got(meter of %s closed at) = %v; want %v", tc.sb.ID, m.ClosedAt, tc.want)
			}
			es, err := us.Entries(ctx, tn.ID, tc.sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			var wall int64
			for _, en := range es {
				wall += en.WallMS
			}
			if want := tc.want.Sub(start).Milliseconds(); wall != want {
				t.Errorf("Got(wall ms of %s) = %d over %d ledger rows; want %d", tc.sb.ID, wall, len(es), want)
			}
		}
	})
}
