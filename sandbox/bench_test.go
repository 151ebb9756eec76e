package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	wire "github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web/webtest"
)

// benchSamples is how many sandboxes (or commands) each figure is made of.
const benchSamples = 30

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// baseline asks the warm VM's agent to time raw crun in the same guest.
func (e *testEnv) baseline(tb testing.TB, req agentproto.BaselineRequest) []time.Duration {
	tb.Helper()
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	res, err := e.agent(tb).Baseline(bctx, req)
	if err != nil {
		tb.Fatalf("baseline %s: %v", req.Kind, err)
	}
	return res.Samples
}

// firstOutput creates a sandbox through the API and runs `echo ready` in it
// with the streaming exec; it returns the time from the create request to
// the command's first output, and the sandbox.
func firstOutput(tb testing.TB, api *webtest.Client) (time.Duration, string) {
	tb.Helper()
	start := time.Now()
	sb := create(tb, api, map[string]any{"template": "busybox", "memory_mib": 64})
	body, _ := json.Marshal(map[string]any{"cmd": []string{"echo", "ready"}})
	req, _ := http.NewRequest(http.MethodPost, api.Base+"/api/v1/sandboxes/"+sb.ID+"/exec?stream=1", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := api.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev wire.ExecEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type == "stdout" {
			d := time.Since(start)
			for sc.Scan() {
			}
			return d, sb.ID
		}
	}
	tb.Fatalf("no output from the first command of %s", sb.ID)
	return 0, ""
}

// BenchmarkSandboxCreateToFirstOutput: a sandbox created through the API
// until its first command's first output, against `crun run` of the same
// template in the same VM to its first output (the agent's baseline op).
// Each iteration measures benchSamples of each.
func BenchmarkSandboxCreateToFirstOutput(b *testing.B) {
	e := need(b)
	api := e.api(e.tokA)
	var ours, raw []time.Duration
	for i := 0; i < b.N; i++ {
		for j := 0; j < benchSamples; j++ {
			d, id := firstOutput(b, api)
			ours = append(ours, d)
			b.StopTimer()
			destroy(b, api, id)
			b.StartTimer()
		}
		b.StopTimer()
		raw = append(raw, e.baseline(b, agentproto.BaselineRequest{Kind: agentproto.BaselineRun, Template: "busybox", Count: benchSamples})...)
		b.StartTimer()
	}
	b.StopTimer()
	p50, p95, r50, r95 := percentile(ours, .5), percentile(ours, .95), percentile(raw, .5), percentile(raw, .95)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p95), "p95-ms")
	b.ReportMetric(ms(r50), "crun-run-p50-ms")
	b.ReportMetric(ms(r95), "crun-run-p95-ms")
	b.ReportMetric(float64(p50)/float64(r50), "p50-ratio")
	b.ReportMetric(float64(p95)/float64(r95), "p95-ratio")
	b.Logf("create -> first output over %d sandboxes: p50 %.0f ms, p95 %.0f ms; crun run -> first output p50 %.0f ms, p95 %.0f ms; ratio p50 %.2f, p95 %.2f",
		len(ours), ms(p50), ms(p95), ms(r50), ms(r95), float64(p50)/float64(r50), float64(p95)/float64(r95))
}

// BenchmarkSandboxDensity fills the warm 2 GiB VM with idle 16 MiB
// sandboxes until it takes no more (the pool may not boot another VM
// meanwhile), and reports how many it held and the guest memory each cost.
func BenchmarkSandboxDensity(b *testing.B) {
	e := need(b)
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "bench"}
	pools := e.pools()
	old, err := pools.Pool(ctx, e.a.ID)
	if err != nil {
		b.Fatal(err)
	}
	// One VM only, so "no room" ends the fill instead of a boot.
	if _, err := pools.SetPool(ctx, sys, e.a.ID, vmpool.PoolSettings{VCPUs: old.VCPUs, MemoryMiB: old.MemoryMiB, MaxVMs: 1, WarmVMs: 0, RecycleAfterHours: old.RecycleAfterHours}); err != nil {
		b.Fatalf("pool of one vm: %v", err)
	}
	defer pools.SetPool(ctx, sys, e.a.ID, old.Settings())
	// And a quota that is not what stops it.
	ts := tenants.NewStore(e.db, nil)
	oldQuota, err := ts.Quota(ctx, e.a.ID)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ts.SetQuota(ctx, sys, e.a.ID, tenants.Quota{MaxVMs: oldQuota.MaxVMs, MaxVCPUs: 4096, MaxMemoryMiB: 1 << 20, MaxSandboxes: 10000, MaxCPUHoursMonthly: 1000}); err != nil {
		b.Fatal(err)
	}
	defer ts.SetQuota(ctx, sys, e.a.ID, oldQuota)
	// A service of its own without the per-VM bound, on the same database
	// and VMs: the guest itself decides how many fit.
	svc := sandbox.New(e.db, pools, sandbox.Config{DataDir: e.dataDir, Logger: e.log, MaxPerVM: 1 << 20, DefaultTemplate: "busybox"})
	defer svc.Close()
	for i := 0; i < b.N; i++ {
		before, err := e.agent(b).Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var ids []string
		var stop error
		for {
			sb, err := svc.Create(ctx, sys, e.a.ID, sandbox.Spec{MemoryMiB: sandbox.MinMemoryMiB, TimeoutSeconds: 3600})
			if err != nil {
				stop = err
				break
			}
			if sb.VMID != e.warmVM {
				b.Fatalf("sandbox placed on %s; want the warm vm", sb.VMID)
			}
			ids = append(ids, sb.ID)
		}
		time.Sleep(2 * time.Second) // let the last ones settle into idle
		after, err := e.agent(b).Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		usedMiB := float64(int64(before.MemAvailable)-int64(after.MemAvailable)) / (1 << 20)
		b.ReportMetric(float64(len(ids)), "sandboxes")
		if len(ids) > 0 {
			b.ReportMetric(usedMiB/float64(len(ids)), "MiB/sandbox")
		}
		b.ReportMetric(float64(after.MemTotal)/(1<<20), "guest-MiB")
		b.Logf("a 2 GiB VM (%.0f MiB in the guest) held %d idle sandboxes, %.2f MiB of guest memory each; the next one failed: %v",
			float64(after.MemTotal)/(1<<20), len(ids), usedMiB/float64(max(len(ids), 1)), stop)
		for _, id := range ids {
			if _, err := svc.Destroy(ctx, sys, e.a.ID, id); err != nil {
				b.Errorf("destroy %s: %v", id, err)
			}
		}
	}
}
