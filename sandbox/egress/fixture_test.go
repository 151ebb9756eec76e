package egress_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/egress"
)

// The gateway fixtures the tests of this package share: a gateway on a
// loopback listener standing in for the agent's proxy listener, test
// policies and a resolver for test names.

// policyBox is a tenant policy the test changes while the gateway runs.
type policyBox struct {
	mu      sync.Mutex
	rules   egress.Rules
	version int
}

func (p *policyBox) Egress(ctx context.Context, tenantID string) (egress.Rules, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rules, p.version, nil
}

func (p *policyBox) set(r egress.Rules) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = r
	p.version++
}

// allowOnly is a policy at version that denies everything but domains.
func allowOnly(version int, domains ...string) egress.Policies {
	rules := egress.Rules{Default: egress.DefaultDeny}
	for _, d := range domains {
		rules.Allow = append(rules.Allow, egress.Rule{Domain: d})
	}
	return egress.PoliciesFunc(func(context.Context, string) (egress.Rules, int, error) { return rules, version, nil })
}

// names is a resolver for test names; anything else does not resolve.
type names map[string][]netip.Addr

func (n names) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := n[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// loopback resolves every one of hosts to 127.0.0.1, where the test's
// upstreams listen.
func loopback(hosts ...string) names {
	n := names{}
	for _, h := range hosts {
		n[h] = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	}
	return n
}

// testAllowance is the test-only operator allowance that lets the gateway
// reach the upstreams on 127.0.0.1 (netguard.ParseAllowance, which reads the
// operator's setting, refuses loopback).
var testAllowance = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// startGateway builds a gateway from cfg (the test allowance and a silent
// log unless cfg says otherwise) and serves it as sandbox sb-1 of the
// tenant; it returns the gateway and the proxy's address.
func startGateway(t testing.TB, tenantID string, cfg egress.Config) (*egress.Gateway, string) {
	t.Helper()
	if cfg.AllowCIDRs == nil {
		cfg.AllowCIDRs = testAllowance
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	gw, err := egress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return gw, serveGateway(t, gw, tenantID, "sb-1")
}

// serveGateway serves gw on a loopback listener standing in for the
// agent's proxy listener, every connection as sandbox sb on vm-1 of the
// tenant; it returns the listener's address.
func serveGateway(t testing.TB, gw *egress.Gateway, tenantID, sb string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go gw.ServeConn(context.Background(), tenantID, "vm-1", sb, c)
		}
	}()
	return ln.Addr().String()
}

// proxyClient is a sandbox's HTTP client: through the proxy at addr,
// trusting roots only, with no connection reuse (each request is its own
// tunnel and event).
func proxyClient(addr string, roots *x509.CertPool) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr}), TLSClientConfig: &tls.Config{RootCAs: roots}}}
}

// tenantRoots is the tenant CA a sandbox trusts (as SSL_CERT_FILE gives it).
func tenantRoots(t testing.TB, caPEM string) *x509.CertPool {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(caPEM)) {
		t.Fatalf("Got(tenant CA) = %q; want a PEM certificate", caPEM)
	}
	return roots
}
