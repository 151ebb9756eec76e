package egress_test

import (
	"bufio"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

type fixture struct {
	gw       *egress.Gateway
	store    *egress.Store
	policy   *policyBox
	tenantID string
	proxy    *url.URL
	plain    *httptest.Server
	secure   *httptest.Server
	seen     int
}

// newFixture runs the gateway behind a local TCP listener standing in for
// the agent's proxy listener, with an HTTP and an HTTPS upstream on
// 127.0.0.1 reachable under the test-only allowance 127.0.0.0/8.
func newFixture(t testing.TB, allow string) *fixture {
	t.Helper()
	db := dbtest.SQLite(t)
	f := &fixture{store: egress.NewStore(db), policy: &policyBox{}, tenantID: newTenantIn(t, db, "acme")}
	f.plain = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "plain %s %s auth=%s", r.Method, r.URL.Path, r.Header.Get("Authorization"))
	}))
	t.Cleanup(f.plain.Close)
	f.secure = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "secure %s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(f.secure.Close)
	allowCIDRs := []netip.Prefix{} // none
	if allow != "" {
		allowCIDRs = []netip.Prefix{netip.MustParsePrefix(allow)}
	}
	lo := netip.MustParseAddr("127.0.0.1")
	var proxy string
	f.gw, proxy = startGateway(t, f.tenantID, egress.Config{
		Policies: f.policy, Store: f.store, UpstreamRoots: upstreamRoots(f.secure), AllowCIDRs: allowCIDRs, CacheTTL: 200 * time.Millisecond,
		Resolver: names{
			"allowed.test":       {lo},
			"other.test":         {lo},
			"api.allowed.test":   {lo},
			"secure.example.com": {lo},
			"metadata.test":      {netip.MustParseAddr("169.254.169.254")},
			// A name that points at a public address and a private one: the
			// rebinding shape. The gateway never dials a second lookup.
			"rebind.test": {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.1.2.3")},
		},
	})
	f.proxy = &url.URL{Scheme: "http", Host: proxy}
	return f
}

func (f *fixture) client(roots bool) *http.Client {
	tr := &http.Transport{Proxy: http.ProxyURL(f.proxy), DisableKeepAlives: true}
	if roots {
		tr.TLSClientConfig = f.secure.Client().Transport.(*http.Transport).TLSClientConfig
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func upstreamRoots(s *httptest.Server) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.Certificate())
	return p
}

func portOf(s *httptest.Server) string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

// get fetches rawURL through the gateway and returns the status and body.
func (f *fixture) get(t *testing.T, rawURL string) (int, string, error) {
	t.Helper()
	resp, err := f.client(true).Get(rawURL)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// rawGet asks the proxy for rawURL in plain form (as busybox wget does
// for https URLs) and returns the status and body.
func (f *fixture) rawGet(t *testing.T, rawURL string) (int, string, error) {
	t.Helper()
	c, err := net.Dial("tcp", f.proxy.Host)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", rawURL)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func TestGatewayDecides(t *testing.T) {
	f := newFixture(t, "127.0.0.0/8")
	f.policy.set(egress.Rules{Default: egress.DefaultDeny,
		Allow: []egress.Rule{{Domain: "allowed.test"}, {Domain: "*.allowed.test", Ports: []int{1}},
			{Domain: "metadata.test"}, {Domain: "rebind.test"}, {Domain: "*.example.com"}},
		Deny: []egress.Rule{{Domain: "api.allowed.test"}}})
	pp, sp := portOf(f.plain), portOf(f.secure)
	tests := []struct {
		name     string
		url      string
		wantCode int
		wantBody string
		wantRule string
	}{
		{"allowed plain http", "http://allowed.test:" + pp + "/x", 200, "plain GET /x", "allow allowed.test"},
		{"allowed https through CONNECT", "https://secure.example.com:" + sp + "/y", 200, "secure GET /y", "allow *.example.com"},
		{"allowed https in plain form, verified upstream", "https-plain://secure.example.com:" + sp + "/z", 200, "secure GET /z", "allow *.example.com"},
		{"default deny", "http://other.test:" + pp + "/", 403, "denied: default deny", "default deny"},
		{"deny wins over a wildcard allow", "http://api.allowed.test:" + pp + "/", 403, "denied: deny api.allowed.test", "deny api.allowed.test"},
		{"metadata address blocked though allowed", "http://metadata.test/", 403, "cloud metadata address 169.254.169.254", "blocked: cloud metadata address 169.254.169.254"},
		{"metadata literal blocked", "http://169.254.169.254/latest/meta-data/", 403, "default deny", "default deny"},
		{"rebinding name blocked", "http://rebind.test:" + pp + "/", 403, "private address 10.1.2.3", "blocked: private address 10.1.2.3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body, err := f.get(t, tc.url)
			if u, ok := strings.CutPrefix(tc.url, "https-plain://"); ok {
				code, body, err = f.rawGet(t, "https://"+u)
			}
			if strings.HasPrefix(tc.url, "https") && tc.wantCode != 200 {
				// A refused CONNECT surfaces as a transport error.
				if err == nil {
					t.Fatalf("Got(GET %s) = %d; want a refused CONNECT", tc.url, code)
				}
				return
			}
			if err != nil {
				t.Fatalf("Got(GET %s) error %v; want %d", tc.url, err, tc.wantCode)
			}
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Errorf("Got(GET %s) = %d %q; want %d containing %q", tc.url, code, body, tc.wantCode, tc.wantBody)
			}
			evs := f.waitEvents(t)
			if evs[0].Rule != tc.wantRule {
				t.Errorf("Got(event rule) = %q; want %q", evs[0].Rule, tc.wantRule)
			}
			wantDecision := egress.DecisionDeny
			if tc.wantCode == 200 {
				wantDecision = egress.DecisionAllow
			}
			if evs[0].Decision != wantDecision || evs[0].TenantID != f.tenantID || evs[0].SandboxID != "sb-1" {
				t.Errorf("Got(event) = %+v; want decision %s for sandbox sb-1 of the tenant", evs[0], wantDecision)
			}
		})
	}
}

// waitEvents waits for an event recorded after the last call and returns
// the events, newest first (recording follows the response by a moment).
func (f *fixture) waitEvents(t *testing.T) []egress.Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		evs, err := f.store.Events(context.Background(), f.tenantID, egress.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > f.seen {
			f.seen = len(evs)
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("Got(%d events) after 5 s; want a new one", len(evs))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestGatewayBlocksPrivateRangesWithoutAllowance(t *testing.T) {
	f := newFixture(t, "")
	f.policy.set(egress.Rules{Default: egress.DefaultAllow})
	tests := []struct {
		name, url, want string
	}{
		{"loopback by name", "http://allowed.test:" + portOf(f.plain) + "/", "loopback address 127.0.0.1"},
		{"loopback literal", "http://127.0.0.1:" + portOf(f.plain) + "/", "loopback address 127.0.0.1"},
		{"metadata literal", "http://169.254.169.254/latest/meta-data/", "cloud metadata address 169.254.169.254"},
		{"metadata v6 literal", "http://[fd00:ec2::254]/latest/", "cloud metadata address fd00:ec2::254"},
		{"CGNAT", "http://100.64.1.1/", "CGNAT address 100.64.1.1"},
		{"link-local", "http://169.254.10.10/", "link-local address 169.254.10.10"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body, err := f.get(t, tc.url)
			if err != nil || code != http.StatusForbidden || !strings.Contains(body, tc.want) {
				t.Errorf("Got(GET %s) = %d %q %v; want 403 naming %q", tc.url, code, body, err, tc.want)
			}
		})
	}
}

func TestGatewayPolicyChangeTakesEffect(t *testing.T) {
	f := newFixture(t, "127.0.0.0/8")
	u := "http://allowed.test:" + portOf(f.plain) + "/"
	f.policy.set(egress.Rules{Default: egress.DefaultDeny, Allow: []egress.Rule{{Domain: "allowed.test"}}})
	if code, body, err := f.get(t, u); err != nil || code != 200 {
		t.Fatalf("Got(GET %s) = %d %q %v; want 200", u, code, body, err)
	}
	f.policy.set(egress.Rules{Default: egress.DefaultDeny})
	start := time.Now()
	for {
		code, _, err := f.get(t, u)
		if err == nil && code == http.StatusForbidden {
			break
		}
		if time.Since(start) > 3*time.Second {
			t.Fatalf("Got(GET %s) = %d %v 3 s after the policy changed; want 403 within the cache bound", u, code, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Recording follows the response: wait for the denial's event.
	deadline := time.Now().Add(5 * time.Second)
	for {
		evs, err := f.store.Events(context.Background(), f.tenantID, egress.Filter{Decision: egress.DecisionDeny})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 0 {
			if evs[0].PolicyVersion != 2 {
				t.Errorf("Got(denial's policy version) = %d; want 2", evs[0].PolicyVersion)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Got(no denial event) after 5 s; want one")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestGatewayCountsBytes(t *testing.T) {
	f := newFixture(t, "127.0.0.0/8")
	f.policy.set(egress.Rules{Default: egress.DefaultAllow})
	const size = 3 << 20
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Length", fmt.Sprint(size))
		w.Write([]byte(strings.Repeat("x", size-len(b))))
		w.Write(b)
	}))
	defer big.Close()
	u := "http://allowed.test:" + portOf(big) + "/upload"
	resp, err := f.client(false).Post(u, "text/plain", strings.NewReader(strings.Repeat("u", 100000)))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n != size {
		t.Fatalf("Got(body bytes) = %d; want %d", n, size)
	}
	evs := f.waitEvents(t)
	if evs[0].BytesDown < size || evs[0].BytesUp < 100000 || evs[0].Status != 200 {
		t.Errorf("Got(event) = up %d down %d status %d; want up >= 100000, down >= %d, status 200", evs[0].BytesUp, evs[0].BytesDown, evs[0].Status, size)
	}
	up, down := f.gw.Bytes("sb-1")
	if up != evs[0].BytesUp || down != evs[0].BytesDown {
		t.Errorf("Got(Bytes(sb-1)) = %d, %d; want the event's %d, %d", up, down, evs[0].BytesUp, evs[0].BytesDown)
	}
	tot, err := f.store.SandboxTotals(context.Background(), f.tenantID, "sb-1")
	if err != nil || tot.Allowed != 1 || tot.BytesDown != evs[0].BytesDown {
		t.Errorf("Got(SandboxTotals) = %+v, %v; want 1 allowed with the event's bytes", tot, err)
	}
}

func TestGatewayRefusesBadRequests(t *testing.T) {
	f := newFixture(t, "127.0.0.0/8")
	f.policy.set(egress.Rules{Default: egress.DefaultAllow})
	tests := []struct {
		name, raw string
		want      int
	}{
		{"origin-form request", "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400},
		{"ftp scheme", "GET ftp://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400},
		{"CONNECT without a port", "CONNECT allowed.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400},
		{"garbage", "\x16\x03\x01 not http\r\n\r\n", 400},
		{"head over the bound", "GET http://allowed.test/ HTTP/1.1\r\nX: " + strings.Repeat("a", 70000) + "\r\n\r\n", 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := f.raw(t, tc.raw); code != tc.want {
				t.Errorf("Got(status) = %d %q; want %d", code, body, tc.want)
			}
		})
	}
}

// raw sends a proxy request as written and returns the answer's status
// and body.
func (f *fixture) raw(t *testing.T, raw string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", f.proxy.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go io.WriteString(c, raw)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("Got(response to %.40q) error %v; want one", raw, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRulesDecide(t *testing.T) {
	rs := egress.Rules{Default: egress.DefaultDeny,
		Allow: []egress.Rule{{Domain: "api.github.com", Ports: []int{443}}, {Domain: "*.example.com"}},
		Deny:  []egress.Rule{{Domain: "bad.example.com"}}}
	tests := []struct {
		host string
		port int
		want bool
		rule string
	}{
		{"api.github.com", 443, true, "allow api.github.com:443"},
		{"API.GitHub.com.", 443, true, "allow api.github.com:443"},
		{"api.github.com", 80, false, "default deny"},
		{"a.example.com", 8080, true, "allow *.example.com"},
		{"a.b.example.com", 1, true, "allow *.example.com"},
		{"example.com", 443, false, "default deny"},
		{"badexample.com", 443, false, "default deny"},
		{"bad.example.com", 443, false, "deny bad.example.com"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s:%d", tc.host, tc.port), func(t *testing.T) {
			d := rs.Decide(tc.host, tc.port)
			if d.Allowed != tc.want || d.Rule != tc.rule {
				t.Errorf("Got(Decide(%s, %d)) = %+v; want %v by %q", tc.host, tc.port, d, tc.want, tc.rule)
			}
		})
	}
}
