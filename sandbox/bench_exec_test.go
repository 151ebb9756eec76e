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

// BenchmarkSandboxExecTrue: `true` run through the API (the HTTP request
// in, the exit code out) against the floor measured in the same run, one
// sample of each in turn: the guest's own fork+exec of `true` (timed by the
// agent) plus one agent-channel round trip (ping). Between them, for the
// breakdown, the same command through the sandbox service without HTTP
// (records, audit, the agent) and straight to the agent (no records).
func BenchmarkSandboxExecTrue(b *testing.B) {
	e := need(b)
	api := e.api(e.tokA)
	sb := create(b, api, map[string]any{"template": "busybox", "memory_mib": 64})
	defer destroy(b, api, sb.ID)
	svc := e.service()
	actor := audit.Actor{Kind: audit.ActorSystem, ID: "bench"}
	true_ := []string{"true"}
	execIn(b, api, sb.ID, map[string]any{"cmd": true_}) // warm
	var viaAPI, viaService, viaAgent, spawn, ping, floor []time.Duration
	timeIt := func(run func() error) time.Duration {
		start := time.Now()
		if err := run(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	c := e.agent(b)
	// One sample of each in turn, starting with another one each round:
	// the guest still winding down the previous command slows whichever
	// comes next, so no figure may always come first or last.
	runs := []func(){
		func() {
			viaAPI = append(viaAPI, timeIt(func() error {
				if r := execIn(b, api, sb.ID, map[string]any{"cmd": true_}); r.ExitCode != 0 {
					b.Fatalf("true = %+v", r)
				}
				return nil
			}))
		},
		func() {
			viaService = append(viaService, timeIt(func() error {
				_, err := svc.Exec(ctx, actor, e.a.ID, sb.ID, sandbox.ExecRequest{Cmd: true_}, nil, nil)
				return err
			}))
		},
		func() {
			viaAgent = append(viaAgent, timeIt(func() error {
				_, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: sb.ID, Argv: true_}, nil, nil, nil)
				return err
			}))
		},
		func() {
			s := e.baseline(b, agentproto.BaselineRequest{Kind: agentproto.BaselineSpawn, Template: "busybox", Count: 1})[0]
			pctx, cancel := context.WithTimeout(ctx, time.Minute)
			p, err := c.Ping(pctx)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			spawn, ping, floor = append(spawn, s), append(ping, p), append(floor, s+p)
		},
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < benchSamples; j++ {
			for k := range runs {
				runs[(j+k)%len(runs)]()
			}
		}
	}
	b.StopTimer()
	p50 := func(ds []time.Duration) float64 { return ms(percentile(ds, .5)) }
	b.ReportMetric(p50(viaAPI), "api-p50-ms")
	b.ReportMetric(ms(percentile(viaAPI, .95)), "api-p95-ms")
	b.ReportMetric(p50(viaService), "service-p50-ms")
	b.ReportMetric(p50(viaAgent), "agent-p50-ms")
	b.ReportMetric(p50(spawn), "spawn-p50-ms")
	b.ReportMetric(p50(ping), "ping-p50-ms")
	benchrec.Record(b, benchrec.Result{Name: "exec_true_vs_floor", Value: p50(viaAPI), Unit: "ms", Baseline: p50(floor)})
	b.Logf("exec true over %d runs, p50: API %.1f ms, service %.1f ms, agent %.1f ms; floor %.1f ms = guest fork+exec %.1f ms + ping %.1f ms; ratio %.2f",
		len(viaAPI), p50(viaAPI), p50(viaService), p50(viaAgent), p50(floor), p50(spawn), p50(ping), p50(viaAPI)/p50(floor))
}
