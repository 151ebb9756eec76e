package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// cli runs the command in-process and returns stdout, stderr and the error.
func cli(t *testing.T, getenv func(string) string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, getenv, &out, &errb)
	return out.String(), errb.String(), err
}

func TestAdminCommands(t *testing.T) {
	dir := t.TempDir()
	getenv := env(map[string]string{"STOCKADE_DATA_DIR": dir})

	out, _, err := cli(t, getenv, "tenant", "create", "acme", "--name", "Acme Corp", "--admin", "alice@acme.example")
	if err != nil || strings.TrimSpace(out) != "acme" {
		t.Fatalf("Got(tenant create) = %q, %v; want acme, nil", out, err)
	}
	if _, _, err := cli(t, getenv, "tenant", "create", "acme"); err == nil || !strings.Contains(err.Error(), "conflict") {
		t.Errorf("Got(second tenant create) err = %v; want a conflict", err)
	}
	if _, _, err := cli(t, getenv, "tenant", "create", "acme", "--exists-ok"); err != nil {
		t.Errorf("Got(tenant create --exists-ok) err = %v; want nil", err)
	}
	if _, _, err := cli(t, getenv, "tenant", "create", "Bad_Slug"); err == nil || !strings.Contains(err.Error(), "slug") {
		t.Errorf("Got(tenant create Bad_Slug) err = %v; want an error naming the slug", err)
	}
	if _, _, err := cli(t, getenv, "member", "add", "--tenant", "acme", "--email", "bob@acme.example", "--role", "developer"); err != nil {
		t.Errorf("member add: %v", err)
	}
	if _, _, err := cli(t, getenv, "token", "create", "--tenant", "acme", "--role", "emperor"); err == nil || !strings.Contains(err.Error(), "role") {
		t.Errorf("Got(token create --role emperor) err = %v; want an error naming the role", err)
	}
	if _, _, err := cli(t, getenv, "token", "create", "--tenant", "nope", "--role", "developer"); err == nil {
		t.Error("Got(token create for an unknown tenant) err = nil; want not found")
	}

	out, _, err = cli(t, getenv, "token", "create", "--tenant", "acme", "--role", "developer", "--name", "ci", "--ttl", "7d")
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	secret := strings.TrimSuffix(out, "\n")
	if strings.ContainsAny(secret, " \n\t") || !strings.HasPrefix(secret, "stk_") {
		t.Fatalf("Got(token create stdout) = %q; want the token alone on one line", out)
	}
	// The printed token authenticates against the same database serve uses.
	db, err := tenants.Open(context.Background(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	store := tenants.NewStore(db, nil)
	tok, tn, err := store.AuthenticateToken(context.Background(), secret)
	if err != nil || tn.Slug != "acme" || tok.Role != tenants.RoleDeveloper || tok.Name != "ci" {
		t.Fatalf("Got(AuthenticateToken) = %+v, %s, %v; want developer token ci of acme", tok, tn.Slug, err)
	}
	if d := tok.ExpiresAt.Sub(tok.CreatedAt); d != 7*24*time.Hour {
		t.Errorf("Got(token lifetime) = %v; want 168h", d)
	}
	out, _, err = cli(t, getenv, "tenant", "ls")
	if err != nil || !strings.Contains(out, "acme") || !strings.Contains(out, "Acme Corp") {
		t.Errorf("Got(tenant ls) = %q, %v; want acme listed", out, err)
	}
}

func TestServeRefusesUnreachableIssuer(t *testing.T) {
	getenv := env(map[string]string{
		"STOCKADE_DATA_DIR":       t.TempDir(),
		"STOCKADE_ADDR":           freeAddr(t),
		"STOCKADE_OIDC_ISSUER":    "http://" + freeAddr(t) + "/realms/x",
		"STOCKADE_OIDC_CLIENT_ID": "stockade",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, []string{"serve"}, getenv, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "oidc issuer") || !strings.Contains(err.Error(), "/realms/x") {
		t.Fatalf("Got(serve with an unreachable issuer) = %v; want an error naming the issuer", err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestServeLoginInBrowser does what `make run` does — create the demo
// tenant with the development admin, start `stockade serve` with SQLite and
// the development identity provider — then signs in with headless Chromium
// and lands on the dashboard.
func TestServeLoginInBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	addr := freeAddr(t)
	getenv := env(map[string]string{
		"STOCKADE_DATA_DIR":     t.TempDir(),
		"STOCKADE_ADDR":         addr,
		"STOCKADE_ADMIN_EMAILS": "dev@stockade.local",
	})
	if _, _, err := cli(t, getenv, "tenant", "create", "demo", "--name", "Demo", "--admin", "dev@stockade.local", "--exists-ok"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() { done <- run(ctx, []string{"serve"}, getenv, io.Discard, &logs) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server never became ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	b.Do(t, "open the app", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`form[action="/login/start"] button`)))
	b.Do(t, "sign in", chromedp.Click(css(`form[action="/login/start"] button`)), chromedp.WaitVisible(css(`input[name="email"]`)))
	b.Do(t, "development provider",
		chromedp.SendKeys(css(`input[name="email"]`), "dev@stockade.local"),
		chromedp.Click(css(`button[value="login"]`)),
		chromedp.WaitVisible(css(`main h1`)))
	h1, err := chromedp.Run(b.Ctx, chromedp.Text(css(`main h1`)))
	if err != nil {
		t.Fatal(err)
	}
	loc, err := chromedp.Run(b.Ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(h1) != "Demo" || loc != base+"/" {
		t.Fatalf("Got(after login) = %q at %s; want the Demo dashboard at /", h1, loc)
	}
	b.Screenshot(t, "../../test-artifacts", "serve-dashboard.png")
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("browser console problems: %v", p)
	}
	if !strings.Contains(logs.String(), "development identity provider active") {
		t.Errorf("Got(serve logs) lack the development identity provider warning")
	}
}
