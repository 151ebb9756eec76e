package egress_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// pinned is a gateway with a secret scoped to api.example.com and one
// HTTPS upstream on 127.0.0.1 that records the SNI of every ClientHello
// and every request it gets.
type pinned struct {
	proxy    string
	port     string
	store    *egress.Store
	tenantID string
	roots    *x509.CertPool
	mu       sync.Mutex
	snis     []string
	reqs     []string // "host auth"
}

const pinPlaceholder, pinReal = "stockade-placeholder-API_TOKEN-p1n", "real_api_token_value_421"

func newPinned(t *testing.T) *pinned {
	t.Helper()
	p := &pinned{}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.reqs = append(p.reqs, r.Host+" "+r.Header.Get("Authorization"))
		p.mu.Unlock()
		io.WriteString(w, "upstream ok")
	}))
	up.Config.ErrorLog = log.New(io.Discard, "", 0) // refused tunnels end handshakes early
	up.TLS = &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		p.mu.Lock()
		p.snis = append(p.snis, h.ServerName)
		p.mu.Unlock()
		return nil, nil
	}}
	up.StartTLS()
	t.Cleanup(up.Close)
	_, p.port, _ = net.SplitHostPort(up.Listener.Addr().String())

	db := dbtest.SQLite(t)
	p.tenantID = newTenantIn(t, db, "pin")
	broker := newTestBroker(t, "api.example.com", pinPlaceholder, pinReal)
	upRoots := x509.NewCertPool()
	upRoots.AddCert(up.Certificate())
	p.roots = x509.NewCertPool()
	p.roots.AddCert(broker.ca)
	p.roots.AddCert(up.Certificate())
	p.store = egress.NewStore(db)
	_, p.proxy = startGateway(t, p.tenantID, egress.Config{Policies: allowOnly(1, "*.example.com"),
		Store: p.store, Swapper: broker, UpstreamRoots: upRoots, Resolver: loopback("api.example.com", "other.example.com")})
	return p
}

// connect opens a tunnel to target through the gateway.
func (p *pinned) connect(t *testing.T, target string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("Got(CONNECT %s) = %v, %v; want 200", target, resp, err)
	}
	return &bufConn{Conn: c, r: br}
}

// bufConn reads what its reader already holds first.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func (p *pinned) seen() (snis, reqs []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, r := p.snis, p.reqs
	p.snis, p.reqs = nil, nil
	return s, r
}

// lastEvent waits for the tunnel's event (recorded when it ends).
func (p *pinned) lastEvent(t *testing.T, n int) egress.Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		evs, err := p.store.Events(context.Background(), p.tenantID, egress.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) >= n {
			return evs[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("Got(%d events) after 5 s; want %d", len(evs), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInterceptedTunnelPinned: inside a tunnel to api.example.com, the
// host the secret is scoped to, a request for another host (by Host, by
// absolute URL, by port) or over TLS whose SNI names another host gets
// 421 and nothing reaches the upstream: before the fix such a request
// was forwarded with the real credential swapped in.
func TestInterceptedTunnelPinned(t *testing.T) {
	p := newPinned(t)
	api := "api.example.com:" + p.port
	tests := []struct {
		name, sni, line, host string
		want                  int
	}{
		{"inner Host is another app", "api.example.com", "GET /v1 HTTP/1.1", "other-app.example", http.StatusMisdirectedRequest},
		{"inner Host is another allowed host", "api.example.com", "GET /v1 HTTP/1.1", "other.example.com:" + p.port, http.StatusMisdirectedRequest},
		{"inner Host on another port", "api.example.com", "GET /v1 HTTP/1.1", "api.example.com:1", http.StatusMisdirectedRequest},
		{"absolute URL to another host", "api.example.com", "GET https://other-app.example/v1 HTTP/1.1", api, http.StatusMisdirectedRequest},
		{"SNI names another host", "other-app.example", "GET /v1 HTTP/1.1", api, http.StatusMisdirectedRequest},
		{"SNI and Host match", "api.example.com", "GET /v1 HTTP/1.1", api, http.StatusOK},
		{"Host without the port", "API.example.com", "GET /v1 HTTP/1.1", "api.example.com", http.StatusOK},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := p.connect(t, api)
			tc2 := tls.Client(c, &tls.Config{ServerName: tc.sni, RootCAs: p.roots})
			if err := tc2.Handshake(); err != nil {
				t.Fatalf("Got(TLS handshake with SNI %s) = %v; want done (the tenant CA signs it)", tc.sni, err)
			}
			fmt.Fprintf(tc2, "%s\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", tc.line, tc.host, pinPlaceholder)
			resp, err := http.ReadResponse(bufio.NewReader(tc2), nil)
			if err != nil {
				t.Fatalf("Got(response) error %v; want %d", err, tc.want)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("Got(%s) = %d %q; want %d", tc.line, resp.StatusCode, body, tc.want)
			}
			_, reqs := p.seen()
			ev := p.lastEvent(t, i+1)
			if tc.want == http.StatusOK {
				if len(reqs) != 1 || reqs[0] != tc.host+" Bearer "+pinReal {
					t.Errorf("Got(upstream requests) = %q; want one with the real token", reqs)
				}
				return
			}
			if len(reqs) != 0 {
				t.Errorf("Got(upstream requests) = %q; want none", reqs)
			}
			if ev.Status != http.StatusMisdirectedRequest || ev.Decision != egress.DecisionDeny || !ev.Intercepted || strings.Contains(ev.Error, pinReal) {
				t.Errorf("Got(event) = %+v; want an intercepted 421 denial without the token", ev)
			}
		})
	}
}

// TestTunnelSNIPinned: a tunnel the gateway does not intercept is spliced
// to the upstream, but its ClientHello must name the CONNECT host: a
// tunnel to other.example.com carrying SNI for another name (domain
// fronting) or none is closed before the upstream sees a ClientHello.
func TestTunnelSNIPinned(t *testing.T) {
	p := newPinned(t)
	other := "other.example.com:" + p.port
	tests := []struct {
		name, sni string
		ok        bool
	}{
		{"SNI names another host", "evil.example.com", false},
		{"SNI names the intercepted host", "api.example.com", false},
		{"no SNI", "", false},
		{"SNI matches", "other.example.com", true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := p.connect(t, other)
			tc2 := tls.Client(c, &tls.Config{ServerName: tc.sni, InsecureSkipVerify: true})
			err := tc2.Handshake()
			if tc.ok {
				if err != nil {
					t.Fatalf("Got(handshake) = %v; want done", err)
				}
				fmt.Fprintf(tc2, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", other)
				resp, err := http.ReadResponse(bufio.NewReader(tc2), nil)
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("Got(GET through the tunnel) = %v, %v; want 200", resp, err)
				}
				resp.Body.Close()
			} else if err == nil {
				t.Errorf("Got(handshake with SNI %q through a tunnel to %s) = done; want the tunnel closed", tc.sni, other)
			}
			tc2.Close()
			snis, _ := p.seen()
			ev := p.lastEvent(t, i+1)
			if tc.ok {
				if len(snis) != 1 || snis[0] != "other.example.com" || ev.Decision != egress.DecisionAllow {
					t.Errorf("Got(upstream SNIs) = %q, event %+v; want one other.example.com, allowed", snis, ev)
				}
				return
			}
			if len(snis) != 0 {
				t.Errorf("Got(upstream SNIs) = %q; want none", snis)
			}
			if ev.Status != http.StatusMisdirectedRequest || ev.Decision != egress.DecisionDeny || ev.Intercepted {
				t.Errorf("Got(event) = %+v; want a 421 denial of the tunnel", ev)
			}
		})
	}
}

// TestTunnelServerFirst: a protocol where the server speaks first (an ssh
// or SMTP banner) still works through a tunnel: the ClientHello check
// waits for the sandbox's first bytes without holding up the upstream's.
func TestTunnelServerFirst(t *testing.T) {
	p := newPinned(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "SSH-2.0-banner\r\n")
		io.Copy(c, c) // echo
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	c := p.connect(t, "other.example.com:"+port)
	br := bufio.NewReader(c)
	banner, err := br.ReadString('\n')
	if err != nil || banner != "SSH-2.0-banner\r\n" {
		t.Fatalf("Got(banner) = %q, %v; want the server's first", banner, err)
	}
	io.WriteString(c, "SSH-2.0-client\r\n")
	echo, err := br.ReadString('\n')
	if err != nil || echo != "SSH-2.0-client\r\n" {
		t.Errorf("Got(echo) = %q, %v; want the client's line back", echo, err)
	}
}
