package web_test

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/replicas"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/terminal/terminaltest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/forward"
	"github.com/stockade-dev/stockade/web/forward/forwardtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// replicaPair is two apps on one database, a and b, that know each other
// through a test directory of channel owners.
type replicaPair struct {
	a, b *webtest.Env
	dir  *forwardtest.Directory
}

func newReplicas(t *testing.T) *replicaPair {
	return newReplicasWith(t, dbtest.SQLite(t), webtest.Options{})
}

// newReplicasWith is newReplicas on db with b built from bOpts (its
// services: the channels it owns); a skips the OpenAPI check when b does.
func newReplicasWith(t testing.TB, db *gorm.DB, bOpts webtest.Options) *replicaPair {
	t.Helper()
	dir := forwardtest.NewDirectory()
	bOpts.DB, bOpts.Owners = db, dir.Replica("b")
	r := &replicaPair{dir: dir,
		a: webtest.New(t, webtest.Options{DB: db, Owners: dir.Replica("a"), NoOpenAPICheck: bOpts.NoOpenAPICheck, PreviewDomain: bOpts.PreviewDomain}),
		b: webtest.New(t, bOpts)}
	dir.SetURL("a", r.a.URL)
	dir.SetURL("b", r.b.URL)
	return r
}

// placed records a running sandbox of tenant on vmID.
func placed(t *testing.T, env *webtest.Env, tenantID, vmID string) sandbox.Sandbox {
	t.Helper()
	sb := sandboxtest.Record(t, env.DB, tenantID, "test")
	if err := env.DB.Model(&sandbox.Sandbox{}).Where("id = ?", sb.ID).Update("vm_id", vmID).Error; err != nil {
		t.Fatal(err)
	}
	sb.VMID = vmID
	return sb
}

// metric is the value of the sample of name whose labels include every
// one of labels (`route="/x"`), 0 when there is none, from env's /metrics.
func metric(t *testing.T, env *webtest.Env, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(env.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

const execRoute = `route="/api/v1/sandboxes/:id/exec"`

// TestForwardInProcess: a channel request at the replica that does not own
// the sandbox's VM is served by the owner; the non-owner still refuses on
// its own, without forwarding, a caller without the permission and another
// tenant's sandbox (404); a signature header from a client is refused by
// both; no owner (adoption pending) or an owner that does not answer is a
// 503 problem with Retry-After.
func TestForwardInProcess(t *testing.T) {
	r := newReplicas(t)
	t1, t2 := r.a.Tenant(t, "fwd-one"), r.a.Tenant(t, "fwd-two")
	onB := placed(t, r.a, t1.ID, "vm-b")
	onA := placed(t, r.a, t1.ID, "vm-a")
	otherOnB := placed(t, r.a, t2.ID, "vm-b2")
	r.dir.Own("vm-b", "b")
	r.dir.Own("vm-b2", "b")
	r.dir.Own("vm-a", "a")
	dev := r.a.WithToken(r.a.Token(t, t1, tenants.RoleDeveloper))
	auditor := r.a.WithToken(r.a.Token(t, t1, tenants.RoleAuditor))
	exec := `{"cmd":["true"]}`

	type counts struct{ forwarded, atB float64 }
	now := func() counts {
		return counts{metric(t, r.a, "stockade_forwards_total", execRoute, `result="ok"`),
			metric(t, r.b, "stockade_http_requests_total", execRoute)}
	}
	for _, tc := range []struct {
		name    string
		client  *webtest.Client
		sandbox string
		hdr     []string
		status  int // 0: whatever the owner answers
		forward bool
	}{
		{name: "own tenant, owner b", client: dev, sandbox: onB.ID, forward: true},
		{name: "own tenant, owner a (served here)", client: dev, sandbox: onA.ID},
		{name: "another tenant's sandbox", client: dev, sandbox: otherOnB.ID, status: http.StatusNotFound},
		{name: "no such sandbox", client: dev, sandbox: "nope", status: http.StatusNotFound},
		{name: "a role without sandboxes.write", client: auditor, sandbox: onB.ID, status: http.StatusForbidden},
		{name: "anonymous", client: r.a.Anonymous(), sandbox: onB.ID, status: http.StatusForbidden}, // CSRF: no token, no session,
		{name: "a signature sent by the client", client: dev, sandbox: onB.ID, status: http.StatusForbidden,
			hdr: []string{forward.Header, "v1 b " + strconv.FormatInt(time.Now().Unix(), 10) + " 127.0.0.1:1 AAAA"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := now()
			status, body, hdr := tc.client.Request(t, http.MethodPost, "/api/v1/sandboxes/"+tc.sandbox+"/exec", "application/json",
				strings.NewReader(exec), tc.hdr...)
			if tc.status != 0 && status != tc.status {
				t.Errorf("Got(status) = %d %s; want %d", status, body, tc.status)
			}
			for _, h := range []string{"Content-Security-Policy", "X-Request-Id", "Cache-Control"} {
				if n := len(hdr.Values(h)); n != 1 {
					t.Errorf("Got(%s headers) = %d %q; want one (the owner's, not doubled by the forwarding replica)", h, n, hdr.Values(h))
				}
			}
			after := now()
			wantDelta := 0.0
			if tc.forward {
				wantDelta = 1
			}
			if d := after.forwarded - before.forwarded; d != wantDelta {
				t.Errorf("Got(forwards counted at a) = +%v; want +%v", d, wantDelta)
			}
			if d := after.atB - before.atB; d != wantDelta {
				t.Errorf("Got(exec requests b served) = +%v; want +%v", d, wantDelta)
			}
		})
	}

	// b, asked directly with a forged signature, refuses it too.
	bDev := r.b.WithToken(dev.Bearer)
	status, body, _ := bDev.Request(t, http.MethodPost, "/api/v1/sandboxes/"+onB.ID+"/exec", "application/json", strings.NewReader(exec),
		forward.Header, "v1 a "+strconv.FormatInt(time.Now().Unix(), 10)+" 127.0.0.1:1 AAAA")
	if status != http.StatusForbidden || !strings.Contains(body, forward.Header) {
		t.Errorf("Got(forged signature at b) = %d %s; want 403 naming %s", status, body, forward.Header)
	}
	// On a route that forwards nothing as well.
	if status, body, _ := bDev.Request(t, http.MethodGet, "/api/v1/me", "", nil, forward.Header, "v1 a 1 1.2.3.4:5 AAAA"); status != http.StatusForbidden {
		t.Errorf("Got(forged signature on /api/v1/me) = %d %s; want 403", status, body)
	}

	// The protocol endpoints outside the table: an MCP tool call and an E2B
	// control-plane request on b's sandbox are b's; another tenant's
	// sandbox is answered at a, not forwarded; a forged signature is refused.
	mcpCall := func(sandboxID string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"exec","arguments":{"sandbox_id":"` + sandboxID + `","cmd":["true"]}}}`
	}
	for _, tc := range []struct {
		name, method, path, body, route, atB string
		hdr                                  []string
		forward                              bool
	}{
		{name: "MCP tool call", method: http.MethodPost, path: "/mcp", body: mcpCall(onB.ID), route: `route="/mcp"`, atB: `route="/mcp"`, forward: true,
			hdr: []string{"Accept", "application/json, text/event-stream"}},
		{name: "MCP tool call on another tenant's sandbox", method: http.MethodPost, path: "/mcp", body: mcpCall(otherOnB.ID), route: `route="/mcp"`, atB: `route="/mcp"`,
			hdr: []string{"Accept", "application/json, text/event-stream"}},
		{name: "E2B sandbox", method: http.MethodGet, path: "/e2b/sandboxes/" + onB.ID, route: `route="/e2b/sandboxes/{id}"`, atB: `route="/e2b/*"`, forward: true,
			hdr: []string{"X-API-KEY", dev.Bearer}},
		{name: "E2B sandbox of another tenant", method: http.MethodGet, path: "/e2b/sandboxes/" + otherOnB.ID, route: `route="/e2b/sandboxes/{id}"`, atB: `route="/e2b/*"`,
			hdr: []string{"X-API-KEY", dev.Bearer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			count := func() (float64, float64) {
				return metric(t, r.a, "stockade_forwards_total", tc.route, `result="ok"`), metric(t, r.b, "stockade_http_requests_total", tc.atB)
			}
			f0, b0 := count()
			cl := dev
			if tc.path != "/mcp" {
				cl = r.a.Anonymous()
			}
			status, body, _ := cl.Request(t, tc.method, tc.path, "application/json", strings.NewReader(tc.body), tc.hdr...)
			f1, b1 := count()
			want := 0.0
			if tc.forward {
				want = 1
			}
			if f1-f0 != want || b1-b0 != want {
				t.Errorf("Got(forwarded, served at b) = +%v, +%v (answer %d %.300s); want +%v, +%v", f1-f0, b1-b0, status, body, want, want)
			}
		})
	}
	forged := "v1 a " + strconv.FormatInt(time.Now().Unix(), 10) + " 127.0.0.1:1 AAAA"
	if status, body, _ := bDev.Request(t, http.MethodPost, "/mcp", "application/json", strings.NewReader(mcpCall(onB.ID)),
		"Accept", "application/json, text/event-stream", forward.Header, forged); status != http.StatusForbidden {
		t.Errorf("Got(forged signature on /mcp at b) = %d %.300s; want 403", status, body)
	}
	if status, body, _ := r.b.Anonymous().Request(t, http.MethodGet, "/e2b/sandboxes/"+onB.ID, "", nil, "X-API-KEY", dev.Bearer, forward.Header, forged); status != http.StatusForbidden {
		t.Errorf("Got(forged signature on E2B at b) = %d %.300s; want 403", status, body)
	}
	if status, body, _ := r.b.Anonymous().Request(t, http.MethodGet, "/health", "", nil, "E2b-Sandbox-Id", onB.ID, forward.Header, forged); status != http.StatusForbidden {
		t.Errorf("Got(forged signature on envd at b) = %d %.300s; want 403", status, body)
	}

	t.Run("no owner", func(t *testing.T) {
		r.dir.Own("vm-b", "")
		defer r.dir.Own("vm-b", "b")
		status, body, hdr := dev.Request(t, http.MethodPost, "/api/v1/sandboxes/"+onB.ID+"/exec", "application/json", strings.NewReader(exec))
		p := webtest.Problem(t, hdr, body)
		if status != http.StatusServiceUnavailable || hdr.Get("Retry-After") != strconv.Itoa(forward.RetryAfter) || p.Status != http.StatusServiceUnavailable {
			t.Errorf("Got(no owner) = %d, Retry-After %q, %s; want a 503 problem with Retry-After %d", status, hdr.Get("Retry-After"), body, forward.RetryAfter)
		}
		if got := metric(t, r.a, "stockade_forwards_total", execRoute, `result="no_owner"`); got < 1 {
			t.Errorf("Got(no_owner forwards) = %v; want counted", got)
		}
	})
	t.Run("owner down", func(t *testing.T) {
		dead := httptest.NewServer(http.NotFoundHandler())
		dead.Close()
		r.dir.SetURL("b", dead.URL)
		defer r.dir.SetURL("b", r.b.URL)
		status, body, hdr := dev.Request(t, http.MethodPost, "/api/v1/sandboxes/"+onB.ID+"/exec", "application/json", strings.NewReader(exec))
		if p := webtest.Problem(t, hdr, body); status != http.StatusServiceUnavailable || p.Status != status || hdr.Get("Retry-After") == "" {
			t.Errorf("Got(owner down) = %d, Retry-After %q, %s; want a 503 problem with Retry-After", status, hdr.Get("Retry-After"), body)
		}
	})
}

// TestForwardTerminal: a terminal WebSocket opened at the replica that does
// not own the sandbox is the owner's terminal (b runs it: its PTYs here are
// local processes); typed input reaches it and its output comes back, and a
// watcher that drops reconnects through the non-owner and replays from its
// offset, missing nothing.
func TestForwardTerminal(t *testing.T) {
	db := dbtest.SQLite(t)
	local := terminaltest.NewLocal(db)
	svc := terminal.New(db, local, terminal.Config{DataDir: t.TempDir(), Shell: []string{"/bin/sh"}, Logger: slog.New(slog.DiscardHandler),
		Env: []string{"PS1=$ ", "TERM=xterm-256color", "ENV="}, CheckInterval: 100 * time.Millisecond})
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	r := newReplicasWith(t, db, webtest.Options{Terminals: svc})
	tn := r.a.Tenant(t, "fwd-term")
	sb := placed(t, r.a, tn.ID, "vm-b")
	r.dir.Own("vm-b", "b")
	token := r.a.Token(t, tn, tenants.RoleDeveloper)
	dial := func(q url.Values) *terminaltest.Conn {
		t.Helper()
		u, err := terminal.SocketURL(r.a.URL, sb.ID, q)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ws, err := terminal.Dial(ctx, u, http.Header{"Authorization": {"Bearer " + token}}, nil)
		if err != nil {
			t.Fatalf("dial the terminal at a: %v", err)
		}
		t.Cleanup(func() { ws.Close() })
		return terminaltest.NewConn(ws, nil)
	}
	const wait = time.Minute
	driver := dial(url.Values{})
	session := driver.Hello(t).Session
	driver.WaitOutput(t, "$ ", wait)
	if n := len(local.PTYs()); n != 1 {
		t.Fatalf("Got(PTYs b runs) = %d; want 1: the terminal is b's", n)
	}
	watcher := dial(url.Values{"session": {session}, "watch": {"1"}})
	watcher.Hello(t)
	driver.Type(t, "echo via-$((40+2))\n")
	watcher.WaitOutput(t, "via-42", wait)

	seen := watcher.Output()
	watcher.WS.Close()
	driver.Type(t, "for i in 1 2 3; do echo gone-$i; done\n")
	driver.WaitOutput(t, "gone-3\r\n", wait)
	back := dial(url.Values{"session": {session}, "watch": {"1"}, "offset": {strconv.Itoa(len(seen))}})
	if h := back.Hello(t); h.Offset == nil || *h.Offset != int64(len(seen)) || h.Missed != 0 {
		t.Fatalf("Got(resumed hello) = %+v; want offset %d, nothing missed", h, len(seen))
	}
	back.WaitOutput(t, "gone-3", wait)
	if got := metric(t, r.a, "stockade_forwards_total", `route="/api/v1/sandboxes/:id/terminal"`, `result="ok"`); got < 1 {
		t.Errorf("Got(terminal forwards counted at a) = %v; want the closed watcher's (a WebSocket counts when it ends)", got)
	}
}

// lateOwners is Owners bound once the replica's URL is known (a registry
// needs it; the test server picks it when it starts).
type lateOwners struct {
	mu sync.Mutex
	o  forward.Owners
}

func (l *lateOwners) set(o forward.Owners) { l.mu.Lock(); l.o = o; l.mu.Unlock() }

func (l *lateOwners) get() forward.Owners { l.mu.Lock(); defer l.mu.Unlock(); return l.o }

func (l *lateOwners) Self() forward.Replica { return l.get().Self() }

func (l *lateOwners) OwnerOf(ctx context.Context, vmID string) (forward.Replica, error) {
	return l.get().OwnerOf(ctx, vmID)
}

// TestForwardRegistry is TestForwardInProcess's forwarding with the real
// replicas registry deciding (the directory's conformance): the channel
// lease of b's VM sends a's request to b, at the internal URL b
// registered; once b let go of its lease (it stopped: adoption pending), a
// answers 503 with Retry-After.
func TestForwardRegistry(t *testing.T) {
	db := dbtest.SQLite(t)
	var la, lb lateOwners
	a := webtest.New(t, webtest.Options{DB: db, Owners: &la})
	b := webtest.New(t, webtest.Options{DB: db, Owners: &lb})
	key := []byte("0123456789abcdef0123456789abcdef")
	ctx := context.Background()
	reg := func(id, url string, l *lateOwners) *replicas.Registry {
		t.Helper()
		r, err := replicas.New(db, replicas.Config{ID: id, InternalURL: url, Key: key, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close(context.Background()) })
		l.set(forward.Registry(r))
		return r
	}
	reg("replica-a", a.URL, &la)
	rb := reg("replica-b", b.URL, &lb)
	tn := a.Tenant(t, "fwd-reg")
	sb := placed(t, a, tn.ID, "vm-reg")
	if err := db.Transaction(func(tx *gorm.DB) error { return rb.ClaimNew(tx, "vm-reg") }); err != nil {
		t.Fatal(err)
	}
	rb.Claimed("vm-reg")
	dev := a.WithToken(a.Token(t, tn, tenants.RoleDeveloper))
	exec := func() (int, string, http.Header) {
		return dev.Request(t, http.MethodPost, "/api/v1/sandboxes/"+sb.ID+"/exec", "application/json", strings.NewReader(`{"cmd":["true"]}`))
	}
	before := metric(t, b, "stockade_http_requests_total", execRoute)
	exec()
	if got := metric(t, b, "stockade_http_requests_total", execRoute) - before; got != 1 {
		t.Errorf("Got(exec requests b served) = +%v; want +1: its lease makes it the owner", got)
	}
	if err := rb.Release(ctx, "vm-reg"); err != nil {
		t.Fatal(err)
	}
	if status, body, hdr := exec(); status != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Errorf("Got(exec with no lease) = %d, Retry-After %q, %s; want 503 with Retry-After", status, hdr.Get("Retry-After"), body)
	}
}
