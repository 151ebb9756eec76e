package terminal_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/benchrec"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/terminal/terminaltest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// watchersEnv, when set, makes the test binary a load generator for
// BenchmarkWatchers: it connects that many watchers (JSON watcherSpec) and
// reads until its stdin closes, so that the server's CPU is measured
// without its watchers in the same process.
const watchersEnv = "TERMINAL_BENCH_WATCHERS"

func TestMain(m *testing.M) {
	if spec := os.Getenv(watchersEnv); spec != "" {
		os.Exit(runWatchers(spec))
	}
	os.Exit(m.Run())
}

// markers are the keys the echo probes type: none appears in the busy
// output, so the first one seen after typing it is its echo.
const markers = "~@#%^&*+=_"

// samples is how many keystrokes a probe times; TERMINAL_BENCH_KEYS
// overrides it.
func samples() int {
	if n, err := strconv.Atoi(os.Getenv("TERMINAL_BENCH_KEYS")); err == nil && n > 0 {
		return n
	}
	return 200
}

// localEnv is the web app with terminals on this machine's
// pseudo-terminals: the same handler, hub and WebSocket code as on VMs,
// without the VM hop.
type localEnv struct {
	web   *webtest.Env
	terms *terminal.Service
	a     tenants.Tenant
	sb    string
	dev   string
	aud   string
}

func newLocalEnv(tb testing.TB) *localEnv {
	tb.Helper()
	db := dbtest.SQLite(tb)
	terms := terminal.New(db, terminaltest.NewLocal(db), terminal.Config{DataDir: tb.TempDir(), Logger: slog.New(slog.DiscardHandler),
		Env: []string{"TERM=xterm-256color", "PS1=$ ", "ENV="}})
	e := &localEnv{terms: terms, web: webtest.New(tb, webtest.Options{DB: db, Terminals: terms})}
	e.a = e.web.TenantNamed(tb, "bench", "Bench")
	e.sb = sandboxtest.Record(tb, db, e.a.ID, "bench@bench.test").ID
	e.dev, e.aud = e.web.Token(tb, e.a, tenants.RoleDeveloper), e.web.Token(tb, e.a, tenants.RoleAuditor)
	return e
}

// probe is a terminal connection that notices the markers it receives.
type probe struct {
	conn  *terminaltest.Conn
	marks chan byte
}

func openProbe(tb testing.TB, base, sandboxID, token string, q url.Values) *probe {
	tb.Helper()
	u, err := terminal.SocketURL(base, sandboxID, q)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, err := terminal.Dial(ctx, u, http.Header{"Authorization": {"Bearer " + token}}, nil)
	if err != nil {
		tb.Fatalf("open the terminal: %v", err)
	}
	tb.Cleanup(func() { ws.Close() })
	p := &probe{marks: make(chan byte, 1024)}
	p.conn = terminaltest.NewConn(ws, func(b []byte) {
		for _, c := range b {
			if strings.IndexByte(markers, c) >= 0 {
				select {
				case p.marks <- c:
				default:
				}
			}
		}
	})
	p.conn.Hello(tb)
	return p
}

// settle lets the start-up output pass and forgets the markers seen so far.
func (p *probe) settle() {
	time.Sleep(300 * time.Millisecond)
	for len(p.marks) > 0 {
		<-p.marks
	}
}

// echoes types n markers, one every gap, and times each until its echo
// comes back.
func (p *probe) echoes(tb testing.TB, n int, gap time.Duration) []time.Duration {
	tb.Helper()
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		m := markers[i%len(markers)]
		begin := time.Now()
		p.conn.Type(tb, string(m))
		timeout := time.After(30 * time.Second)
	wait:
		for {
			select {
			case c := <-p.marks:
				if c == m {
					out = append(out, time.Since(begin))
					break wait
				}
			case <-timeout:
				tb.Fatalf("no echo of keystroke %d within 30s (output ends %q)", i, tail(p.conn.Output(), 80))
			}
		}
		time.Sleep(gap)
	}
	return out
}

func tail(b []byte, n int) []byte { return b[max(0, len(b)-n):] }

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// cat is the probed process: the terminal's own line discipline echoes
// what is typed, as it does for a shell at its prompt.
var cat = url.Values{"cmd": {"cat"}}

// BenchmarkKeystrokeEcho: keystroke echo latency through the whole path
// (WebSocket client -> server -> hub -> the VM's agent -> a PTY of the
// sandbox's devpts -> back) against the same WebSocket, handler and hub
// code on a local PTY, measured in the same run. Reports p50 and p95 of
// both and their ratios.
func BenchmarkKeystrokeEcho(b *testing.B) {
	vm := newVMEnv(b)
	local := newLocalEnv(b)
	n := samples()
	var vmLat, localLat, pings []time.Duration
	agent, err := vm.vms.Agent(context.Background(), vm.a.ID, vm.sb.VMID)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		vp := openProbe(b, vm.web.URL, vm.sb.ID, vm.dev, cat)
		lp := openProbe(b, local.web.URL, local.sb, local.dev, cat)
		vp.settle()
		lp.settle()
		// Interleaved in runs of echoBatch, so that both see the same
		// machine load.
		for k := 0; k < n; k += echoBatch {
			vmLat = append(vmLat, vp.echoes(b, min(echoBatch, n-k), 20*time.Millisecond)...)
			localLat = append(localLat, lp.echoes(b, min(echoBatch, n-k), 20*time.Millisecond)...)
			pings = append(pings, agentPings(b, agent, min(echoBatch, n-k), 20*time.Millisecond)...)
		}
	}
	b.StopTimer()
	v50, v95, l50, l95 := percentile(vmLat, .5), percentile(vmLat, .95), percentile(localLat, .5), percentile(localLat, .95)
	b.ReportMetric(ms(v50), "vm-p50-ms")
	b.ReportMetric(ms(v95), "vm-p95-ms")
	b.ReportMetric(ms(l50), "local-p50-ms")
	b.ReportMetric(ms(l95), "local-p95-ms")
	b.ReportMetric(ms(percentile(pings, .5)), "ping-p50-ms")
	b.ReportMetric(float64(v50)/float64(l50), "p50-ratio")
	b.ReportMetric(float64(v95)/float64(l95), "p95-ratio")
	benchrec.Record(b, benchrec.Result{Name: "terminal_echo_added_ms", Value: ms(v50) - ms(l50), Unit: "ms"})
	b.Logf("keystroke echo, %d keys each: VM p50 %v p95 %v; local PTY p50 %v p95 %v; added p50 %.2f ms; agent ping p50 %v",
		len(vmLat), v50, v95, l50, l95, ms(v50)-ms(l50), percentile(pings, .5))
}

// agentPings times n agent-channel round trips (ping), one every gap: the
// floor under the VM's echo.
func agentPings(b *testing.B, c *agentproto.Client, n int, gap time.Duration) []time.Duration {
	b.Helper()
	out := make([]time.Duration, 0, n)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		d, err := c.Ping(ctx)
		cancel()
		if err != nil {
			b.Fatalf("ping the agent: %v", err)
		}
		out = append(out, d)
		time.Sleep(gap)
	}
	return out
}

// echoBatch is how many keystrokes BenchmarkKeystrokeEcho times on one
// terminal before it turns to the other.
const echoBatch = 10

// busy prints hundreds of lines a second, a build log's pace: a session
// with steady output.
var busy = url.Values{"cmd": {"sh", "-c", `i=0; while :; do i=$((i+1)); for j in 0 1 2 3 4 5 6 7 8 9; do ` +
	`echo "tick $i.$j ......................................................................"; done; sleep 0.01; done`}}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// phase is one measured window of BenchmarkWatchers.
type phase struct {
	lat      []time.Duration
	cpu      float64 // server CPU, % of one core
	outRate  float64 // terminal output, KiB/s
	duration time.Duration
}

func measure(b *testing.B, e *localEnv, p *probe, session string, n int) phase {
	b.Helper()
	st0, _ := e.terms.LiveState(e.a.ID, session)
	p.settle()
	c0, t0 := cpuTime(), time.Now()
	lat := p.echoes(b, n, 20*time.Millisecond)
	c1, d := cpuTime(), time.Since(t0)
	st1, _ := e.terms.LiveState(e.a.ID, session)
	return phase{lat: lat, cpu: 100 * float64(c1-c0) / float64(d), outRate: float64(st1.Output-st0.Output) / 1024 / d.Seconds(), duration: d}
}

// BenchmarkWatchers: one busy session (steady output, a local PTY) with no
// watchers, then with 200 connected from another process (so that the CPU
// measured is the server's): the driver's keystroke echo latency and the
// server's CPU in each, and what the watchers added.
func BenchmarkWatchers(b *testing.B) {
	const watchers = 200
	e := newLocalEnv(b)
	n := samples()
	for i := 0; i < b.N; i++ {
		driver := openProbe(b, e.web.URL, e.sb, e.dev, busy)
		session := driver.conn.Hello(b).Session
		base := measure(b, e, driver, session, n)

		spec, _ := json.Marshal(watcherSpec{URL: e.web.URL, Sandbox: e.sb, Session: session, Token: e.aud, N: watchers})
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), watchersEnv+"="+string(spec))
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		if !lines.Scan() || lines.Text() != "ready" {
			b.Fatalf("Got(watchers) = %q; want ready", lines.Text())
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if st, _ := e.terms.LiveState(e.a.ID, session); len(st.Watchers) >= watchers {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("Got(watchers on the session) < %d after 30s", watchers)
			}
		}
		loaded := measure(b, e, driver, session, n)
		st, _ := e.terms.LiveState(e.a.ID, session)
		stdin.Close()
		var res watcherResult
		if lines.Scan() {
			_ = json.Unmarshal(lines.Bytes(), &res)
		}
		cmd.Wait()
		b.StopTimer()

		b50, b95 := percentile(base.lat, .5), percentile(base.lat, .95)
		w50, w95 := percentile(loaded.lat, .5), percentile(loaded.lat, .95)
		b.ReportMetric(ms(b50), "alone-p50-ms")
		b.ReportMetric(ms(b95), "alone-p95-ms")
		b.ReportMetric(ms(w50), "200w-p50-ms")
		b.ReportMetric(ms(w95), "200w-p95-ms")
		b.ReportMetric(ms(w50-b50), "added-p50-ms")
		b.ReportMetric(ms(w95-b95), "added-p95-ms")
		b.ReportMetric(base.cpu, "alone-cpu-%")
		b.ReportMetric(loaded.cpu, "200w-cpu-%")
		b.ReportMetric(loaded.cpu-base.cpu, "added-cpu-%")
		b.ReportMetric(loaded.outRate, "output-KiB/s")
		b.ReportMetric(float64(watchers-len(st.Watchers)), "watchers-cut")
		b.Logf("busy session, %.1f KiB/s of output: alone p50 %v p95 %v, server CPU %.1f%%; with %d watchers p50 %v p95 %v, server CPU %.1f%%; "+
			"watchers still connected %d, each received %d-%d bytes, %d connections closed early",
			loaded.outRate, b50, b95, base.cpu, watchers, w50, w95, loaded.cpu, len(st.Watchers), res.MinBytes, res.MaxBytes, res.Closed)
	}
}

type watcherSpec struct {
	URL, Sandbox, Session, Token string
	N                            int
}

type watcherResult struct {
	MinBytes, MaxBytes int64
	Closed             int
}

// runWatchers is the load generator's main: it connects the watchers,
// says "ready", reads until stdin closes, then reports what they got.
func runWatchers(specJSON string) int {
	var spec watcherSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "watchers:", err)
		return 2
	}
	u, err := terminal.SocketURL(spec.URL, spec.Sandbox, url.Values{"session": {spec.Session}, "watch": {"1"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "watchers:", err)
		return 2
	}
	var (
		wg     sync.WaitGroup
		closed atomic.Int64
		counts = make([]atomic.Int64, spec.N)
	)
	conns := make(chan io.Closer, spec.N)
	for i := 0; i < spec.N; i++ {
		ws, err := terminal.Dial(context.Background(), u, http.Header{"Authorization": {"Bearer " + spec.Token}}, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, "watchers: connect:", err)
			return 1
		}
		conns <- ws
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, b, err := ws.ReadMessage()
				if err != nil {
					closed.Add(1)
					return
				}
				counts[i].Add(int64(len(b)))
			}
		}()
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	counted := closed.Load()
	close(conns)
	for c := range conns {
		c.Close()
	}
	wg.Wait()
	res := watcherResult{MinBytes: -1, Closed: int(counted)}
	for i := range counts {
		n := counts[i].Load()
		if res.MinBytes < 0 || n < res.MinBytes {
			res.MinBytes = n
		}
		res.MaxBytes = max(res.MaxBytes, n)
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	return 0
}
