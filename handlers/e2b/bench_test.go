package e2b_test

import (
	"bytes"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	wire "github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/benchrec"
)

//go:embed bench.mjs
var benchScript []byte

// bashTrue is the argv the SDK's commands.run('true') starts.
var bashTrue = []string{"/bin/bash", "-l", "-c", "true"}

// benchSamples is how many round trips each figure is made of.
const benchSamples = 30

// BenchmarkE2B: the unmodified e2b SDK under Node against the native API
// from Go, on one running debian sandbox of the whole app on a real VM,
// both measured in the same run. commands.run('true') (the SDK runs
// /bin/bash -l -c true over process.Process/Start and waits for its end
// event) against POST /exec of the same argv (and of plain true, for
// scale); files.write of 1 MiB then files.read of it (envd's /files)
// against PUT then GET /api/v1/sandboxes/:id/files. The ratios are
// E2B over native (issue 17's target: <= 1.2 for commands.run).
func BenchmarkE2B(b *testing.B) {
	e := startSDK(b, true)
	api := e.env.WithToken(e.tokA)
	api.Timeout = 5 * time.Minute
	var sb wire.Sandbox
	if status, body := api.JSON(b, http.MethodPost, "/api/v1/sandboxes", map[string]any{"template": "debian", "timeout_seconds": 3600}, &sb); status != http.StatusCreated {
		b.Fatalf("POST /api/v1/sandboxes = %d %s; want 201", status, body)
	}
	defer api.JSON(b, http.MethodDelete, "/api/v1/sandboxes/"+sb.ID, nil, nil)
	sdk := func(b *testing.B, mode string) []time.Duration {
		b.Helper()
		out := e.node(b, "bench.mjs", benchScript, map[string]any{"apiUrl": e.env.URL + "/e2b", "sandboxUrl": e.env.URL,
			"key": "e2b_" + hex.EncodeToString([]byte(e.tokA)), "id": sb.ID, "mode": mode, "n": benchSamples * b.N})
		var res struct{ MS []float64 }
		if err := json.Unmarshal(out, &res); err != nil || len(res.MS) != benchSamples*b.N {
			b.Fatalf("node bench.mjs %s printed %s (%v); want %d timings", mode, out, err, benchSamples*b.N)
		}
		ds := make([]time.Duration, len(res.MS))
		for i, m := range res.MS {
			ds[i] = time.Duration(m * float64(time.Millisecond))
		}
		return ds
	}
	native := func(b *testing.B, op func(testing.TB)) []time.Duration {
		b.Helper()
		op(b) // warm
		var ds []time.Duration
		for i := 0; i < benchSamples*b.N; i++ {
			start := time.Now()
			op(b)
			ds = append(ds, time.Since(start))
		}
		return ds
	}
	exec := func(argv ...string) func(testing.TB) {
		return func(tb testing.TB) {
			var r wire.ExecResult
			if status, body := api.JSON(tb, http.MethodPost, "/api/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": argv}, &r); status != http.StatusOK || r.ExitCode != 0 {
				tb.Fatalf("exec %v = %d %s; want 200, exit 0", argv, status, body)
			}
		}
	}

	// The native process API's start then wait: what process.Process/Start
	// maps onto (a stored, audited process), for where the time goes.
	startWait := func(tb testing.TB) {
		var p wire.Process
		if status, body := api.JSON(tb, http.MethodPost, "/api/v1/sandboxes/"+sb.ID+"/processes", map[string]any{"cmd": bashTrue}, &p); status != http.StatusCreated {
			tb.Fatalf("start %v = %d %s; want 201", bashTrue, status, body)
		}
		path := fmt.Sprintf("/api/v1/sandboxes/%s/processes/%d/wait", sb.ID, p.PID)
		if status, body := api.JSON(tb, http.MethodGet, path, nil, &p); status != http.StatusOK || p.ExitCode == nil || *p.ExitCode != 0 {
			tb.Fatalf("GET %s = %d %s; want 200, exit 0", path, status, body)
		}
	}

	b.Run("commands.run-true", func(b *testing.B) {
		bash := native(b, exec(bashTrue...))
		plain := native(b, exec("true"))
		procs := native(b, startWait)
		ours := sdk(b, "run")
		report(b, "e2b_commands_run_vs_exec", "exec", ours, bash)
		b.ReportMetric(ms(percentile(plain, .5)), "exec-plain-true-p50-ms")
		b.ReportMetric(ms(percentile(procs, .5)), "process-start-wait-p50-ms")
		b.Logf("commands.run('true') over %d runs: p50 %.1f ms, p95 %.1f ms; native exec of /bin/bash -l -c true p50 %.1f ms, p95 %.1f ms (of plain true p50 %.1f ms; native process start+wait of it p50 %.1f ms); ratio p50 %.2f, p95 %.2f",
			len(ours), ms(percentile(ours, .5)), ms(percentile(ours, .95)), ms(percentile(bash, .5)), ms(percentile(bash, .95)), ms(percentile(plain, .5)),
			ms(percentile(procs, .5)), ratio(ours, bash, .5), ratio(ours, bash, .95))
	})
	b.Run("files-1MiB", func(b *testing.B) {
		data := make([]byte, 1<<20)
		for i := range data {
			data[i] = byte(i % 251)
		}
		path := "/api/v1/sandboxes/" + sb.ID + "/files?path=/workspace/bench-native.bin"
		ours := sdk(b, "files")
		raw := native(b, func(tb testing.TB) {
			if status, body, _ := api.Request(tb, http.MethodPut, path, "application/octet-stream", bytes.NewReader(data)); status != http.StatusOK {
				tb.Fatalf("PUT %s = %d %s; want 200", path, status, body)
			}
			if status, body, _ := api.Request(tb, http.MethodGet, path, "", nil); status != http.StatusOK || body != string(data) {
				tb.Fatalf("GET %s = %d (%d bytes); want 200 with the 1 MiB written", path, status, len(body))
			}
		})
		report(b, "e2b_files_vs_native", "native", ours, raw)
		b.Logf("1 MiB write+read over %d rounds: through envd (SDK) p50 %.1f ms, p95 %.1f ms; native API p50 %.1f ms, p95 %.1f ms; ratio p50 %.2f, p95 %.2f",
			len(ours), ms(percentile(ours, .5)), ms(percentile(ours, .95)), ms(percentile(raw, .5)), ms(percentile(raw, .95)),
			ratio(ours, raw, .5), ratio(ours, raw, .95))
	})
}

// report reports the E2B figures, the native baseline's as base-..., and
// the ratios; the p50s as the named figure.
func report(b *testing.B, name, base string, ours, raw []time.Duration) {
	b.ReportMetric(ms(percentile(ours, .5)), "p50-ms")
	b.ReportMetric(ms(percentile(ours, .95)), "p95-ms")
	b.ReportMetric(ms(percentile(raw, .5)), base+"-p50-ms")
	b.ReportMetric(ms(percentile(raw, .95)), base+"-p95-ms")
	b.ReportMetric(ratio(ours, raw, .95), "p95-ratio")
	benchrec.Record(b, benchrec.Result{Name: name, Value: ms(percentile(ours, .5)), Unit: "ms", Baseline: ms(percentile(raw, .5))})
}

func ratio(ours, raw []time.Duration, p float64) float64 {
	return float64(percentile(ours, p)) / float64(percentile(raw, p))
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1)+0.5)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
