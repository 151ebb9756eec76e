package egress_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// vmEnv is a tenant with one running busybox sandbox on a real VM whose
// agent session serves egress through a gateway allowed to reach
// 127.0.0.0/8 (the test-only operator allowance), and an upstream HTTP
// server on 127.0.0.1.
type vmEnv struct {
	gw       *egress.Gateway
	store    *egress.Store
	policy   *policyBox
	sbx      *sandbox.Service
	tenantID string
	sb       sandbox.Sandbox
	upPort   string
	tlsPort  string // an HTTPS upstream (httptest's CA, for *.example.com)
	actor    audit.Actor
}

func newVMEnv(tb testing.TB) *vmEnv {
	tb.Helper()
	dataDir := sandboxtest.NeedVMs(tb)
	ctx := context.Background()
	db := dbtest.SQLite(tb)
	e := &vmEnv{store: egress.NewStore(db), policy: &policyBox{}, actor: audit.Actor{Kind: audit.ActorSystem, ID: "test"}}
	ten, err := tenants.NewStore(db, nil).CreateTenant(ctx, e.actor, "egress-a", "Egress Tenant A")
	if err != nil {
		tb.Fatal(err)
	}
	e.tenantID = ten.ID
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from upstream %s\n", r.URL.Path)
	}))
	tb.Cleanup(up.Close)
	_, e.upPort, _ = net.SplitHostPort(up.Listener.Addr().String())
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello over tls %s\n", r.URL.Path)
	}))
	tb.Cleanup(secure.Close)
	roots := x509.NewCertPool()
	roots.AddCert(secure.Certificate())
	_, e.tlsPort, _ = net.SplitHostPort(secure.Listener.Addr().String())

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	lo := netip.MustParseAddr("127.0.0.1")
	e.policy.set(egress.Rules{Default: egress.DefaultDeny, Allow: []egress.Rule{{Domain: "allowed.test"}, {Domain: "*.example.com", Ports: []int{443, 8443}},
		{Domain: "secure.example.com"}, {Domain: "metadata.test"}, {Domain: "rebind.test"}}})
	gw := &sandboxtest.LateGateway{}
	var vms *vmpool.Service
	vms, e.sbx = sandboxtest.Start(tb, db, vmpool.Config{DataDir: dataDir, Logger: log, Egress: gw},
		sandbox.Config{SyncInterval: 500 * time.Millisecond, DefaultTemplate: "busybox"})
	e.gw, err = egress.New(egress.Config{
		Policies: e.policy, Store: e.store, Sandboxes: egress.StoredSandboxes(e.sbx.Store()), Logger: log,
		UpstreamRoots: roots,
		AllowCIDRs:    []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver: names{
			"allowed.test":       {lo},
			"denied.test":        {lo},
			"secure.example.com": {lo},
			"metadata.test":      {netip.MustParseAddr("169.254.169.254")},
			"rebind.test":        {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.0.2.2")},
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	gw.Set(e.gw)
	if _, err := vms.SetPool(ctx, e.actor, e.tenantID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, RecycleAfterHours: 24}); err != nil {
		tb.Fatal(err)
	}
	cctx, cancel2 := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel2()
	begin := time.Now()
	e.sb, err = e.sbx.Create(cctx, e.actor, e.tenantID, sandbox.Spec{Template: "busybox", MemoryMiB: 128})
	if err != nil {
		tb.Fatalf("create a sandbox: %v", err)
	}
	tb.Logf("sandbox %s running on vm %s after %v (boot included)", e.sb.ID, e.sb.VMID, time.Since(begin).Round(time.Millisecond))
	return e
}

// sh runs a shell line in the sandbox and returns its exit code and output.
func (e *vmEnv) sh(t *testing.T, line string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return e.shTB(ctx, t, line)
}

func (e *vmEnv) shTB(ctx context.Context, tb testing.TB, line string) (int, string) {
	tb.Helper()
	var out bytes.Buffer
	res, err := e.sbx.Exec(ctx, e.actor, e.tenantID, e.sb.ID, sandbox.ExecRequest{Cmd: []string{"/bin/sh", "-c", line}, TimeoutSeconds: int(time.Until(deadlineOf(ctx)).Seconds())}, &out, &out)
	if err != nil {
		tb.Fatalf("exec %q: %v", line, err)
	}
	return res.ExitCode, out.String()
}

func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Minute)
}

// denied fetches hostport through the proxy with wget, then sends the
// same request to the proxy by hand to show its whole answer.
func denied(hostport string) string {
	return "wget -O - http://" + hostport + "/ 2>&1; printf 'GET http://" + hostport + "/ HTTP/1.0\\r\\n\\r\\n' | nc 127.0.0.1 3128"
}

func TestVMEgress(t *testing.T) {
	if testing.Short() {
		t.Skip("boots VMs")
	}
	e := newVMEnv(t)
	p := e.upPort
	tests := []struct {
		name     string
		line     string
		wantCode int    // 0, or any non-zero as 1; -1: not checked
		want     string // |-separated, each in the output
	}{
		{"proxy env is set", "echo $HTTP_PROXY $https_proxy", 0, "http://127.0.0.1:3128 http://127.0.0.1:3128"},
		{"allowed domain", "wget -q -O - http://allowed.test:" + p + "/hi", 0, "hello from upstream /hi"},
		// busybox wget asks the proxy for https URLs in plain form: the
		// gateway connects upstream over TLS and verifies the server.
		{"allowed domain over https", "wget -q -O - https://secure.example.com:" + e.tlsPort + "/s 2>&1", 0, "hello over tls /s"},
		// wget shows the status; the raw proxy answer shows the rule.
		{"denied domain names the rule", denied("denied.test:" + p), -1, "403 Forbidden|denied: default deny"},
		{"metadata address blocked", denied("metadata.test:80"), -1, "403 Forbidden|denied: blocked: cloud metadata address 169.254.169.254"},
		{"metadata literal blocked", denied("169.254.169.254:80"), -1, "403 Forbidden|denied: default deny"},
		{"rebinding name blocked", denied("rebind.test:" + p), -1, "403 Forbidden|denied: blocked: private address 10.0.2.2"},
		// Without the proxy: the sandbox has no route anywhere, and its
		// 127.0.0.1 is its own.
		{"no direct route to the host", "nc -w 5 10.0.2.2 " + p + " </dev/null 2>&1", 1, "unreachable"},
		{"host loopback not reachable directly", "nc -w 5 127.0.0.1 " + p + " </dev/null 2>&1", 1, "refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out := e.sh(t, tc.line)
			if tc.wantCode >= 0 && (code == 0) != (tc.wantCode == 0) {
				t.Errorf("Got(%s) = exit %d, %q; want exit %d", tc.line, code, out, tc.wantCode)
			}
			for _, want := range strings.Split(tc.want, "|") {
				if !strings.Contains(out, want) {
					t.Errorf("Got(%s) = %q; want %q in it", tc.line, out, want)
				}
			}
		})
	}
	evs, err := e.store.Events(context.Background(), e.tenantID, egress.Filter{SandboxID: e.sb.ID})
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]bool{}
	for _, ev := range evs {
		rules[ev.Decision+" "+ev.Host+" "+ev.Rule] = true
	}
	for _, want := range []string{"allow allowed.test allow allowed.test", "deny denied.test default deny",
		"deny metadata.test blocked: cloud metadata address 169.254.169.254", "deny rebind.test blocked: private address 10.0.2.2"} {
		if !rules[want] {
			t.Errorf("Got(egress events) = %v; want one %q", rules, want)
		}
	}
	if up, down := e.gw.Bytes(e.sb.ID); up == 0 || down == 0 {
		t.Errorf("Got(Bytes(%s)) = %d, %d; want both counted", e.sb.ID, up, down)
	}

	t.Run("policy change reaches the running sandbox", func(t *testing.T) {
		e.policy.set(egress.Rules{Default: egress.DefaultDeny})
		start := time.Now()
		for {
			code, out := e.sh(t, "wget -S -O - http://allowed.test:"+p+"/ 2>&1")
			if code != 0 && strings.Contains(out, "403") {
				t.Logf("denied %v after the change", time.Since(start).Round(time.Millisecond))
				break
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("Got(wget after the policy change) = exit %d %q for 10 s; want 403", code, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}
