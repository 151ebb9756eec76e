package secrets_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

var (
	rootKey  = []byte("0123456789abcdef0123456789abcdef")
	admin    = audit.Actor{Kind: audit.ActorUser, ID: "u-admin", Name: "Ada Admin"}
	theValue = "ghp_RealTokenValue0123456789abcdefXYZ"
)

type env struct {
	name   string
	db     *gorm.DB
	s      *secrets.Store
	clock  *clockwork.FakeClock
	t1, t2 string
}

// envs returns one store per test database (SQLite, and PostgreSQL when
// configured) with two tenants.
func envs(t *testing.T) []env {
	t.Helper()
	var out []env
	for _, d := range dbtest.Databases(t) {
		ctx := context.Background()
		ts := tenants.NewStore(d.DB, nil)
		sys := audit.Actor{Kind: audit.ActorSystem, Name: "test"}
		a, err := ts.CreateTenant(ctx, sys, "acme", "Acme")
		if err != nil {
			t.Fatal(err)
		}
		b, err := ts.CreateTenant(ctx, sys, "globex", "Globex")
		if err != nil {
			t.Fatal(err)
		}
		c := clockwork.NewFakeClockAt(time.Now().UTC())
		s, err := secrets.New(d.DB, rootKey, secrets.Config{Clock: c})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, env{name: d.Name, db: d.DB, s: s, clock: c, t1: a.ID, t2: b.ID})
	}
	return out
}

func TestCreateValidation(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			good := secrets.NewSecret{Name: "GH_TOKEN", Value: theValue, Hosts: []string{"api.github.com"}}
			tests := []struct {
				name  string
				mod   func(*secrets.NewSecret)
				field string
			}{
				{"lowercase name", func(n *secrets.NewSecret) { n.Name = "gh_token" }, "name"},
				{"digit first", func(n *secrets.NewSecret) { n.Name = "1TOKEN" }, "name"},
				{"empty value", func(n *secrets.NewSecret) { n.Value = "" }, "value"},
				{"newline in value", func(n *secrets.NewSecret) { n.Value = "a\r\nX-Evil: 1" }, "value"},
				{"no hosts", func(n *secrets.NewSecret) { n.Hosts = nil }, "hosts"},
				{"bad host", func(n *secrets.NewSecret) { n.Hosts = []string{"exa mple.com"} }, "hosts"},
				{"tld wildcard", func(n *secrets.NewSecret) { n.Hosts = []string{"*.com"} }, "hosts"},
				{"url not host", func(n *secrets.NewSecret) { n.Hosts = []string{"https://api.github.com/"} }, "hosts"},
				{"ttl too short", func(n *secrets.NewSecret) { n.TTL = time.Second }, "ttl"},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					before := dbtest.Count(t, e.db)
					ns := good
					tt.mod(&ns)
					_, err := e.s.Create(ctx, admin, e.t1, ns)
					var fe *errdefs.FieldError
					if !errors.As(err, &fe) || !errors.Is(err, errdefs.ErrInvalid) || fe.Field != tt.field {
						t.Fatalf("Got(Create) err = %v; want a FieldError on %q", err, tt.field)
					}
					if after := dbtest.Count(t, e.db); fmt.Sprint(after) != fmt.Sprint(before) {
						t.Errorf("Got(rows) = %v; want unchanged %v", after, before)
					}
				})
			}
		})
	}
}

func TestLifecycle(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			sec, err := e.s.Create(ctx, admin, e.t1, secrets.NewSecret{Name: "GH_TOKEN", Value: theValue,
				Hosts: []string{"API.GitHub.com.", "*.githubusercontent.com"}, TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if want := "api.github.com,*.githubusercontent.com"; strings.Join(sec.Hosts, ",") != want || sec.State != secrets.StateActive {
				t.Errorf("Got(Create) = %+v; want hosts %s, active", sec, want)
			}
			_, err = e.s.Create(ctx, admin, e.t1, secrets.NewSecret{Name: "GH_TOKEN", Value: "x", Hosts: []string{"a.example.com"}})
			if !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("Got(Create duplicate) err = %v; want ErrConflict", err)
			}
			// The other tenant has its own namespace and cannot see or revoke ours.
			if _, err := e.s.Create(ctx, admin, e.t2, secrets.NewSecret{Name: "GH_TOKEN", Value: "other", Hosts: []string{"api.github.com"}}); err != nil {
				t.Fatalf("Got(Create in other tenant) err = %v; want nil", err)
			}
			if _, err := e.s.Create(ctx, admin, "no-such-tenant", secrets.NewSecret{Name: "X", Value: "v", Hosts: []string{"a.example.com"}}); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(Create in missing tenant) err = %v; want ErrNotFound", err)
			}
			list, err := e.s.List(ctx, e.t1)
			if err != nil || len(list) != 1 || list[0].Name != "GH_TOKEN" {
				t.Fatalf("Got(List) = %+v, %v; want [GH_TOKEN]", list, err)
			}

			// Expiry: still listed, no longer usable, and its name may be reused.
			e.clock.Advance(2 * time.Hour)
			got, err := e.s.Get(ctx, e.t1, "GH_TOKEN")
			if err != nil || got.State != secrets.StateExpired {
				t.Errorf("Got(Get after TTL) = %+v, %v; want expired", got, err)
			}
			if env, err := e.s.Env(ctx, e.t1, "sb1", nil); err != nil || len(env) != 0 {
				t.Errorf("Got(Env after TTL) = %v, %v; want none", env, err)
			}
			if _, err := e.s.Create(ctx, admin, e.t1, secrets.NewSecret{Name: "GH_TOKEN", Value: theValue, Hosts: []string{"api.github.com"}}); err != nil {
				t.Fatalf("Got(Create over expired) err = %v; want nil", err)
			}

			if err := e.s.Revoke(ctx, admin, e.t2, "NOPE"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(Revoke unknown) err = %v; want ErrNotFound", err)
			}
			if err := e.s.Revoke(ctx, admin, e.t1, "GH_TOKEN"); err != nil {
				t.Fatal(err)
			}
			if err := e.s.Revoke(ctx, admin, e.t1, "GH_TOKEN"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(Revoke twice) err = %v; want ErrNotFound", err)
			}
			if _, err := e.s.Get(ctx, e.t1, "GH_TOKEN"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(Get revoked) err = %v; want ErrNotFound", err)
			}
			if _, ok, err := e.s.ForHost(ctx, e.t1, "sb1", "api.github.com"); ok || err != nil {
				t.Errorf("Got(ForHost after revoke) ok = %v, err = %v; want false, nil", ok, err)
			}
			// The other tenant's secret is untouched.
			if got, err := e.s.Get(ctx, e.t2, "GH_TOKEN"); err != nil || got.State != secrets.StateActive {
				t.Errorf("Got(Get other tenant) = %+v, %v; want active", got, err)
			}
			list, _ = e.s.List(ctx, e.t1)
			if len(list) != 2 || list[0].State != secrets.StateRevoked || list[1].State != secrets.StateRevoked {
				t.Errorf("Got(List) = %+v; want two revoked", list)
			}
		})
	}
}

// TestValueNeverStored checks the value is found nowhere in the database in
// clear: not in the secrets row, not in the audit log.
func TestValueNeverStored(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			if _, err := e.s.Create(ctx, admin, e.t1, secrets.NewSecret{Name: "GH_TOKEN", Value: theValue, Hosts: []string{"api.github.com"}}); err != nil {
				t.Fatal(err)
			}
			if err := e.s.Revoke(ctx, admin, e.t1, "GH_TOKEN"); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"SELECT * FROM secrets", "SELECT * FROM audit_events", "SELECT * FROM tenant_cas"} {
				rows, err := e.db.Raw(q).Rows()
				if err != nil {
					t.Fatal(err)
				}
				cols, _ := rows.Columns()
				n := 0
				for rows.Next() {
					vals := make([]any, len(cols))
					ptrs := make([]any, len(cols))
					for i := range vals {
						ptrs[i] = &vals[i]
					}
					if err := rows.Scan(ptrs...); err != nil {
						t.Fatal(err)
					}
					if s := fmt.Sprint(vals...); strings.Contains(s, theValue) || strings.Contains(s, theValue[4:20]) {
						t.Errorf("Got(%s) contains the secret value", q)
					}
					n++
				}
				rows.Close()
				t.Logf("%s: %d rows checked", q, n)
			}
			evs, err := audit.NewLog(e.db, nil).List(ctx, e.t1, audit.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			var types []string
			for _, ev := range evs {
				types = append(types, ev.Type)
				if ev.Type == audit.TypeSecretCreated && ev.Details["secret_name"] != "GH_TOKEN" {
					t.Errorf("Got(created event details) = %v; want secret_name GH_TOKEN", ev.Details)
				}
			}
			if s := strings.Join(types, ","); !strings.Contains(s, audit.TypeSecretCreated) || !strings.Contains(s, audit.TypeSecretRevoked) {
				t.Errorf("Got(audit types) = %s; want created and revoked", s)
			}
		})
	}
}

// TestRootKey: another root key cannot read the values, and the same key in
// a new store (a restart, another replica) can.
func TestRootKey(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			if _, err := e.s.Create(ctx, admin, e.t1, secrets.NewSecret{Name: "GH_TOKEN", Value: theValue, Hosts: []string{"api.github.com"}}); err != nil {
				t.Fatal(err)
			}
			same, err := secrets.New(e.db, rootKey, secrets.Config{})
			if err != nil {
				t.Fatal(err)
			}
			r, ok, err := same.ForHost(ctx, e.t1, "sb1", "api.github.com:443")
			if err != nil || !ok {
				t.Fatalf("Got(ForHost, same key) ok = %v, err = %v; want true, nil", ok, err)
			}
			ph := same.Placeholder(e.t1, "sb1", "GH_TOKEN")
			if got := r.Replace("Bearer " + ph); got != "Bearer "+theValue {
				t.Errorf("Got(Replace) = %q; want the value", got)
			}
			other, err := secrets.New(e.db, []byte("another root key, 32 bytes long!!"), secrets.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := other.ForHost(ctx, e.t1, "sb1", "api.github.com"); err == nil || strings.Contains(err.Error(), theValue) {
				t.Errorf("Got(ForHost, other key) err = %v; want a decrypt error without the value", err)
			}
			if _, err := secrets.New(e.db, []byte("short"), secrets.Config{}); err == nil {
				t.Errorf("Got(New with short key) err = nil; want an error")
			}
		})
	}
}

func TestPlaceholdersAndForHost(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			for _, ns := range []secrets.NewSecret{
				{Name: "GH_TOKEN", Value: theValue, Hosts: []string{"api.github.com"}},
				{Name: "NPM_TOKEN", Value: "npm_value_1", Hosts: []string{"*.npmjs.org"}},
			} {
				if _, err := e.s.Create(ctx, admin, e.t1, ns); err != nil {
					t.Fatal(err)
				}
			}
			env, err := e.s.Env(ctx, e.t1, "sb1", nil)
			if err != nil {
				t.Fatal(err)
			}
			gh := e.s.Placeholder(e.t1, "sb1", "GH_TOKEN")
			npm := e.s.Placeholder(e.t1, "sb1", "NPM_TOKEN")
			if want := []string{"GH_TOKEN=" + gh, "NPM_TOKEN=" + npm}; fmt.Sprint(env) != fmt.Sprint(want) {
				t.Errorf("Got(Env) = %v; want %v", env, want)
			}
			if !strings.HasPrefix(gh, "stockade-placeholder-GH_TOKEN-") || strings.Contains(gh, theValue) {
				t.Errorf("Got(Placeholder) = %q; want stockade-placeholder-GH_TOKEN-<random>", gh)
			}
			if gh != e.s.Placeholder(e.t1, "sb1", "GH_TOKEN") || gh == e.s.Placeholder(e.t1, "sb2", "GH_TOKEN") ||
				gh == e.s.Placeholder(e.t2, "sb1", "GH_TOKEN") {
				t.Errorf("Got(Placeholder) not stable per sandbox and secret, or shared across sandboxes/tenants")
			}
			if env, _ := e.s.Env(ctx, e.t1, "sb1", []string{"NPM_TOKEN", "MISSING"}); fmt.Sprint(env) != fmt.Sprint([]string{"NPM_TOKEN=" + npm}) {
				t.Errorf("Got(Env granted NPM_TOKEN) = %v; want only NPM_TOKEN", env)
			}
			if env, _ := e.s.Env(ctx, e.t1, "sb1", []string{}); len(env) != 0 {
				t.Errorf("Got(Env granted none) = %v; want none", env)
			}

			body := "token=" + gh + "&npm=" + npm + "&other=" + e.s.Placeholder(e.t1, "sb2", "GH_TOKEN")
			tests := []struct {
				host    string
				ok      bool
				want    string
				tenant  string
				sandbox string
			}{
				{"api.github.com", true, "token=" + theValue + "&npm=" + npm, e.t1, "sb1"},
				{"API.GITHUB.COM:443", true, "token=" + theValue + "&npm=" + npm, e.t1, "sb1"},
				{"registry.npmjs.org", true, "token=" + gh + "&npm=npm_value_1", e.t1, "sb1"},
				{"npmjs.org", false, "", e.t1, "sb1"},
				{"evil.com", false, "", e.t1, "sb1"},
				{"api.github.com.evil.com", false, "", e.t1, "sb1"},
				{"api.github.com", false, "", e.t2, "sb1"},
			}
			for _, tt := range tests {
				t.Run(tt.host, func(t *testing.T) {
					r, ok, err := e.s.ForHost(ctx, tt.tenant, tt.sandbox, tt.host)
					if err != nil || ok != tt.ok {
						t.Fatalf("Got(ForHost %s) ok = %v, err = %v; want %v", tt.host, ok, err, tt.ok)
					}
					if scoped, err := e.s.Scoped(ctx, tt.tenant, tt.host); err != nil || scoped != tt.ok {
						t.Errorf("Got(Scoped %s) = %v, %v; want %v", tt.host, scoped, err, tt.ok)
					}
					if !ok {
						return
					}
					got := r.Replace(body)
					// Another sandbox's placeholder is never swapped here.
					if want := tt.want + "&other=" + e.s.Placeholder(e.t1, "sb2", "GH_TOKEN"); got != want {
						t.Errorf("Got(Replace) = %q; want %q", got, want)
					}
				})
			}
		})
	}
}

func TestMatchHost(t *testing.T) {
	tests := []struct {
		pattern, host string
		want          bool
	}{
		{"api.github.com", "api.github.com", true},
		{"api.github.com", "API.github.com.", true},
		{"api.github.com", "github.com", false},
		{"*.example.com", "a.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "badexample.com", false},
		{"*.example.com", ".example.com", false},
	}
	for _, tt := range tests {
		if got := secrets.MatchHost(tt.pattern, tt.host); got != tt.want {
			t.Errorf("Got(MatchHost(%q, %q)) = %v; want %v", tt.pattern, tt.host, got, tt.want)
		}
	}
}

// TestTLS terminates real TLS with the tenant's CA: a client trusting the
// CA PEM connects by name; a client trusting only the other tenant's CA
// fails; the CA survives a new store (restart) unchanged.
func TestTLS(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			caPEM, err := e.s.CAPEM(ctx, e.t1)
			if err != nil {
				t.Fatal(err)
			}
			otherPEM, err := e.s.CAPEM(ctx, e.t2)
			if err != nil {
				t.Fatal(err)
			}
			if caPEM == otherPEM {
				t.Fatal("Got(CAPEM) the same for two tenants; want one CA per tenant")
			}
			restarted, err := secrets.New(e.db, rootKey, secrets.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if again, err := restarted.CAPEM(ctx, e.t1); err != nil || again != caPEM {
				t.Errorf("Got(CAPEM after restart) changed or failed (%v); want the stored CA", err)
			}
			if _, err := e.s.CAPEM(ctx, "no-such-tenant"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(CAPEM missing tenant) err = %v; want ErrNotFound", err)
			}
			block, _ := pemBlock(caPEM)
			ca, err := x509.ParseCertificate(block)
			if err != nil {
				t.Fatal(err)
			}
			if !ca.IsCA || ca.NotAfter.Sub(ca.NotBefore) < 9*365*24*time.Hour || ca.PublicKeyAlgorithm != x509.ECDSA {
				t.Errorf("Got(CA) IsCA=%v validity=%v alg=%v; want an ECDSA CA valid ~10 years", ca.IsCA, ca.NotAfter.Sub(ca.NotBefore), ca.PublicKeyAlgorithm)
			}

			cfg, err := restarted.TLSConfig(ctx, e.t1)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "hello "+r.Host)
			}))
			srv.TLS = cfg
			srv.StartTLS()
			defer srv.Close()
			addr := srv.Listener.Addr().String()

			get := func(pemText, name string) (string, error) {
				pool := x509.NewCertPool()
				pool.AppendCertsFromPEM([]byte(pemText))
				c := &http.Client{Transport: &http.Transport{
					TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: name},
					DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
						return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
					},
				}}
				resp, err := c.Get("https://" + name + "/")
				if err != nil {
					return "", err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return string(b), err
			}
			for _, name := range []string{"api.github.com", "registry.npmjs.org"} {
				if got, err := get(caPEM, name); err != nil || got != "hello "+name {
					t.Errorf("Got(GET https://%s trusting the tenant CA) = %q, %v; want hello", name, got, err)
				}
			}
			if _, err := get(otherPEM, "api.github.com"); err == nil {
				t.Errorf("Got(GET trusting another tenant's CA) err = nil; want a certificate error")
			}
			l1, err := restarted.Leaf(ctx, e.t1, "api.github.com")
			if err != nil {
				t.Fatal(err)
			}
			l2, _ := restarted.Leaf(ctx, e.t1, "api.github.com")
			if l1 != l2 {
				t.Errorf("Got(Leaf twice) two certificates; want the cached one")
			}
		})
	}
}
