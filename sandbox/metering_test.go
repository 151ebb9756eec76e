package sandbox_test

import (
	"bytes"
	"encoding/csv"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/usage"
)

// burn keeps one CPU busy for about n seconds (busybox sh).
func burn(n int) []string {
	return []string{"sh", "-c", "end=$(( $(date +%s) + " + strconv.Itoa(n) + " )); while [ $(date +%s) -lt $end ]; do :; done"}
}

// metricValue finds one series in a Prometheus text exposition.
func metricValue(text, series string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// ledgerOf sums the ledger rows of one sandbox.
func ledgerOf(tb testing.TB, e *testEnv, tenantID, id string) usage.Sums {
	tb.Helper()
	es, err := usage.NewStore(e.db, nil).Entries(ctx, tenantID, id)
	if err != nil {
		tb.Fatal(err)
	}
	var s usage.Sums
	for _, x := range es {
		s.AllocVCPUMS += x.AllocVCPUMS
		s.AllocMiBMS += x.AllocMiBMS
		s.WallMS += x.WallMS
		s.CPUNS += x.CPUNS
	}
	return s
}

// cgroupCPU is the sandbox's cgroup CPU time as its agent reports it.
func cgroupCPU(tb testing.TB, e *testEnv, id string) time.Duration {
	tb.Helper()
	st, err := e.agent(tb).SandboxStats(ctx, id)
	if err != nil {
		tb.Fatalf("sandbox stats: %v", err)
	}
	return st.CPUUsage
}

// checkLifetime: the allocation billed is the sandbox's lifetime (running
// to ended) within a second, times its vCPUs and memory.
func checkLifetime(tb testing.TB, sb sandbox.Sandbox, l usage.Sums) {
	tb.Helper()
	if sb.StartedAt == nil || sb.EndedAt == nil {
		tb.Fatalf("Got(sandbox) = %+v; want started and ended", sb)
	}
	life := sb.EndedAt.Sub(*sb.StartedAt)
	if d := time.Duration(l.WallMS)*time.Millisecond - life; d.Abs() > time.Second {
		tb.Errorf("Got(allocated seconds) = %.3f; want the lifetime %.3f within 1 s", l.WallSeconds(), life.Seconds())
	}
	if l.AllocVCPUMS != l.WallMS*int64(sb.VCPUs) || l.AllocMiBMS != l.WallMS*int64(sb.MemoryMiB) {
		tb.Errorf("Got(alloc) = %d vCPU-ms, %d MiB-ms; want %d x %d vCPUs, x %d MiB", l.AllocVCPUMS, l.AllocMiBMS, l.WallMS, sb.VCPUs, sb.MemoryMiB)
	}
}

// testMetering: a sandbox that burns CPU for about 10 s is billed within 10 %
// of its cgroup's CPU time, its allocation matches its lifetime, and the
// export's sums equal the ledger.
func (e *testEnv) testMetering(t *testing.T) {
	api := e.api(e.tokA)
	sb := create(t, api, map[string]any{"memory_mib": 96, "template": "busybox"})
	if r := execIn(t, api, sb.ID, map[string]any{"cmd": burn(10), "timeout_seconds": 120}); r.ExitCode != 0 {
		t.Fatalf("Got(burn) = %+v; want exit 0", r)
	}
	time.Sleep(1500 * time.Millisecond) // at least one periodic sample after the burn
	mid := ledgerOf(t, e, e.a.ID, sb.ID)
	if mid.CPUNS == 0 || mid.WallMS == 0 {
		t.Errorf("Got(ledger while running) = %+v; want the sampler to have accounted CPU and time", mid)
	}
	cpu := cgroupCPU(t, e, sb.ID)
	destroy(t, api, sb.ID)
	rec := e.sandbox(t, sb.ID)
	l := ledgerOf(t, e, e.a.ID, sb.ID)
	t.Logf("cgroup CPU %.3f s before destroy, ledger %.3f s; lifetime %.3f s, allocated %.3f s",
		cpu.Seconds(), l.CPUSeconds(), rec.EndedAt.Sub(*rec.StartedAt).Seconds(), l.WallSeconds())
	if cpu < 5*time.Second {
		t.Errorf("Got(cgroup CPU of a 10 s burn) = %v; want several seconds (is the burn running?)", cpu)
	}
	if diff := math.Abs(l.CPUSeconds()-cpu.Seconds()) / cpu.Seconds(); diff > 0.10 {
		t.Errorf("Got(billed CPU) = %.3f s; want within 10 %% of the cgroup's %.3f s (off by %.1f %%)", l.CPUSeconds(), cpu.Seconds(), diff*100)
	}
	if l.CPUNS < int64(cpu) {
		t.Errorf("Got(billed CPU) = %d ns; want at least the last reading %d ns (the final sample is taken at destroy)", l.CPUNS, int64(cpu))
	}
	checkLifetime(t, rec, l)

	// Prometheus: the month's CPU of the tenant as billed, and its VMs as
	// libvirt measures them.
	status, metrics := e.webEnv().Anonymous().GetPage(t, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("Got(GET /metrics) = %d; want 200", status)
	}
	for _, series := range []string{`stockade_tenant_month_cpu_seconds{tenant="sbx-a"}`, `stockade_tenant_vm_cpu_seconds{tenant="sbx-a"}`,
		`stockade_tenant_vms_running{tenant="sbx-a"}`} {
		v, ok := metricValue(metrics, series)
		if !ok || v <= 0 {
			t.Errorf("Got(%s) = %v (present %v); want above 0", series, v, ok)
		}
	}

	// The export (this tenant, this month and the next hour) sums to the ledger.
	st := usage.NewStore(e.db, nil)
	r := usage.Range{From: usage.MonthStart(time.Now()), To: time.Now().Add(time.Hour)}
	tot, err := st.Totals(ctx, e.a.ID, r)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := st.Export(ctx, &buf, usage.ExportQuery{TenantID: e.a.ID, Range: r, Format: usage.FormatCSV}); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	byUnit := map[string]float64{}
	for _, rec := range recs[1:] {
		q, _ := strconv.ParseFloat(rec[12], 64)
		byUnit[rec[13]] += q
	}
	for unit, want := range map[string]float64{"vCPU-Seconds": tot.VCPUSeconds(), "GiB-Seconds": tot.GiBSeconds(), "CPU-Seconds": tot.CPUSeconds()} {
		if math.Abs(byUnit[unit]-want) > 1e-6*math.Max(1, want) {
			t.Errorf("Got(export sum of %s) = %v; want the ledger's %v", unit, byUnit[unit], want)
		}
	}
}

// testMeteringRestart: the control plane goes away in the middle of a CPU
// burn and comes back; the ledger ends equal to the cgroup's CPU time (no
// loss, nothing twice) and the allocation still matches the lifetime.
func (e *testEnv) testMeteringRestart(t *testing.T) {
	api := e.api(e.tokA)
	sb := create(t, api, map[string]any{"memory_mib": 96, "template": "busybox"})
	// A burn in its own session: it outlives the exec and the restart.
	execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c", "setsid sh -c '" +
		"end=$(( $(date +%s) + 9 )); while [ $(date +%s) -lt $end ]; do :; done' </dev/null >/dev/null 2>&1 &"}})
	time.Sleep(3 * time.Second)
	before := ledgerOf(t, e, e.a.ID, sb.ID)
	e.stop()
	time.Sleep(4 * time.Second) // burning with nobody metering
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	api = e.api(e.tokA)
	// Until the burn is over, then a few samples more (several restarts'
	// worth of repeated samples would show up as excess).
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c", "ps -o comm | grep -c setsid || true"}})
		if r.Stdout == "0\n" || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	// A second restart with nothing running: samples seen again add nothing.
	e.stop()
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	api = e.api(e.tokA)
	time.Sleep(2500 * time.Millisecond)
	cpu := cgroupCPU(t, e, sb.ID)
	l := ledgerOf(t, e, e.a.ID, sb.ID)
	t.Logf("before the restart %.3f s; after: cgroup %.3f s, ledger %.3f s", before.CPUSeconds(), cpu.Seconds(), l.CPUSeconds())
	if cpu < 5*time.Second {
		t.Errorf("Got(cgroup CPU) = %v; want the 9 s burn to have run through the restart", cpu)
	}
	if l.CPUNS != int64(cpu) {
		// Idle between the last sample and the reading: equal to the ns,
		// unless the shell ran a little since; never above.
		if l.CPUNS > int64(cpu) || float64(int64(cpu)-l.CPUNS) > 0.01*float64(cpu) {
			t.Errorf("Got(ledger CPU after restarts) = %d ns; want the cgroup's %d ns (nothing lost, nothing twice)", l.CPUNS, int64(cpu))
		}
	}
	destroy(t, api, sb.ID)
	rec := e.sandbox(t, sb.ID)
	final := ledgerOf(t, e, e.a.ID, sb.ID)
	checkLifetime(t, rec, final)
	if final.CPUNS < l.CPUNS || final.CPUNS > l.CPUNS+int64(200*time.Millisecond) {
		t.Errorf("Got(ledger CPU after destroy) = %d; want about %d", final.CPUNS, l.CPUNS)
	}
}

// testMeteringStopped: a sandbox its agent stops (its lifetime ran out) is
// closed with the agent's final sample, at the time it stopped.
func (e *testEnv) testMeteringStopped(t *testing.T) {
	api := e.api(e.tokA)
	sb := create(t, api, map[string]any{"memory_mib": 64, "template": "busybox", "timeout_seconds": 4})
	e.waitEnded(t, sb.ID, 60*time.Second)
	rec := e.sandbox(t, sb.ID)
	l := ledgerOf(t, e, e.a.ID, sb.ID)
	m, err := usage.NewStore(e.db, nil).Meter(ctx, e.a.ID, sb.ID)
	if err != nil || m.ClosedAt == nil {
		t.Fatalf("Got(meter) = %+v, %v; want closed", m, err)
	}
	// Its allocation ends when the agent stopped it: about its 4 s lifetime
	// after it started, not when the host noticed.
	if got := m.ClosedAt.Sub(*rec.StartedAt); got < 3*time.Second || got > 6*time.Second {
		t.Errorf("Got(billed lifetime of a 4 s sandbox) = %v; want about 4 s", got)
	}
	if l.WallMS != m.ClosedAt.Sub(*rec.StartedAt).Milliseconds() {
		t.Errorf("Got(wall ms) = %d; want %d", l.WallMS, m.ClosedAt.Sub(*rec.StartedAt).Milliseconds())
	}
	if m.CPUNS == 0 {
		t.Errorf("Got(meter CPU) = 0; want the final sample's CPU time")
	}
}
