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
	"github.com/stockade-dev/stockade/sandbox/agentproto"
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
