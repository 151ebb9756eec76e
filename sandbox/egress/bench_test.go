package egress_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
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

// processCPU is the CPU time this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// hostRounds is how many interleaved rounds (direct, gateway, gateway
// over memory) BenchmarkGatewayHost times: the machine's load hits all
// alike, and the medians are compared.
const hostRounds = 15

// BenchmarkGatewayHost measures the gateway itself on the host, between a
// local client and a local upstream: throughput of a 100 MB download and
// the latency one request gains, each against the same thing direct, in
// interleaved rounds, medians compared (gateway_host_vs_direct, target
// >= 0.9). The client reaches the gateway over loopback TCP, standing in
// for the agent's proxy listener.
//
// What varies that figure is the host's CPU and its caches: the download
// through the gateway crosses the kernel's TCP twice where the direct one
// crosses it once (the gateway's own code is a few % of the samples; the
// body is spliced socket to socket). With the kernel's autotuned buffers
// the two queues grew to megabytes and the relayed bytes were cold in the
// caches when the client and the splice copied them: twice the direct
// CPU time (cpu-time-ratio ~0.5) and, on a loaded host, about that
// throughput ratio. The gateway now clamps its upstream window and its
// TCP sandbox connection's send buffer (bufferSockets): cpu-time-ratio
// 0.50-0.61 (was 0.43-0.53) and gateway_host_vs_direct 0.51-0.68 (was
// 0.47-0.58) in interleaved runs at load averages 14-29 on 2 cores; a
// quiet host has a core for the second leg. The same gateway with the client on an in-memory
// connection (as the host's own connections reach it, DialAs) is the
// memory-gateway-* metrics: without the client's TCP leg it often beats
// the direct download.
func BenchmarkGatewayHost(b *testing.B) {
	f := newFixture(b, "127.0.0.0/8")
	f.policy.set(egress.Rules{Default: egress.DefaultDeny, Allow: []egress.Rule{{Domain: "allowed.test"}}})
	srv := sizedServer()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	direct := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	proxied := f.client(false)
	proxied.Timeout = 5 * time.Minute
	piped := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "gateway.invalid:3128"}),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			local, remote := net.Pipe()
			go f.gw.ServeConn(context.Background(), f.tenantID, "vm-1", "sb-1", remote)
			return local, nil
		}}}
	big := "/bytes/" + strconv.Itoa(downloadSize)
	var dDirect, dProxy, dPiped []time.Duration
	var lDirect, lProxy, cDirect, cProxy time.Duration
	const rounds = 20
	for i := 0; i < b.N; i++ {
		for range hostRounds {
			c0 := processCPU()
			_, d := fetch(b, direct, "http://127.0.0.1:"+port+big)
			c1 := processCPU()
			dDirect = append(dDirect, d)
			_, d = fetch(b, proxied, "http://allowed.test:"+port+big)
			cDirect, cProxy = cDirect+c1-c0, cProxy+processCPU()-c1
			dProxy = append(dProxy, d)
			_, d = fetch(b, piped, "http://allowed.test:"+port+big)
			dPiped = append(dPiped, d)
		}
		for range rounds {
			_, d := fetch(b, direct, "http://127.0.0.1:"+port+"/bytes/10")
			lDirect += d
			_, d = fetch(b, proxied, "http://allowed.test:"+port+"/bytes/10")
			lProxy += d
		}
	}
	n := float64(b.N)
	directMBs, gatewayMBs, pipedMBs := mbps(downloadSize, p50(dDirect)), mbps(downloadSize, p50(dProxy)), mbps(downloadSize, p50(dPiped))
	b.Logf("100 MB downloads, sorted: direct %v; gateway %v; gateway over memory %v", dDirect, dProxy, dPiped)
	b.ReportMetric(directMBs, "direct-MB/s")
	b.ReportMetric(gatewayMBs, "gateway-MB/s")
	b.ReportMetric(pipedMBs, "memory-gateway-MB/s")
	b.ReportMetric(pipedMBs/directMBs, "memory-gateway-ratio")
	// CPU time of the whole download (client, gateway and server are all
	// this process), direct over through the gateway.
	b.ReportMetric(cDirect.Seconds()/cProxy.Seconds(), "cpu-time-ratio")
	b.ReportMetric(float64(lDirect.Microseconds())/(n*rounds), "direct-request-us")
	b.ReportMetric(float64((lProxy-lDirect).Microseconds())/(n*rounds), "added-request-us")
	benchrec.Record(b, benchrec.Result{Name: "gateway_host_vs_direct", Value: gatewayMBs, Unit: "MB/s", Baseline: directMBs})
}

// vmRounds and vmSize: BenchmarkGatewayVM times vmRounds interleaved pairs
// of a vmSize download and a vmSize file read.
const (
	vmRounds = 5
	vmSize   = 32 << 20
)

// qemuCPU is the CPU time the VM's QEMU process has used so far (all its
// threads), or false when its pid is not to be found (a remote libvirt).
// Under TCG it is the guest's work: on a loaded host it moves far less
// than wall time, so the benchmark reports it beside the throughputs.
func qemuCPU(vmID string) (time.Duration, bool) {
	pid, err := os.ReadFile("/run/libvirt/qemu/stockade-" + vmID + ".pid")
	if err != nil {
		return 0, false
	}
	st, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/stat")
	i := bytes.LastIndexByte(st, ')')
	if err != nil || i < 0 || i+2 > len(st) {
		return 0, false
	}
	f := strings.Fields(string(st[i+2:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, true // USER_HZ is 100 on Linux
}

// BenchmarkGatewayVM downloads 32 MiB inside a sandbox on a real VM through
// its proxy listener, the agent channel and the gateway, against the agent
// channel's own throughput: a 32 MiB file read out of the same sandbox
// over the same session (file.read), the pairs interleaved, medians
// compared (egress_vs_channel, target >= 0.9); and times small requests
// from the sandbox. Under TCG the guest's CPU dominates: compare runs, not
// machines.
func BenchmarkGatewayVM(b *testing.B) {
	e := newVMEnv(b)
	srv := sizedServer()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	// Guest work per MiB of each kind of transfer, when QEMU is local.
	var cpuLink, cpuVM time.Duration
	cpuOK := true
	timed := func(cpu *time.Duration, f func() time.Duration) time.Duration {
		c0, ok0 := qemuCPU(e.sb.VMID)
		d := f()
		c1, ok1 := qemuCPU(e.sb.VMID)
		cpuOK = cpuOK && ok0 && ok1
		*cpu += c1 - c0
		return d
	}
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
			dLink = append(dLink, timed(&cpuLink, func() time.Duration { return read("/workspace/link.bin") }))
			dVM = append(dVM, timed(&cpuVM, func() time.Duration {
				return run(fmt.Sprintf("wget -q -O /dev/null http://allowed.test:%s/bytes/%d", port, vmSize))
			}))
		}
		// One request, and rounds+1: the difference is rounds requests
		// without the exec around them.
		one += run(fmt.Sprintf("wget -q -O /dev/null http://allowed.test:%s/bytes/10", port))
		many += run(fmt.Sprintf("for i in $(seq %d); do wget -q -O /dev/null http://allowed.test:%s/bytes/10 || exit 1; done", rounds+1, port))
	}
	n := float64(b.N)
	linkMBs, vmMBs := mbps(vmSize, p50(dLink)), mbps(vmSize, p50(dVM))
	b.Logf("32 MiB, sorted: file reads %v; downloads %v", dLink, dVM)
	b.ReportMetric(linkMBs, "agent-channel-file-read-MB/s")
	b.ReportMetric(vmMBs, "sandbox-gateway-MB/s")
	b.ReportMetric(float64((many-one).Milliseconds())/(n*rounds), "sandbox-request-ms")
	if cpuOK {
		mib := n * vmRounds * float64(vmSize) / (1 << 20)
		b.ReportMetric(float64(cpuLink.Milliseconds())/mib, "file-read-qemu-cpu-ms/MiB")
		b.ReportMetric(float64(cpuVM.Milliseconds())/mib, "download-qemu-cpu-ms/MiB")
	}
	benchrec.Record(b, benchrec.Result{Name: "egress_vs_channel", Value: vmMBs, Unit: "MB/s", Baseline: linkMBs})
	// Every byte metered: the downloads and their answers' heads.
	if up, down := e.gw.Bytes(e.sb.ID); down-down0 < int64(b.N*vmRounds*vmSize) {
		b.Errorf("Got(Bytes(%s)) = %d up, %d down; want the %d downloads counted", e.sb.ID, up-up0, down-down0, b.N*vmRounds)
	}
}
