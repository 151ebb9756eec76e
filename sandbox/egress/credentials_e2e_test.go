package egress_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

// The secrets store is the gateway's credential broker.
var _ egress.Swapper = (*secrets.Store)(nil)

// realToken is the secret: it must reach the upstream and nothing else.
const realToken = "ghp_RealUpstreamToken_7f3a9c1e5b2d4068"

var testRoot = []byte("credentials-e2e-root-key-32-bytes!!")

// upstream is an HTTPS server on 127.0.0.1 with a certificate from its own
// test CA (the gateway trusts that CA as its upstream roots). It records
// what each request carried and answers without ever echoing it.
type upstream struct {
	srv   *http.Server
	port  string
	roots *x509.CertPool
	mu    sync.Mutex
	seen  []string // "auth|body" of each request
}

func newUpstream(t testing.TB, hosts ...string) *upstream {
	t.Helper()
	tcfg, roots := upstreamTLS(t, hosts...)
	u := &upstream{roots: roots}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, u.port, _ = net.SplitHostPort(ln.Addr().String())
	u.srv = &http.Server{
		ErrorLog:  log.New(io.Discard, "", 0), // refused handshakes are the point of some cases
		TLSConfig: tcfg,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			auth := r.Header.Get("Authorization")
			u.mu.Lock()
			u.seen = append(u.seen, auth+"|"+string(body))
			u.mu.Unlock()
			if r.URL.Path == "/echo" {
				// An upstream that repeats what it got, gzip-compressed when
				// asked: the gateway must hand back only placeholders.
				out := io.Writer(w)
				if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
					w.Header().Set("Content-Encoding", "gzip")
					zw := gzip.NewWriter(w)
					defer zw.Close()
					out = zw
				}
				fmt.Fprintf(out, "echo auth=%s body=%s\n", auth, body)
				return
			}
			fmt.Fprintf(w, "host=%s auth=%s body=%s\n", r.Host, classify(auth), classify(string(body)))
		}),
	}
	go u.srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { u.srv.Close() })
	return u
}

// upstreamTLS is the server side of a test upstream for hosts: a leaf from
// its own test CA, and that CA as the roots that verify it.
func upstreamTLS(t testing.TB, hosts ...string) (*tls.Config, *x509.CertPool) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstream test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: hosts[0]},
		DNSNames: hosts, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: key}}}, roots
}

// classify says what a request carried without repeating it.
func classify(s string) string {
	switch {
	case s == "":
		return "none"
	case strings.Contains(s, realToken):
		return "real"
	case strings.Contains(s, secrets.PlaceholderPrefix):
		return "placeholder"
	}
	return "other"
}

func (u *upstream) reset() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.seen
	u.seen = nil
	return s
}

// lockedBuffer collects log output from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// assertNowhere fails when the token is in any row of the database (audit
// details, egress events, sandbox records, exec output) or in logs.
func assertNowhere(t *testing.T, db *gorm.DB, logs ...string) {
	t.Helper()
	var tables []string
	if err := db.Raw("SELECT name FROM sqlite_master WHERE type = 'table'").Scan(&tables).Error; err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		rows, err := db.Raw("SELECT * FROM " + table).Rows()
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				var s string
				switch x := v.(type) {
				case []byte:
					s = string(x)
				case string:
					s = x
				}
				if strings.Contains(s, realToken) {
					t.Errorf("Got(%s.%s) contains the real token; want it only encrypted", table, cols[i])
				}
			}
		}
		rows.Close()
	}
	for i, l := range logs {
		if strings.Contains(l, realToken) {
			t.Errorf("Got(log %d) contains the real token", i)
		}
	}
}

// TestCredentialSwap runs the gateway with the secrets store as its broker
// against an HTTPS upstream on 127.0.0.1: a client trusting only the tenant
// CA sends its placeholder; the upstream gets the real token, only on the
// scoped host, only for this sandbox's placeholder, only until revoked.
func TestCredentialSwap(t *testing.T) {
	ctx := context.Background()
	db := dbtest.SQLite(t)
	actor := audit.Actor{Kind: audit.ActorUser, ID: "u1", Name: "Ada"}
	ten, err := tenants.NewStore(db, nil).CreateTenant(ctx, actor, "cred-a", "Cred A")
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.New(db, testRoot, secrets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sec.Create(ctx, actor, ten.ID, secrets.NewSecret{Name: "GH_TOKEN", Value: realToken, Hosts: []string{"api.secure.test"},
		Inject: []string{secrets.InjectAuthorization, secrets.InjectBody}}); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, "api.secure.test", "other.secure.test")
	logs := &lockedBuffer{}
	pol := &policyBox{}
	pol.set(egress.Rules{Default: egress.DefaultDeny, Allow: []egress.Rule{{Domain: "*.secure.test"}}})
	_, proxy := startGateway(t, ten.ID, egress.Config{Policies: pol, Store: egress.NewStore(db), Swapper: sec, UpstreamRoots: up.roots,
		Logger:   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Resolver: loopback("api.secure.test", "other.secure.test")})
	caPEM, err := sec.CAPEM(ctx, ten.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox's trust: the tenant CA only (as SSL_CERT_FILE gives it).
	tenantRoots := x509.NewCertPool()
	tenantRoots.AppendCertsFromPEM([]byte(caPEM))
	client := func(roots *x509.CertPool) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy}), DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: roots}}}
	}
	mine := sec.Placeholder(ten.ID, "sb-1", "GH_TOKEN")
	other := sec.Placeholder(ten.ID, "sb-2", "GH_TOKEN")
	send := func(roots *x509.CertPool, host, auth, body string) (string, error) {
		req, _ := http.NewRequest(http.MethodPost, "https://"+host+":"+up.port+"/repos", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+auth)
		resp, err := client(roots).Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}

	tests := []struct {
		name  string
		roots *x509.CertPool
		host  string
		auth  string
		body  string
		want  string // the upstream's answer, or "error"
	}{
		{"scoped host gets the real token in header and body", tenantRoots, "api.secure.test", mine, "token=" + mine,
			"host=api.secure.test:" + up.port + " auth=real body=real"},
		{"another sandbox's placeholder is not swapped", tenantRoots, "api.secure.test", other, "",
			"auth=placeholder body=none"},
		// Not scoped: no interception, so the tenant CA is not in play (the
		// client must trust the real upstream) and the placeholder stays.
		{"unscoped host is not intercepted", tenantRoots, "other.secure.test", mine, "", "error"},
		{"unscoped host gets the placeholder", up.roots, "other.secure.test", mine, mine, "auth=placeholder body=placeholder"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up.reset()
			got, err := send(tc.roots, tc.host, tc.auth, tc.body)
			if tc.want == "error" {
				if err == nil {
					t.Fatalf("Got(POST %s) = %q; want a certificate error", tc.host, got)
				}
				return
			}
			if err != nil || !strings.Contains(got, tc.want) {
				t.Errorf("Got(POST %s) = %q, %v; want %q", tc.host, got, err, tc.want)
			}
			if strings.Contains(got, realToken) {
				t.Errorf("Got(answer) contains the real token")
			}
		})
	}

	t.Run("revoked: no more swapping", func(t *testing.T) {
		if err := sec.Revoke(ctx, actor, ten.ID, "GH_TOKEN"); err != nil {
			t.Fatal(err)
		}
		if _, err := send(tenantRoots, "api.secure.test", mine, ""); err == nil {
			t.Errorf("Got(POST trusting the tenant CA after revoke) = ok; want no interception")
		}
		got, err := send(up.roots, "api.secure.test", mine, "")
		if err != nil || !strings.Contains(got, "auth=placeholder") {
			t.Errorf("Got(POST after revoke) = %q, %v; want the placeholder upstream", got, err)
		}
	})

	evs, err := egress.NewStore(db).Events(ctx, ten.ID, egress.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	intercepted := 0
	for _, ev := range evs {
		if ev.Intercepted {
			intercepted++
		}
	}
	if intercepted < 2 {
		t.Errorf("Got(intercepted egress events) = %d of %d; want at least 2", intercepted, len(evs))
	}
	assertNowhere(t, db, logs.String())
}

// credVM is a tenant with a running busybox sandbox on a real VM whose
// sandbox service hands out secret placeholders and the tenant CA, and
// whose gateway swaps them.
type credVM struct {
	gw     *egress.Gateway
	sbx    *sandbox.Service
	sec    *secrets.Store
	db     *gorm.DB
	tenant string
	sb     sandbox.Sandbox
	actor  audit.Actor
	logs   *lockedBuffer
	up     *upstream
}

func newCredVM(t *testing.T) *credVM {
	t.Helper()
	dataDir := sandboxtest.NeedVMs(t)
	ctx := context.Background()
	e := &credVM{db: dbtest.SQLite(t), actor: audit.Actor{Kind: audit.ActorUser, ID: "u1", Name: "Ada"}, logs: &lockedBuffer{}}
	ts := tenants.NewStore(e.db, nil)
	ten, err := ts.CreateTenant(ctx, e.actor, "cred-vm", "Credentials VM")
	if err != nil {
		t.Fatal(err)
	}
	e.tenant = ten.ID
	if e.sec, err = secrets.New(e.db, testRoot, secrets.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sec.Create(ctx, e.actor, e.tenant, secrets.NewSecret{Name: "GH_TOKEN", Value: realToken, Hosts: []string{"api.secure.test"},
		Inject: []string{secrets.InjectAuthorization, secrets.InjectBody}}); err != nil {
		t.Fatal(err)
	}
	e.up = newUpstream(t, "api.secure.test")
	log := slog.New(slog.NewTextHandler(io.MultiWriter(e.logs, os.Stderr), &slog.HandlerOptions{Level: slog.LevelInfo}))
	gw := &sandboxtest.LateGateway{}
	var vms *vmpool.Service
	vms, e.sbx = sandboxtest.Start(t, e.db, vmpool.Config{DataDir: dataDir, Logger: log, Egress: gw},
		sandbox.Config{SyncInterval: 500 * time.Millisecond, DefaultTemplate: "busybox", Credentials: e.sec})
	pol := &policyBox{}
	pol.set(egress.Rules{Default: egress.DefaultDeny, Allow: []egress.Rule{{Domain: "api.secure.test"}}})
	e.gw, err = egress.New(egress.Config{Policies: pol, Store: egress.NewStore(e.db), Sandboxes: egress.StoredSandboxes(e.sbx.Store()),
		Swapper: e.sec, UpstreamRoots: e.up.roots, Logger: log, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver: names{"api.secure.test": {netip.MustParseAddr("127.0.0.1")}}})
	if err != nil {
		t.Fatal(err)
	}
	gw.Set(e.gw)
	if _, err := vms.SetPool(ctx, e.actor, e.tenant, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel2 := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel2()
	begin := time.Now()
	if e.sb, err = e.sbx.Create(cctx, e.actor, e.tenant, sandbox.Spec{Template: "busybox", MemoryMiB: 128}); err != nil {
		t.Fatalf("create a sandbox: %v", err)
	}
	t.Logf("sandbox %s running after %v (boot included)", e.sb.ID, time.Since(begin).Round(time.Millisecond))
	return e
}

func (e *credVM) sh(t *testing.T, line string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	res, err := e.sbx.Exec(ctx, e.actor, e.tenant, e.sb.ID, sandbox.ExecRequest{Cmd: []string{"/bin/sh", "-c", line}}, &out, &out)
	if err != nil {
		t.Fatalf("exec %q: %v", line, err)
	}
	return res.ExitCode, out.String()
}

// httpsGet is a static HTTPS client for the sandbox (the busybox template
// has no curl, and busybox wget neither proxies HTTPS nor checks
// certificates). It uses HTTPS_PROXY and SSL_CERT_FILE as curl would, and
// sends $GH_TOKEN as a bearer token.
const httpsGet = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

func main() {
	req, _ := http.NewRequest("POST", os.Args[1], strings.NewReader("token="+os.Getenv("GH_TOKEN")))
	req.Header.Set("Authorization", "Bearer "+os.Getenv("GH_TOKEN"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("status=%d %s", resp.StatusCode, b)
}
`

func buildHTTPSGet(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(httpsGet), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", "httpsget", "main.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the sandbox's HTTPS client: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "httpsget"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVMCredentials is the acceptance test: inside a real sandbox the env
// holds only the placeholder; an HTTPS request through the proxy reaches
// the upstream with the real token; the token is nowhere in the sandbox
// (env, files), the database (exec records with their output, audit
// details, egress events) or the logs.
func TestVMCredentials(t *testing.T) {
	bin := buildHTTPSGet(t)
	e := newCredVM(t)
	ctx := context.Background()
	ph := e.sec.Placeholder(e.tenant, e.sb.ID, "GH_TOKEN")
	if _, err := e.sbx.WriteFile(ctx, e.actor, e.tenant, e.sb.ID, "/workspace/httpsget", bytes.NewReader(bin), 0o755); err != nil {
		t.Fatalf("upload the HTTPS client: %v", err)
	}
	// The token, split so that no command line holds it whole.
	half := len(realToken) / 2
	find := fmt.Sprintf("a='%s'; b='%s'; ", realToken[:half], realToken[half:])

	tests := []struct {
		name string
		line string
		want string // |-separated, each in the output
		not  string // must not be in the output
	}{
		{"env holds the placeholder", "echo $GH_TOKEN", ph, ""},
		{"CA trusted through SSL_CERT_FILE", "echo $SSL_CERT_FILE; grep -c 'BEGIN CERTIFICATE' /etc/stockade/ca.pem", "1", ""},
		{"upstream gets the real token", "/workspace/httpsget https://api.secure.test:" + e.up.port + "/user",
			"status=200 host=api.secure.test:" + e.up.port + " auth=real body=real", ""},
		// Go's client asks for gzip and decompresses: the echo comes back
		// gzip through the gateway, scrubbed.
		{"an echoing upstream hands back the placeholder", "/workspace/httpsget https://api.secure.test:" + e.up.port + "/echo",
			"status=200 echo auth=Bearer " + ph + " body=token=" + ph, ""},
		// The placeholder count shows the search sees the environment.
		{"token not in the environment", find + "env | grep -cF \"$a$b\"; grep -cF \"$a$b\" /proc/self/environ; grep -c " + secrets.PlaceholderPrefix + "GH_TOKEN /proc/self/environ",
			"0\n0\n1", ""},
		{"token not in any file", find + "grep -rlF \"$a$b\" /etc /workspace /tmp /root /home /var /usr 2>/dev/null; echo done", "done", "/"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, out := e.sh(t, tc.line)
			for _, want := range strings.Split(tc.want, "|") {
				if !strings.Contains(out, want) {
					t.Errorf("Got(%s) = %q; want %q in it", tc.line, out, want)
				}
			}
			if tc.not != "" && strings.Contains(out, tc.not) {
				t.Errorf("Got(%s) = %q; want no %q in it", tc.line, out, tc.not)
			}
			if strings.Contains(out, realToken) {
				t.Errorf("Got(%s) output holds the real token", tc.line)
			}
		})
	}
	t.Run("terminal recording holds only the placeholder", func(t *testing.T) {
		terms := terminal.New(e.db, terminal.SandboxPTYs{Service: e.sbx}, terminal.Config{DataDir: t.TempDir(), RecordInput: true,
			Logger: slog.New(slog.NewTextHandler(e.logs, nil))})
		if err := terms.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer terms.Close()
		sess, err := terms.Open(ctx, e.actor, e.tenant, e.sb.ID, terminal.OpenRequest{Cols: 120, Rows: 30, Argv: []string{"/bin/sh", "-c",
			"echo $GH_TOKEN; /workspace/httpsget https://api.secure.test:" + e.up.port + "/term"}})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			got, err := terms.Session(ctx, e.tenant, sess.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.EndedAt != nil && got.RecordingBytes > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Got(session) = %+v; want it ended and recorded within 60 s", got)
			}
			time.Sleep(200 * time.Millisecond)
		}
		f, _, err := terms.OpenRecording(ctx, e.tenant, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cast, _ := io.ReadAll(f)
		if !strings.Contains(string(cast), ph) || !strings.Contains(string(cast), "auth=real") || strings.Contains(string(cast), realToken) {
			t.Errorf("Got(recording) = %q; want the placeholder and auth=real, never the token", cast)
		}
	})
	if got := e.up.reset(); len(got) == 0 || !strings.Contains(got[0], realToken) {
		t.Errorf("Got(upstream requests) = %d; want the real token in one", len(got))
	}
	assertNowhere(t, e.db, e.logs.String())
}
