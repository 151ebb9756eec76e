package egress_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/benchrec"
	"github.com/stockade-dev/stockade/sandbox/egress"
)

// downloadSize is the body of the throughput benchmarks.
const downloadSize = 100 << 20

// sizedServer serves /bytes/N: N bytes in 64 KiB chunks of random bytes,
// as TLS traffic looks (zeros would be the agent link's worst case: it
// escapes every zero byte).
func sizedServer() *httptest.Server {
	chunk := make([]byte, 64<<10)
	rand.NewChaCha8([32]byte{1}).Read(chunk)
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Path[len("/bytes/"):])
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			k := min(n, len(chunk))
			if _, err := w.Write(chunk[:k]); err != nil {
				return
			}
			n -= k
		}
	}))
}

func fetch(tb testing.TB, c *http.Client, u string) (int64, time.Duration) {
	tb.Helper()
	start := time.Now()
	resp, err := c.Get(u)
	if err != nil {
		tb.Fatalf("GET %s: %v", u, err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		tb.Fatalf("GET %s: %d after %d bytes: %v", u, resp.StatusCode, n, err)
	}
	return n, time.Since(start)
}

// p50 is the median of ds (sorted in place).
func p50(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// mbps is size bytes over d in MB/s.
func mbps(size int, d time.Duration) float64 { return float64(size) / (1 << 20) / d.Seconds() }

// hostRounds is how many interleaved direct/gateway download pairs
// BenchmarkGatewayHost times: the machine's load hits both alike, and the
// medians are compared.
const hostRounds = 9

// BenchmarkGatewayHost measures the gateway itself on the host, between a
// local client and a local upstream: throughput of a 100 MB download and
// the latency one request gains, each against the same thing direct,
// interleaved (direct, gateway, direct, ...), medians compared
// (gateway_host_vs_direct, target >= 0.9).
func BenchmarkGatewayHost(b *testing.B) {
	f := newFixture(b, "127.0.0.0/8")
	f.policy.set(egress.Rules{Default: egress.DefaultDeny, Allow: []egress.Rule{{Domain: "allowed.test"}}})
	srv := sizedServer()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	direct := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	proxied := f.client(false)
	proxied.Timeout = 5 * time.Minute
	var dDirect, dProxy []time.Duration
	var lDirect, lProxy time.Duration
	const rounds = 20
	for i := 0; i < b.N; i++ {
		for range hostRounds {
			_, d := fetch(b, direct, "http://127.0.0.1:"+port+fmt.Sprintf("/bytes/%d", downloadSize))
			dDirect = append(dDirect, d)
			_, d = fetch(b, proxied, "http://allowed.test:"+port+fmt.Sprintf("/bytes/%d", downloadSize))
			dProxy = append(dProxy, d)
		}
		for range rounds {
			_, d := fetch(b, direct, "http://127.0.0.1:"+port+"/bytes/10")
			lDirect += d
			_, d = fetch(b, proxied, "http://allowed.test:"+port+"/bytes/10")
			lProxy += d
		}
	}
	n := float64(b.N)
	directMBs, gatewayMBs := mbps(downloadSize, p50(dDirect)), mbps(downloadSize, p50(dProxy))
	b.Logf("100 MB downloads, sorted: direct %v; gateway %v", dDirect, dProxy)
	b.ReportMetric(directMBs, "direct-MB/s")
	b.ReportMetric(gatewayMBs, "gateway-MB/s")
	b.ReportMetric(float64(lDirect.Microseconds())/(n*rounds), "direct-request-us")
	b.ReportMetric(float64((lProxy-lDirect).Microseconds())/(n*rounds), "added-request-us")
	benchrec.Record(b, benchrec.Result{Name: "gateway_host_vs_direct", Value: gatewayMBs, Unit: "MB/s", Baseline: directMBs})
}

// vmRounds and vmSize: BenchmarkGatewayVM times vmRounds interleaved pairs
// of a vmSize download and a vmSize file read.
const (
	vmRounds = 5
	vmSize   = 64 << 20
)

// BenchmarkGatewayVM downloads 64 MiB inside a sandbox on a real VM through
// its proxy listener, the agent channel and the gateway, against the agent
// channel's own throughput: a 64 MiB file read out of the same sandbox
// over the same session (file.read), the pairs interleaved, medians
// compared (egress_vs_channel, target >= 0.9); and times small requests
// from the sandbox. Under TCG the guest's CPU dominates: compare runs, not
// machines.
func BenchmarkGatewayVM(b *testing.B) {
	e := newVMEnv(b)
	srv := sizedServer()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	run := func(line string) time.Duration {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		code, out := e.shTB(ctx, b, line)
		if code != 0 {
			b.Fatalf("%s: exit %d: %s", line, code, out)
		}
		return time.Since(start)
	}
	read := func(path string) time.Duration {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		n := 0
		_, err := e.sbx.ReadFile(ctx, e.actor, e.tenantID, e.sb.ID, path, func(size int64) (io.Writer, error) {
			n = int(size)
			return io.Discard, nil
		})
		if err != nil || n != vmSize {
			b.Fatalf("read %s: %d bytes: %v", path, n, err)
		}
		return time.Since(start)
	}
	run(fmt.Sprintf("head -c %d /dev/urandom > /workspace/link.bin", vmSize))
	const rounds = 20
	var dVM, dLink []time.Duration
	var one, many time.Duration
	up0, down0 := e.gw.Bytes(e.sb.ID)
	for i := 0; i < b.N; i++ {
		for range vmRounds {
			dLink = append(dLink, read("/workspace/link.bin"))
			dVM = append(dVM, run(fmt.Sprintf("wget -q -O /dev/null http://allowed.test:%s/bytes/%d", port, vmSize)))
		}
		// One request, and rounds+1: the difference is rounds requests
		// without the exec around them.
		one += run(fmt.Sprintf("wget -q -O /dev/null http://allowed.test:%s/bytes/10", port))
		many += run(fmt.Sprintf("for i in $(seq %d); do wget -q -O /dev/null http://allowed.test:%s/bytes/10 || exit 1; done", rounds+1, port))
	}
	n := float64(b.N)
	linkMBs, vmMBs := mbps(vmSize, p50(dLink)), mbps(vmSize, p50(dVM))
	b.Logf("64 MiB, sorted: file reads %v; downloads %v", dLink, dVM)
	b.ReportMetric(linkMBs, "agent-channel-file-read-MB/s")
	b.ReportMetric(vmMBs, "sandbox-gateway-MB/s")
	b.ReportMetric(float64((many-one).Milliseconds())/(n*rounds), "sandbox-request-ms")
	benchrec.Record(b, benchrec.Result{Name: "egress_vs_channel", Value: vmMBs, Unit: "MB/s", Baseline: linkMBs})
	// Every byte metered: the downloads and their answers' heads.
	if up, down := e.gw.Bytes(e.sb.ID); down-down0 < int64(b.N*vmRounds*vmSize) {
		b.Errorf("Got(Bytes(%s)) = %d up, %d down; want the %d downloads counted", e.sb.ID, up-up0, down-down0, b.N*vmRounds)
	}
}
