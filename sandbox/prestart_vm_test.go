package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/benchrec"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// Pre-started sandboxes through the API (sandbox/prestart.go; the agent's
// side and the escape checks of a claimed sandbox are tested in
// hypervisor/image TestSandboxes).

// withPool turns the warm VM's pool of pre-started busybox sandboxes on
// (per template) until cleanup, which turns it off and waits until no
// member is left.
func (e *testEnv) withPool(tb testing.TB, per int) {
	tb.Helper()
	if _, err := e.agent(tb).ConfigurePrestart(ctx, agentproto.PrestartConfig{PerTemplate: per, Templates: []string{"busybox"}}); err != nil {
		tb.Fatalf("ConfigurePrestart(%d) = %v", per, err)
	}
	tb.Cleanup(func() {
		if _, err := e.agent(tb).ConfigurePrestart(ctx, agentproto.PrestartConfig{PerTemplate: 0}); err != nil {
			tb.Errorf("ConfigurePrestart(0) = %v", err)
		}
		e.waitGuest(tb, func(st agentproto.Stats) bool { return st.Prestarted == 0 }, "no pre-started sandbox left")
	})
	e.waitPool(tb, per)
}

// waitPool waits until the warm VM's busybox pool holds ready members.
func (e *testEnv) waitPool(tb testing.TB, ready int) {
	tb.Helper()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		st, err := e.agent(tb).ConfigurePrestart(wctx, agentproto.PrestartConfig{Query: true})
		if err != nil {
			tb.Fatalf("ConfigurePrestart(query) = %v", err)
		}
		if p := st.Pool("busybox"); p.Ready >= ready && p.Starting == 0 {
			return
		}
		select {
		case <-wctx.Done():
			tb.Fatalf("Got(pool) = %+v; want %d ready busybox sandboxes", st, ready)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitGuest waits until the warm VM's stats satisfy ok.
func (e *testEnv) waitGuest(tb testing.TB, ok func(agentproto.Stats) bool, what string) {
	tb.Helper()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		st, err := e.agent(tb).Stats(wctx)
		if err == nil && ok(st) {
			return
		}
		select {
		case <-wctx.Done():
			tb.Fatalf("Got(guest stats) = %+v, %v; want %s", st, err, what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestPrestartedSandboxes(t *testing.T) {
	if testing.Short() {
		t.Skip("boots VMs")
	}
	e := need(t)
	e.withPool(t, 1)
	api := e.api(e.tokA)
	sb := create(t, api, map[string]any{"template": "busybox", "memory_mib": 64, "env": map[string]string{"GREETING": "claimed"}})
	defer destroy(t, api, sb.ID)
	if got := e.guestSandboxes(t)[sb.ID]; !got.Prestarted || got.State != agentproto.SandboxRunning {
		t.Errorf("Got(sandbox in the guest) = %+v; want running, claimed from the pool", got)
	}
	r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c", "echo $GREETING; hostname; cat /sys/fs/cgroup/memory.max; ls -A /workspace | wc -l"}})
	if want := "claimed\nsandbox\n67108864\n0\n"; r.ExitCode != 0 || r.Stdout != want {
		t.Errorf("Got(exec in the claimed sandbox) = %+v; want %q", r, want)
	}
	evs := e.events(t, e.a.ID, audit.TypeSandboxPrestartClaimed, sb.ID)
	if len(evs) != 1 || evs[0].Details["vm"] != e.warmVM {
		t.Errorf("Got(%s events) = %+v; want one naming the vm %s", audit.TypeSandboxPrestartClaimed, evs, e.warmVM)
	}
	if rec := e.sandbox(t, sb.ID); rec.State != sandbox.StateRunning || rec.StartedAt == nil || rec.StartedAt.Before(rec.CreatedAt) {
		t.Errorf("Got(record) = %s started %v created %v; want running, metered from the claim on", rec.State, rec.StartedAt, rec.CreatedAt)
	}
	// The pool refills; a second create claims again.
	e.waitPool(t, 1)
	again := create(t, api, map[string]any{"template": "busybox", "memory_mib": 64})
	defer destroy(t, api, again.ID)
	if got := e.guestSandboxes(t)[again.ID]; !got.Prestarted {
		t.Errorf("Got(second sandbox in the guest) = %+v; want claimed from the refilled pool", got)
	}
	if evs := e.events(t, e.a.ID, audit.TypeSandboxPrestartClaimed, again.ID); len(evs) != 1 {
		t.Errorf("Got(%s events of the second) = %d; want 1", audit.TypeSandboxPrestartClaimed, len(evs))
	}
}

// BenchmarkSandboxCreateToFirstOutputPrestarted: a sandbox created through
// the API while the VM holds a pre-started one, until its first command's
// first output, against `crun run` of the same template in the same VM,
// interleaved one for one (the pool refills between samples, untimed).
func BenchmarkSandboxCreateToFirstOutputPrestarted(b *testing.B) {
	e := need(b)
	e.withPool(b, 1)
	api := e.api(e.tokA)
	var ours, raw []time.Duration
	for i := 0; i < b.N; i++ {
		for j := 0; j < benchSamples; j++ {
			b.StopTimer()
			e.waitPool(b, 1)
			b.StartTimer()
			d, id := firstOutput(b, api)
			ours = append(ours, d)
			b.StopTimer()
			if got := e.guestSandboxes(b)[id]; !got.Prestarted {
				b.Fatalf("Got(sandbox %s) = %+v; want it claimed from the pool", id, got)
			}
			destroy(b, api, id)
			raw = append(raw, e.baseline(b, agentproto.BaselineRequest{Kind: agentproto.BaselineRun, Template: "busybox", Count: 1})...)
			b.StartTimer()
		}
	}
	b.StopTimer()
	p50, p95, r50, r95 := percentile(ours, .5), percentile(ours, .95), percentile(raw, .5), percentile(raw, .95)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p95), "p95-ms")
	b.ReportMetric(ms(r50), "crun-run-p50-ms")
	b.Logf("prestarted create -> first output over %d sandboxes: p50 %.0f ms, p95 %.0f ms; crun run -> first output p50 %.0f ms, p95 %.0f ms; ratio p50 %.2f",
		len(ours), ms(p50), ms(p95), ms(r50), ms(r95), float64(p50)/float64(r50))
	benchrec.Record(b, benchrec.Result{Name: "create_first_output_prestarted_vs_crun_run", Value: ms(p50), Unit: "ms", Baseline: ms(r50)})
}
