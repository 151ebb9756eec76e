package egress_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

// testBroker is a credential broker for one scoped host: a CA made for
// the test, a leaf per SNI, one placeholder and its real value.
type testBroker struct {
	host, placeholder, real string
	ca                      *x509.Certificate
	key                     *ecdsa.PrivateKey
}

func newTestBroker(t *testing.T, host, placeholder, real string) *testBroker {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test tenant CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return &testBroker{host: host, placeholder: placeholder, real: real, ca: ca, key: key}
}

func (b *testBroker) Credentials(ctx context.Context, tenantID, sandboxID, host string) ([]secrets.Credential, bool, error) {
	if host != b.host {
		return nil, false, nil
	}
	return []secrets.Credential{{Name: "GH_TOKEN", Placeholder: b.placeholder, Value: b.real, Inject: secrets.DefaultInject()}}, true, nil
}

func (b *testBroker) TLSConfig(ctx context.Context, tenantID string) (*tls.Config, error) {
	return &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: hello.ServerName}, DNSNames: []string{hello.ServerName},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, b.ca, &key.PublicKey, b.key)
		if err != nil {
			return nil, err
		}
		return &tls.Certificate{Certificate: [][]byte{der, b.ca.Raw}, PrivateKey: key}, nil
	}}, nil
}

// TestGatewaySwapsCredentials: for the scoped host the gateway terminates
// TLS with the tenant CA and the upstream (verified against its own test
// CA) receives the real value; the sandbox side only ever sends and sees
// the placeholder. Another host is tunnelled untouched.
func TestGatewaySwapsCredentials(t *testing.T) {
	const placeholder, real = "stockade-placeholder-GH_TOKEN-x7f3", "ghp_real_token_value_123"
	var mu sync.Mutex
	var seen []string
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host+" "+r.Header.Get("Authorization")+" "+r.URL.RawQuery)
		mu.Unlock()
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "ok %d bytes", len(b))
	}))
	defer up.Close()
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())

	db := dbtest.SQLite(t)
	tenantID := newTenantIn(t, db, "creds")
	broker := newTestBroker(t, "api.example.com", placeholder, real)
	upRoots := x509.NewCertPool()
	upRoots.AddCert(up.Certificate())
	store := egress.NewStore(db)
	_, proxy := startGateway(t, tenantID, egress.Config{Policies: allowOnly(3, "*.example.com"), Store: store, Swapper: broker,
		UpstreamRoots: upRoots, Resolver: loopback("api.example.com", "other.example.com")})
	// The sandbox trusts the tenant CA (as the agent sets it up) and the
	// upstream's own CA (for the host that is only tunnelled).
	roots := x509.NewCertPool()
	roots.AddCert(broker.ca)
	roots.AddCert(up.Certificate())
	client := proxyClient(proxy, roots)

	tests := []struct {
		name, host string
		wantAuth   string
		wantIssuer string
	}{
		{"scoped host gets the real value", "api.example.com", "Bearer " + real, "test tenant CA"},
		{"other host keeps the placeholder", "other.example.com", "Bearer " + placeholder, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			req, _ := http.NewRequest(http.MethodPost, "https://"+tc.host+":"+port+"/repos?token="+placeholder, strings.NewReader("body "+placeholder))
			req.Header.Set("Authorization", "Bearer "+placeholder)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("Got(POST via %s) error %v; want 200", tc.host, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || strings.Contains(string(b), real) {
				t.Errorf("Got(response) = %d %q; want 200 without the real value", resp.StatusCode, b)
			}
			issuer := ""
			if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
				issuer = resp.TLS.PeerCertificates[0].Issuer.CommonName
			}
			if tc.wantIssuer != "" && issuer != tc.wantIssuer {
				t.Errorf("Got(certificate issuer seen by the sandbox) = %q; want %q", issuer, tc.wantIssuer)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != 1 || !strings.Contains(seen[0], tc.wantAuth) {
				t.Errorf("Got(upstream saw) = %q; want Authorization %q", seen, tc.wantAuth)
			}
		})
	}
	evs, err := store.Events(context.Background(), tenantID, egress.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if strings.Contains(fmt.Sprintf("%+v", e), real) {
			t.Errorf("Got(event) = %+v; want no real value in it", e)
		}
	}
}
