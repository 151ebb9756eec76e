package egress_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

// debianVM is a tenant with one running sandbox from the debian template
// (real curl and python3) on a real VM. Its gateway may reach 127.0.0.0/8
// (the test-only operator allowance) and intercepts the host a secret is
// scoped to, so the sandbox trusts the tenant CA. Upstreams on 127.0.0.1:
// plain HTTP, and HTTPS with httptest's CA (a CA certificate for
// example.com and *.example.com).
type debianVM struct {
	gw       *egress.Gateway
	store    *egress.Store
	sbx      *sandbox.Service
	tenant   string
	sb       sandbox.Sandbox
	actor    audit.Actor
	upPort   string
	tlsPort  string
	tlsCA    []byte       // PEM of the HTTPS upstream's certificate
	realSeen atomic.Int32 // upstream requests that carried the real token
	db       *gorm.DB
}

func newDebianVM(t *testing.T) *debianVM {
	t.Helper()
	begin := time.Now()
	dataDir := sandboxtest.NeedVMs(t, image.TemplateDebian)
	t.Logf("guest image with the debian template ready after %v", time.Since(begin).Round(time.Millisecond))
	ctx := context.Background()
	db := dbtest.SQLite(t)
	e := &debianVM{store: egress.NewStore(db), actor: audit.Actor{Kind: audit.ActorSystem, ID: "test"}, db: db}
	ts := tenants.NewStore(db, nil)
	ten, err := ts.CreateTenant(ctx, e.actor, "egress-debian", "Egress Debian")
	if err != nil {
		t.Fatal(err)
	}
	e.tenant = ten.ID
	sec, err := secrets.New(db, testRoot, secrets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sec.Create(ctx, e.actor, e.tenant, secrets.NewSecret{Name: "GH_TOKEN", Value: realToken, Hosts: []string{"secure.example.com"}}); err != nil {
		t.Fatal(err)
	}

	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from upstream %s\n", r.URL.Path)
	}))
	t.Cleanup(up.Close)
	_, e.upPort, _ = net.SplitHostPort(up.Listener.Addr().String())
	secure := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		if strings.Contains(auth, realToken) {
			e.realSeen.Add(1)
		}
		fmt.Fprintf(w, "hello over tls %s host=%s auth=%s\n", r.URL.Path, r.Host, classify(auth))
	}))
	secure.Config.ErrorLog = log.New(io.Discard, "", 0) // a refused handshake is the point of one case
	secure.StartTLS()
	t.Cleanup(secure.Close)
	_, e.tlsPort, _ = net.SplitHostPort(secure.Listener.Addr().String())
	e.tlsCA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw})
	roots := secure.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	gw := &sandboxtest.LateGateway{}
	var vms *vmpool.Service
	vms, e.sbx = sandboxtest.Start(t, db, vmpool.Config{DataDir: dataDir, Logger: logger, Egress: gw},
		sandbox.Config{SyncInterval: 500 * time.Millisecond, DefaultTemplate: image.TemplateDebian, Credentials: sec})
	pol := &policyBox{}
	pol.set(egress.Rules{Default: egress.DefaultDeny, Allow: []egress.Rule{{Domain: "allowed.test"}, {Domain: "*.example.com"}}})
	lo := netip.MustParseAddr("127.0.0.1")
	e.gw, err = egress.New(egress.Config{Policies: pol, Store: e.store, Sandboxes: egress.StoredSandboxes(e.sbx.Store()),
		Swapper: sec, UpstreamRoots: roots, Logger: logger, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver: names{"allowed.test": {lo}, "denied.test": {lo}, "secure.example.com": {lo}, "tunnel.example.com": {lo}}})
	if err != nil {
		t.Fatal(err)
	}
	gw.Set(e.gw)
	if _, err := vms.SetPool(ctx, e.actor, e.tenant, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel2 := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel2()
	begin = time.Now()
	if e.sb, err = e.sbx.Create(cctx, e.actor, e.tenant, sandbox.Spec{Template: image.TemplateDebian, MemoryMiB: 256}); err != nil {
		t.Fatalf("create a debian sandbox: %v", err)
	}
	t.Logf("debian sandbox %s running on vm %s after %v (boot included)", e.sb.ID, e.sb.VMID, time.Since(begin).Round(time.Millisecond))
	return e
}

func (e *debianVM) sh(t *testing.T, line string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	res, err := e.sbx.Exec(ctx, e.actor, e.tenant, e.sb.ID, sandbox.ExecRequest{Cmd: []string{"/bin/sh", "-c", line}, TimeoutSeconds: 80}, &out, &out)
	if err != nil {
		t.Fatalf("exec %q: %v", line, err)
	}
	return res.ExitCode, out.String()
}

// pyGet fetches a URL with python3's urllib, which takes the proxy from
// the environment and the CA from SSL_CERT_FILE or the system store.
func pyGet(url string) string {
	return `python3 -c 'import sys, urllib.request as u; sys.stdout.write(u.urlopen(sys.argv[1], timeout=60).read().decode())' ` + url + ` 2>&1`
}

// TestVMEgressCurl is the acceptance test with real clients: in a debian
// sandbox on a real VM, curl and python3 reach an allowed domain through
// the proxy over HTTP and over CONNECT (intercepted with the tenant CA the
// sandbox trusts, or tunnelled to an upstream it is given the CA of); a
// denied domain fails with curl's proxy error and is logged as denied.
func TestVMEgressCurl(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	e := newDebianVM(t)
	ctx := context.Background()
	if _, err := e.sbx.WriteFile(ctx, e.actor, e.tenant, e.sb.ID, "/workspace/upstream-ca.pem", bytes.NewReader(e.tlsCA), 0o644); err != nil {
		t.Fatalf("upload the upstream CA: %v", err)
	}
	p, tp := e.upPort, e.tlsPort
	tests := []struct {
		name     string
		line     string
		wantCode int    // the exit code; -1: any non-zero
		want     string // |-separated, each in the output
	}{
		{"debian tools", "curl --version | head -1; python3 --version; echo $http_proxy $HTTPS_PROXY", 0,
			"curl |Python 3|http://127.0.0.1:3128 http://127.0.0.1:3128"},
		{"curl allowed domain over http", "curl -sS http://allowed.test:" + p + "/hi 2>&1", 0, "hello from upstream /hi"},
		// Intercepted (a secret is scoped to the host): the gateway
		// answers with a tenant-CA leaf the sandbox trusts through its
		// system store; the upstream gets the real token.
		{"curl allowed domain over https, tenant CA", "curl -sS -H \"Authorization: Bearer $GH_TOKEN\" https://secure.example.com:" + tp + "/s 2>&1", 0,
			"hello over tls /s host=secure.example.com:" + tp + " auth=real"},
		{"tenant CA in the system store alone", "env -u SSL_CERT_FILE -u CURL_CA_BUNDLE curl -sS https://secure.example.com:" + tp + "/sys 2>&1", 0,
			"hello over tls /sys"},
		// Not intercepted: a plain CONNECT tunnel, the sandbox verifies
		// the upstream with the CA it is given.
		{"curl allowed domain over https, tunnel", "curl -sS --cacert /workspace/upstream-ca.pem https://tunnel.example.com:" + tp + "/t 2>&1", 0,
			"hello over tls /t host=tunnel.example.com:" + tp + " auth=none"},
		{"tunnel: not intercepted, so no tenant CA leaf", "curl -sS https://tunnel.example.com:" + tp + "/t 2>&1", 60,
			"certificate"},
		{"python urllib over http", pyGet("http://allowed.test:" + p + "/py"), 0, "hello from upstream /py"},
		{"python urllib over https", pyGet("https://secure.example.com:" + tp + "/py"), 0, "hello over tls /py host=secure.example.com:" + tp},
		{"curl denied domain over https", "curl -sS https://denied.test:" + p + "/ 2>&1", 56, "CONNECT tunnel failed, response 403"},
		{"curl denied domain over http", "curl -sS -w 'code=%{http_code}' http://denied.test:" + p + "/ 2>&1", 0,
			"stockade egress: GET denied.test:" + p + " denied: default deny|code=403"},
		{"no direct route", "curl -sS --noproxy '*' --connect-timeout 5 http://10.0.2.2:" + p + "/ 2>&1", 7, "connect"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, out := e.sh(t, tc.line)
			t.Logf("%s: exit %d in %v", tc.line, code, time.Since(start).Round(time.Millisecond))
			if (tc.wantCode >= 0 && code != tc.wantCode) || (tc.wantCode < 0 && code == 0) {
				t.Errorf("Got(%s) = exit %d, %q; want exit %d", tc.line, code, out, tc.wantCode)
			}
			for _, want := range strings.Split(tc.want, "|") {
				if !strings.Contains(out, want) {
					t.Errorf("Got(%s) = %q; want %q in it", tc.line, out, want)
				}
			}
			if strings.Contains(out, realToken) {
				t.Errorf("Got(%s) output holds the real token", tc.line)
			}
		})
	}

	// Events are recorded as connections end: wait a little for the last.
	want := []string{"allow allowed.test allow allowed.test false", "allow secure.example.com allow *.example.com true",
		"allow tunnel.example.com allow *.example.com false", "deny denied.test default deny false"}
	deadline := time.Now().Add(5 * time.Second)
	for {
		evs, err := e.store.Events(ctx, e.tenant, egress.Filter{SandboxID: e.sb.ID})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, ev := range evs {
			got[fmt.Sprintf("%s %s %s %v", ev.Decision, ev.Host, ev.Rule, ev.Intercepted)] = true
		}
		missing := []string{}
		for _, w := range want {
			if !got[w] {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("Got(egress events) = %v; want %q among them", got, missing)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := e.realSeen.Load(); n != 1 {
		t.Errorf("Got(upstream requests with the real token) = %d; want 1 (the intercepted curl's)", n)
	}
	assertNowhere(t, e.db)
}
