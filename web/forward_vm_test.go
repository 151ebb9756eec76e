package web_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/benchrec"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/terminal/terminaltest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestForwardVM: replica b runs the VM (its pools and sandboxes hold the
// agent channel); replica a, on the same database, runs none, so every
// request below works only because a forwards it to b: a command, a file
// uploaded and downloaded back, a process's output streamed (chunked
// NDJSON, followed to its end) and a terminal driven over a WebSocket.
// forwardVM is replica b running a tenant's VM and one sandbox on it,
// replica a on the same database with none.
type forwardVM struct {
	r      *replicaPair
	sbx    *sandbox.Service
	tn     tenants.Tenant
	sb     sandbox.Sandbox
	token  string
	system audit.Actor
}

func newForwardVM(tb testing.TB) *forwardVM {
	tb.Helper()
	dataDir := sandboxtest.NeedVMs(tb)
	ctx := context.Background()
	db := dbtest.SQLite(tb)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	vms, sbx := sandboxtest.Start(tb, db, vmpool.Config{DataDir: dataDir, Logger: log},
		sandbox.Config{SyncInterval: time.Second, SampleInterval: 2 * time.Second})
	// Benchmarks time the product alone, without the harness's check of
	// every answer against the OpenAPI document.
	_, bench := tb.(*testing.B)
	e := &forwardVM{r: newReplicasWith(tb, db, webtest.Options{VMs: vms, Sandboxes: sbx, NoOpenAPICheck: bench, PreviewDomain: previewDomain}), sbx: sbx,
		system: audit.Actor{Kind: audit.ActorSystem, ID: "test"}}
	e.tn = e.r.a.TenantNamed(tb, "fwd-vm", "Forward VM")
	if _, err := vms.SetPool(ctx, e.system, e.tn.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 512, MaxVMs: 1, RecycleAfterHours: 24}); err != nil {
		tb.Fatal(err)
	}
	e.sb = e.create(tb)
	e.token = e.r.a.Token(tb, e.tn, tenants.RoleDeveloper)
	return e
}

// create makes a sandbox on b's VM and makes b the owner of its channel.
func (e *forwardVM) create(tb testing.TB) sandbox.Sandbox {
	tb.Helper()
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sb, err := e.sbx.Create(cctx, e.system, e.tn.ID, sandbox.Spec{MemoryMiB: 128})
	if err != nil {
		tb.Fatalf("create the sandbox: %v", err)
	}
	e.r.dir.Own(sb.VMID, "b")
	return sb
}

func TestForwardVM(t *testing.T) {
	e := newForwardVM(t)
	r, sb, token, ctx := e.r, e.sb, e.token, context.Background()
	dev := r.a.WithToken(token)
	base := "/api/v1/sandboxes/" + sb.ID

	t.Run("exec", func(t *testing.T) {
		var res api.ExecResult
		if s, body := dev.JSON(t, http.MethodPost, base+"/exec", api.ExecRequest{Cmd: []string{"sh", "-c", "echo via-$((6*7))"}}, &res); s != http.StatusOK || res.Stdout != "via-42\n" {
			t.Fatalf("Got(exec at a) = %d %+v; want 200 with via-42: %s", s, res, body)
		}
	})

	t.Run("file upload and download", func(t *testing.T) {
		data := make([]byte, 1<<20)
		if _, err := rand.Read(data); err != nil {
			t.Fatal(err)
		}
		if s, body, _ := dev.Request(t, http.MethodPut, base+"/files?path=/workspace/fwd.bin", "application/octet-stream", bytes.NewReader(data)); s != http.StatusOK {
			t.Fatalf("Got(upload at a) = %d %s; want 200", s, body)
		}
		s, body, _ := dev.Request(t, http.MethodGet, base+"/files?path=/workspace/fwd.bin", "", nil)
		if s != http.StatusOK || !bytes.Equal([]byte(body), data) {
			t.Fatalf("Got(download at a) = %d, %d bytes; want 200 and the 1 MiB uploaded", s, len(body))
		}
	})

	t.Run("process output stream", func(t *testing.T) {
		var p api.Process
		if s, body := dev.JSON(t, http.MethodPost, base+"/processes", api.StartProcess{Cmd: []string{"sh", "-c", "for i in 1 2 3; do echo line-$i; done"}}, &p); s != http.StatusCreated {
			t.Fatalf("Got(start a process at a) = %d %s; want 201", s, body)
		}
		s, body, _ := dev.Request(t, http.MethodGet, base+"/processes/"+strconv.FormatUint(uint64(p.PID), 10)+"/output?follow=1", "", nil)
		if s != http.StatusOK || !strings.Contains(body, "line-3") || !strings.Contains(body, `"type":"status"`) {
			t.Fatalf("Got(output at a) = %d %s; want the three lines and the status", s, body)
		}
	})

	t.Run("terminal", func(t *testing.T) {
		u, err := terminal.SocketURL(r.a.URL, sb.ID, url.Values{})
		if err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		ws, err := terminal.Dial(dctx, u, http.Header{"Authorization": {"Bearer " + token}}, nil)
		if err != nil {
			t.Fatalf("dial the terminal at a: %v", err)
		}
		defer ws.Close()
		c := terminaltest.NewConn(ws, nil)
		c.Hello(t)
		c.Type(t, "echo term-$((1+1))\n")
		c.WaitOutput(t, "term-2", 2*time.Minute)
	})

	t.Run("preview link", func(t *testing.T) {
		// Made through a (forwarded), opened at a: the door resolves the
		// link here and b dials the port (nothing listens on it: b says so).
		var l api.PreviewLink
		if s, body := dev.JSON(t, http.MethodPost, base+"/previews", api.CreatePreviewLink{Port: 8000}, &l); s != http.StatusCreated {
			t.Fatalf("Got(create a preview link at a) = %d %s; want 201", s, body)
		}
		before := metric(t, r.b, "stockade_http_requests_total", `route="/preview/:token/*"`)
		s, body, _ := r.a.Anonymous().Request(t, http.MethodGet, "/preview/"+previewToken(t, l)+"/", "", nil)
		if got := metric(t, r.b, "stockade_http_requests_total", `route="/preview/:token/*"`) - before; got != 1 {
			t.Errorf("Got(preview requests b served) = +%v (a answered %d %.200s); want +1", got, s, body)
		}
	})

	t.Run("preview host", func(t *testing.T) {
		// A whole preview host (<port>-<id>.<preview domain>) asked at a:
		// a sets the link's cookie itself, then forwards the page request
		// to b, which dials the sandbox's server.
		var p api.Process
		server := `$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:8001", Listen => 5, ReuseAddr => 1) or die "listen: $!";
while (my $c = $s->accept) { while (<$c>) { last if /^\r?$/ } print $c "HTTP/1.0 200 OK\r\nContent-Length: 16\r\n\r\npreview-host-ok\n"; close $c }`
		if s, body := dev.JSON(t, http.MethodPost, base+"/processes", api.StartProcess{Cmd: []string{"perl", "-MIO::Socket::INET", "-e", server}}, &p); s != http.StatusCreated {
			t.Fatalf("Got(start a web server at a) = %d %s; want 201", s, body)
		}
		var l api.PreviewLink
		if s, body := dev.JSON(t, http.MethodPost, base+"/previews", api.CreatePreviewLink{Port: 8001}, &l); s != http.StatusCreated {
			t.Fatalf("Got(create a preview link at a) = %d %s; want 201", s, body)
		}
		host := "8001-" + sb.ID + "." + previewDomain
		if !strings.Contains(l.URL, "://"+host+"/") {
			t.Fatalf("Got(link URL) = %s; want one on %s", l.URL, host)
		}
		jar := map[string]string{}
		get := func(path string) (int, string) {
			req, err := http.NewRequest(http.MethodGet, r.a.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = host
			for k, v := range jar {
				req.AddCookie(&http.Cookie{Name: k, Value: v})
			}
			resp, err := (&http.Client{Timeout: time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			for _, c := range resp.Cookies() {
				jar[c.Name] = c.Value
			}
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if s, body := get("/?stockade_preview=" + url.QueryEscape(previewToken(t, l))); s != http.StatusSeeOther || len(jar) == 0 {
			t.Fatalf("Got(open the link at a) = %d %.200s, cookies %v; want 303 with the link's cookie", s, body, jar)
		}
		before := metric(t, r.a, "stockade_forwards_total", `route="`+web.PreviewHostRoute+`"`, `result="ok"`)
		deadline := time.Now().Add(2 * time.Minute)
		for {
			s, body := get("/")
			if s == http.StatusOK && strings.Contains(body, "preview-host-ok") {
				break
			}
			if time.Now().After(deadline) {
				_, out, _ := dev.Request(t, http.MethodGet, base+"/processes/"+strconv.FormatUint(uint64(p.PID), 10)+"/output", "", nil)
				t.Fatalf("Got(page at a) = %d %s; want 200 with the sandbox's page (the server's output: %.500s)", s, pageText(body), out)
			}
			time.Sleep(500 * time.Millisecond) // the server is starting
		}
		if got := metric(t, r.a, "stockade_forwards_total", `route="`+web.PreviewHostRoute+`"`, `result="ok"`) - before; got < 1 {
			t.Errorf("Got(preview host forwards at a) = +%v; want counted", got)
		}
	})

	for _, route := range []string{"/api/v1/sandboxes/:id/exec", "/api/v1/sandboxes/:id/files", "/api/v1/sandboxes/:id/processes/:pid/output",
		"/preview/:token/*", "/api/v1/sandboxes/:id/previews"} {
		if got := metric(t, r.a, "stockade_forwards_total", `route="`+route+`"`, `result="ok"`); got < 1 {
			t.Errorf("Got(forwards of %s at a) = %v; want counted", route, got)
		}
	}
}

// pageText is a page's text without its markup, for failure messages.
func pageText(page string) string {
	page = regexp.MustCompile(`(?s)<head>.*</head>|<[^>]*>`).ReplaceAllString(page, " ")
	return strings.Join(strings.Fields(page), " ")
}

// previewDomain is the preview domain of the forwarding replicas.
const previewDomain = "preview.test"

// previewToken is the token of l, from its URL on the preview domain.
func previewToken(t *testing.T, l api.PreviewLink) string {
	t.Helper()
	u, err := url.Parse(l.URL)
	if err != nil {
		t.Fatal(err)
	}
	tok := u.Query().Get("stockade_preview")
	if tok == "" {
		t.Fatalf("Got(link URL) = %s; want its token in the query", l.URL)
	}
	return tok
}

// BenchmarkForwardFirstOutput: create -> first output of a command, the
// command streamed (stream=1) through the replica that does not own the
// sandbox's VM against through the owner; the sandbox is created on the
// owner each time. Samples alternate between the two.
func BenchmarkForwardFirstOutput(b *testing.B) {
	e := newForwardVM(b)
	owner, nonOwner := e.r.b.WithToken(e.token), e.r.a.WithToken(e.token)
	// first is create -> first output, and create done -> first output
	// (the part forwarding can add to: create itself varies by seconds).
	first := func(cl *webtest.Client) (time.Duration, time.Duration) {
		b.Helper()
		t0 := time.Now()
		sb := e.create(b)
		t1 := time.Now()
		defer func() { _, _ = e.sbx.Destroy(context.Background(), e.system, e.tn.ID, sb.ID) }()
		req, err := http.NewRequest(http.MethodPost, cl.Base+"/api/v1/sandboxes/"+sb.ID+"/exec?stream=1", strings.NewReader(`{"cmd":["echo","first"]}`))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := cl.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.Contains(sc.Text(), `"stdout"`) {
				return time.Since(t0), time.Since(t1)
			}
		}
		b.Fatalf("exec stream at %s: %d, no stdout event", cl.Base, resp.StatusCode)
		return 0, 0
	}
	first(nonOwner) // warm both paths
	first(owner)
	const samples = 5
	var ours, theirs, oursExec, theirsExec []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < samples; j++ {
			n, ne := first(nonOwner)
			o, oe := first(owner)
			ours, oursExec = append(ours, n), append(oursExec, ne)
			theirs, theirsExec = append(theirs, o), append(theirsExec, oe)
		}
	}
	b.StopTimer()
	median := func(d []time.Duration) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	n50, o50 := median(ours), median(theirs)
	b.ReportMetric(float64(n50.Microseconds())/1000, "nonowner-p50-ms")
	b.ReportMetric(float64(o50.Microseconds())/1000, "owner-p50-ms")
	benchrec.Record(b, benchrec.Result{Name: "nonowner_first_output_vs_owner", Value: float64(n50.Microseconds()) / 1000, Unit: "ms", Baseline: float64(o50.Microseconds()) / 1000})
	ne50, oe50 := median(oursExec), median(theirsExec)
	b.ReportMetric(float64(ne50.Microseconds())/1000, "nonowner-exec-p50-ms")
	b.ReportMetric(float64(oe50.Microseconds())/1000, "owner-exec-p50-ms")
	benchrec.Record(b, benchrec.Result{Name: "nonowner_exec_first_output_vs_owner", Value: float64(ne50.Microseconds()) / 1000, Unit: "ms", Baseline: float64(oe50.Microseconds()) / 1000})
	b.Logf("create -> first output over %d samples each: through the non-owner p50 %v, through the owner p50 %v; ratio %.3f (target <= 1.1); "+
		"from the created sandbox to its first output: %v against %v, ratio %.3f",
		len(ours), n50, o50, float64(n50)/float64(o50), ne50, oe50, float64(ne50)/float64(oe50))
}
