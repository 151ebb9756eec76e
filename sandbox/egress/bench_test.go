package egress_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

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

// BenchmarkGatewayHost measures the gateway itself on the host, between a
// local client and a local upstream: throughput of a 100 MB download and
// the latency one request gains, each against the same thing direct.
func BenchmarkGatewayHost(b *testing.B) {
	f := newFixture(b, "127.0.0.0/8")
	f.policy.set(egress.Rules{Default: egress.DefaultDeny, Allow: []egress.Rule{{Domain: "allowed.test"}}})
	srv := sizedServer()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	direct := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	proxied := f.client(false)
	var dDirect, dProxy, lDirect, lProxy time.Duration
	const rounds = 20
	for i := 0; i < b.N; i++ {
		_, d := fetch(b, direct, "http://127.0.0.1:"+port+fmt.Sprintf("/bytes/%d", downloadSize))
		dDirect += d
		_, d = fetch(b, proxied, "http://allowed.test:"+port+fmt.Sprintf("/bytes/%d", downloadSize))
		dProxy += d
		for range rounds {
			_, d = fetch(b, direct, "http://127.0.0.1:"+port+"/bytes/10")
			lDirect += d
			_, d = fetch(b, proxied, "http://allowed.test:"+port+"/bytes/10")
			lProxy += d
		}
	}
	n := float64(b.N)
	mb := float64(downloadSize) / (1 << 20)
	b.ReportMetric(mb/(dDirect.Seconds()/n), "direct-MB/s")
	b.ReportMetric(mb/(dProxy.Seconds()/n), "gateway-MB/s")
	b.ReportMetric(dDirect.Seconds()/dProxy.Seconds(), "throughput-ratio")
	b.ReportMetric(float64(lDirect.Microseconds())/(n*rounds), "direct-request-us")
	b.ReportMetric(float64((lProxy-lDirect).Microseconds())/(n*rounds), "added-request-us")
}

// BenchmarkGatewayVM downloads 100 MB inside a sandbox on a real VM through
// its proxy listener, the agent channel and the gateway, against the same
// download direct on the host; and times small requests from the sandbox.
// Under TCG the guest's CPU dominates: compare runs, not machines.
func BenchmarkGatewayVM(b *testing.B) {
	e := newVMEnv(b)
	srv := sizedServer()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	direct := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
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
	const rounds = 20
	var dDirect, dVM, one, many time.Duration
	for i := 0; i < b.N; i++ {
		_, d := fetch(b, direct, "http://127.0.0.1:"+port+fmt.Sprintf("/bytes/%d", downloadSize))
		dDirect += d
		dVM += run(fmt.Sprintf("wget -q -O /dev/null http://allowed.test:%s/bytes/%d", port, downloadSize))
		// One request, and rounds+1: the difference is rounds requests
		// without the exec around them.
		one += run(fmt.Sprintf("wget -q -O /dev/null http://allowed.test:%s/bytes/10", port))
		many += run(fmt.Sprintf("for i in $(seq %d); do wget -q -O /dev/null http://allowed.test:%s/bytes/10 || exit 1; done", rounds+1, port))
	}
	// The agent channel alone, without the gateway: a file read out of
	// the sandbox over the same session (file.read).
	const linkFile = 32 << 20
	run(fmt.Sprintf("head -c %d /dev/urandom > /workspace/link.bin", linkFile))
	var dLink time.Duration
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		start := time.Now()
		_, err := e.sbx.ReadFile(ctx, e.actor, e.tenantID, e.sb.ID, "/workspace/link.bin", func(int64) (io.Writer, error) { return io.Discard, nil })
		dLink += time.Since(start)
		cancel()
		if err != nil {
			b.Fatalf("read file: %v", err)
		}
	}
	n := float64(b.N)
	mb := float64(downloadSize) / (1 << 20)
	linkMBs, vmMBs := float64(linkFile)/(1<<20)/(dLink.Seconds()/n), mb/(dVM.Seconds()/n)
	b.ReportMetric(linkMBs, "agent-channel-file-read-MB/s")
	b.ReportMetric(mb/(dDirect.Seconds()/n), "host-direct-MB/s")
	b.ReportMetric(vmMBs, "sandbox-gateway-MB/s")
	// What the gateway path keeps of what the channel itself carries.
	b.ReportMetric(vmMBs/linkMBs, "channel-ratio")
	b.ReportMetric(dDirect.Seconds()/dVM.Seconds(), "throughput-ratio")
	b.ReportMetric(float64((many-one).Milliseconds())/(n*rounds), "sandbox-request-ms")
	if up, down := e.gw.Bytes(e.sb.ID); down < downloadSize {
		b.Errorf("Got(Bytes(%s)) = %d up, %d down; want the download counted", e.sb.ID, up, down)
	}
}
