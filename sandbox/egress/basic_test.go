package egress_test

import (
	"context"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

// TestGatewaySwapsBasicCredentials: git sends a token as the password of
// Authorization: Basic base64(user:token). Through the gateway, with the
// secrets store as broker, the upstream gets the real token re-encoded for
// the host the secret is scoped to, and nothing is swapped anywhere else:
// not on another host (another secret scoped there does not make it
// swap), not another sandbox's placeholder.
func TestGatewaySwapsBasicCredentials(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var seen []string
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		mu.Lock()
		seen = append(seen, r.Host+" "+user+":"+pass)
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())

	db := dbtest.SQLite(t)
	actor := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
	ten, err := tenants.NewStore(db, nil).CreateTenant(ctx, actor, "basic", "Basic")
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.New(db, testRoot, secrets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sec.Create(ctx, actor, ten.ID, secrets.NewSecret{Name: "GH_TOKEN", Value: realToken, Hosts: []string{"git.example.com"}}); err != nil {
		t.Fatal(err)
	}
	// Scoped to the other host: it makes the gateway intercept there, with
	// a replacer that must not know GH_TOKEN.
	if _, err := sec.Create(ctx, actor, ten.ID, secrets.NewSecret{Name: "OTHER", Value: "other-real-value", Hosts: []string{"other.example.com"}}); err != nil {
		t.Fatal(err)
	}
	upRoots := x509.NewCertPool()
	upRoots.AddCert(up.Certificate())
	_, proxy := startGateway(t, ten.ID, egress.Config{Policies: allowOnly(1, "*.example.com"), Store: egress.NewStore(db), Swapper: sec,
		UpstreamRoots: upRoots, Resolver: loopback("git.example.com", "other.example.com")})
	caPEM, err := sec.CAPEM(ctx, ten.ID)
	if err != nil {
		t.Fatal(err)
	}
	client := proxyClient(proxy, tenantRoots(t, caPEM))
	mine := sec.Placeholder(ten.ID, "sb-1", "GH_TOKEN")
	other := sec.Placeholder(ten.ID, "sb-2", "GH_TOKEN")

	tests := []struct {
		name, host, user, pass string
		want                   string // user:pass the upstream saw
	}{
		{"scoped host: password swapped", "git.example.com", "x-access-token", mine, "x-access-token:" + realToken},
		{"scoped host: user swapped", "git.example.com", mine, "x-oauth-basic", realToken + ":x-oauth-basic"},
		{"another sandbox's placeholder stays", "git.example.com", "x-access-token", other, "x-access-token:" + other},
		{"host the secret is not scoped to keeps the placeholder", "other.example.com", "x-access-token", mine, "x-access-token:" + mine},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			req, _ := http.NewRequest(http.MethodGet, "https://"+tc.host+":"+port+"/acme/app.git/info/refs?service=git-upload-pack", nil)
			req.SetBasicAuth(tc.user, tc.pass)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("Got(GET via %s) error %v; want 200", tc.host, err)
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if want := tc.host + ":" + port + " " + tc.want; len(seen) != 1 || seen[0] != want {
				t.Errorf("Got(upstream saw) = %q; want %q", seen, want)
			}
		})
	}
}
