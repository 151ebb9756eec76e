package sandbox_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/benchrec"
)

// insideGets times n plain GETs of http://127.0.0.1:8000/ made inside the
// sandbox, one connection each (as the proxy makes), and prints their
// durations in microseconds as a JSON list.
const insideGets = `import http.client, json, sys, time
out = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", 8000)
    c.request("GET", "/")
    r = c.getresponse()
    r.read()
    c.close()
    if r.status != 200:
        sys.exit("status %d" % r.status)
    out.append(int((time.perf_counter() - t) * 1e6))
print(json.dumps(out))
`

// BenchmarkSandboxPortHTTP: a GET of a dev server (python3 -m http.server
// in debian) through the port route (request to answer, token checked,
// tunnel dialled over the agent channel) against the same GET made inside
// the sandbox.
func BenchmarkSandboxPortHTTP(b *testing.B) {
	e := need(b)
	api := e.api(e.tokA)
	sb := create(b, api, map[string]any{"template": "debian", "memory_mib": 256})
	defer destroy(b, api, sb.ID)
	start := `cd /tmp && (setsid nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 </dev/null &)
for i in $(seq 1 200); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8000)).close()' 2>/dev/null && exit 0; sleep 0.2; done; exit 1`
	if r := execIn(b, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c", start}, "timeout_seconds": 120}); r.ExitCode != 0 {
		b.Fatalf("start the server = %+v", r)
	}
	path := "/api/v1/sandboxes/" + sb.ID + "/ports/8000/"
	get := func() {
		if s, body, _ := api.Request(b, http.MethodGet, path, "", nil); s != http.StatusOK {
			b.Fatalf("GET through the port = %d: %.200s", s, body)
		}
	}
	get() // warm
	var ours []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < benchSamples; j++ {
			t0 := time.Now()
			get()
			ours = append(ours, time.Since(t0))
		}
	}
	b.StopTimer()
	r := execIn(b, api, sb.ID, map[string]any{"cmd": []string{"python3", "-c", insideGets, strconv.Itoa(benchSamples)}, "timeout_seconds": 120})
	var us []int64
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &us); err != nil || r.ExitCode != 0 || len(us) != benchSamples {
		b.Fatalf("GETs inside the sandbox = %+v, %v", r, err)
	}
	var inside []time.Duration
	for _, u := range us {
		inside = append(inside, time.Duration(u)*time.Microsecond)
	}
	p50, p95, i50, i95 := percentile(ours, .5), percentile(ours, .95), percentile(inside, .5), percentile(inside, .95)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p95), "p95-ms")
	b.ReportMetric(ms(i50), "inside-p50-ms")
	b.ReportMetric(ms(i95), "inside-p95-ms")
	benchrec.Record(b, benchrec.Result{Name: "port_http_vs_inside", Value: ms(p50), Unit: "ms", Baseline: ms(i50)})
	b.Logf("GET / of http.server through the port route over %d requests: p50 %.1f ms, p95 %.1f ms; inside the sandbox p50 %.1f ms, p95 %.1f ms; ratio p50 %.2f",
		len(ours), ms(p50), ms(p95), ms(i50), ms(i95), float64(p50)/float64(i50))
}
