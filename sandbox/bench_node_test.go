package sandbox_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/benchrec"
)

// nodeSamples is how many runs each node figure is made of: one `node -e 0`
// costs seconds under TCG.
const nodeSamples = 5

// nodeVariants are the V8 and Node flags measured against plain `node -e 0`
// in the same sandbox. None won beyond noise when measured (README, the
// node template), so the template sets none; they stay here to show it.
var nodeVariants = []struct{ name, flags string }{
	{"plain", ""},
	{"jitless", "--jitless"},
	{"max-lazy", "--max-lazy"},
	{"single-threaded", "--single-threaded"},
	{"v8-pool-0", "--v8-pool-size=0"},
}

// BenchmarkNodeStartupInSandbox: `node -e 0` in a sandbox of the node
// template (node_startup_guest_ms), against `true` in the same sandbox,
// each through the API; plus the same with the flags of nodeVariants and
// `npm --version` (npm's own start), for the record.
func BenchmarkNodeStartupInSandbox(b *testing.B) {
	e := need(b)
	api := e.api(e.tokA)
	hc := *api.Client // npm's start takes longer than the client's usual timeout
	hc.Timeout = 15 * time.Minute
	api.Client = &hc
	sb := create(b, api, map[string]any{"template": "node", "memory_mib": 512})
	defer destroy(b, api, sb.ID)
	run := func(cmd []string, env map[string]string) time.Duration {
		start := time.Now()
		if r := execIn(b, api, sb.ID, map[string]any{"cmd": cmd, "env": env, "timeout_seconds": 600}); r.ExitCode != 0 {
			b.Fatalf("%v = %+v", cmd, r)
		}
		return time.Since(start)
	}
	series := func(cmd []string, env map[string]string) []time.Duration {
		run(cmd, env) // warm: the guest's page cache and QEMU's translations
		var ds []time.Duration
		for range nodeSamples {
			ds = append(ds, run(cmd, env))
		}
		return ds
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		trues := series([]string{"true"}, nil)
		t50 := percentile(trues, .5)
		for _, v := range nodeVariants {
			cmd := append([]string{"node"}, strings.Fields(v.flags)...)
			d50 := percentile(series(append(cmd, "-e", "0"), nil), .5)
			b.Logf("node %s -e 0: p50 %.0f ms (true p50 %.0f ms)", v.flags, ms(d50), ms(t50))
			if v.name == "plain" {
				b.ReportMetric(ms(d50), "node_startup_guest_ms")
				b.ReportMetric(ms(t50), "true-p50-ms")
				benchrec.Record(b, benchrec.Result{Name: "node_startup_vs_true", Value: ms(d50), Unit: "ms", Baseline: ms(t50)})
				continue
			}
			b.ReportMetric(ms(d50), v.name+"-p50-ms")
		}
		n50 := percentile(series([]string{"npm", "--version"}, nil), .5)
		b.ReportMetric(ms(n50), "npm-version-p50-ms")
		b.Logf("npm --version: p50 %.0f ms", ms(n50))
	}
}
