package web_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web/webtest"
)

// secretRE finds a token's secret in a page.
var secretRE = regexp.MustCompile(`stk_[a-z2-7]{8}_[a-z2-7]{52}`)

// listTokens returns the names of the tokens c's GET /api/v1/tokens lists.
func listTokenNames(t *testing.T, c *webtest.Client) []string {
	t.Helper()
	var out api.TokenList
	if s, body := c.JSON(t, http.MethodGet, "/api/v1/tokens", nil, &out); s != http.StatusOK {
		t.Fatalf("Got(GET /api/v1/tokens) = %d %s; want 200", s, body)
	}
	names := make([]string, 0, len(out.Tokens))
	for _, tk := range out.Tokens {
		names = append(names, tk.Name)
	}
	return names
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestPersonalTokens: a developer makes API tokens on the page and through
// the API, capped at their role; the tokens do what a developer may (list
// sandboxes) and nothing more (invite a member); a role above theirs is a
// field error naming role with nothing written; they see and revoke only
// their own tokens (another member's is 404 on the page and the API); the
// admin sees every token and revokes the developer's. Each create and
// revoke is audited.
func TestPersonalTokens(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "admin@acme.test", tenants.RoleAdmin)
	env.Member(t, acme, "dev@acme.test", tenants.RoleDeveloper)
	env.Member(t, acme, "other@acme.test", tenants.RoleDeveloper)
	admin := env.Login(t, "admin@acme.test")
	dev := env.Login(t, "dev@acme.test")
	other := env.Login(t, "other@acme.test")

	// On the page.
	s, body, _ := dev.Post(t, "/settings/tokens", url.Values{"name": {"dev-laptop"}, "role": {"developer"}, "ttl": {"30d"}})
	if s != http.StatusOK {
		t.Fatalf("Got(developer creates a token on the page) = %d; want 200: %.300s", s, body)
	}
	pageSecret := secretRE.FindString(body)
	if pageSecret == "" {
		t.Fatalf("Got(page after create) without the new secret; want it shown once")
	}
	pageTok := env.WithToken(pageSecret)

	// Through the API (a session, like the CLI's first token).
	var apiTok api.Token
	if s, body := dev.JSON(t, http.MethodPost, "/api/v1/tokens", map[string]string{"name": "dev-agent", "role": "developer", "ttl": "24h"}, &apiTok); s != http.StatusCreated {
		t.Fatalf("Got(developer creates a token via the API) = %d %s; want 201", s, body)
	}
	if apiTok.Role != "developer" || apiTok.Token == "" {
		t.Fatalf("Got(created token) = role %q, secret set %v; want developer with its secret", apiTok.Role, apiTok.Token != "")
	}
	// A token of the developer makes another one, capped the same way.
	var childTok api.Token
	if s, body := pageTok.JSON(t, http.MethodPost, "/api/v1/tokens", map[string]string{"name": "dev-child", "role": "developer", "ttl": "24h"}, &childTok); s != http.StatusCreated {
		t.Fatalf("Got(developer's token creates a developer token) = %d %s; want 201", s, body)
	}

	for name, c := range map[string]*webtest.Client{"page token": pageTok, "API token": env.WithToken(apiTok.Token), "child token": env.WithToken(childTok.Token)} {
		if s, m := me(t, c); s != http.StatusOK || deref(m.Role) != "developer" || m.Kind != "token" {
			t.Errorf("Got(/me of the %s) = %d %s %s; want 200 developer token", name, s, m.Kind, deref(m.Role))
		}
		if s, _, _ := c.Request(t, http.MethodGet, "/api/v1/sandboxes", "", nil); s != http.StatusOK {
			t.Errorf("Got(%s lists sandboxes) = %d; want 200", name, s)
		}
		if s, _ := c.JSON(t, http.MethodPost, "/api/v1/members", map[string]string{"email": "mallory@evil.test", "role": "admin"}, nil); s != http.StatusForbidden {
			t.Errorf("Got(%s invites a member) = %d; want 403", name, s)
		}
	}

	// A role above the developer's: a field error naming role, nothing written.
	before := env.Counts(t)
	for _, tc := range []struct {
		name string
		c    *webtest.Client
		role string
	}{
		{"session, admin", dev, "admin"},
		{"session, manager", dev, "manager"},
		{"session, auditor", dev, "auditor"},
		{"session, billing", dev, "billing"},
		{"developer token, admin", pageTok, "admin"},
		{"developer token, manager", env.WithToken(apiTok.Token), "manager"},
	} {
		var p api.Problem
		s, body := tc.c.JSON(t, http.MethodPost, "/api/v1/tokens", map[string]string{"name": "up", "role": tc.role, "ttl": "24h"}, &p)
		if s != http.StatusUnprocessableEntity || len(p.Errors) != 1 || p.Errors[0].Field != "role" || !strings.Contains(p.Errors[0].Detail, "at most") {
			t.Errorf("%s: Got(create a %s token) = %d %s; want 422 naming role", tc.name, tc.role, s, body)
		}
	}
	s, body, _ = dev.Post(t, "/settings/tokens", url.Values{"name": {"up"}, "role": {"admin"}, "ttl": {"30d"}})
	if s != http.StatusUnprocessableEntity {
		t.Errorf("Got(developer asks the page for an admin token) = %d; want 422", s)
	}
	if msg, ok := webtest.ParseHTML(t, body).FieldError("role"); !ok || !strings.Contains(msg, "developer") {
		t.Errorf("Got(role field error) = %q, %v; want one naming the developer's cap", msg, ok)
	}
	if secretRE.MatchString(body) {
		t.Errorf("Got(refused page) with a secret; want none")
	}
	env.Unchanged(t, before)

	// The page: "your tokens", the roles a developer may choose, no admin's.
	_, adminSecret := env.NewToken(t, acme, "ops-admin", tenants.RoleAdmin)
	var otherTok api.Token
	if s, body := other.JSON(t, http.MethodPost, "/api/v1/tokens", map[string]string{"name": "other-ci", "role": "developer", "ttl": "24h"}, &otherTok); s != http.StatusCreated {
		t.Fatalf("Got(another developer creates a token) = %d %s", s, body)
	}
	s, body = dev.GetPage(t, "/settings/tokens")
	if s != http.StatusOK {
		t.Fatalf("Got(developer's tokens page) = %d; want 200", s)
	}
	doc := webtest.ParseHTML(t, body)
	if h := strings.Join(doc.Text("h2"), "|"); !strings.Contains(h, "Your tokens") || strings.Contains(h, "All tokens") {
		t.Errorf("Got(headings) = %q; want Your tokens", h)
	}
	for _, name := range []string{"dev-laptop", "dev-agent", "dev-child"} {
		if !strings.Contains(body, `data-token="`+name+`"`) {
			t.Errorf("Got(developer's page) without their token %s", name)
		}
	}
	for _, name := range []string{"other-ci", "ops-admin"} {
		if strings.Contains(body, name) {
			t.Errorf("Got(developer's page) shows %s; want only their own tokens", name)
		}
	}
	if strings.Contains(body, `<option value="admin"`) || !strings.Contains(body, `<option value="developer"`) {
		t.Errorf("Got(role choices) offer admin or lack developer; want the developer's roles only")
	}
	got := listTokenNames(t, dev)
	if len(got) != 3 || contains(got, "other-ci") || contains(got, "ops-admin") {
		t.Errorf("Got(developer's GET /api/v1/tokens) = %v; want their 3 only", got)
	}
	if got := listTokenNames(t, pageTok); len(got) != 3 {
		t.Errorf("Got(developer token's GET /api/v1/tokens) = %v; want the developer's 3", got)
	}

	// Another member's token, and the operator's: not found, still live.
	for _, id := range []string{otherTok.ID, adminSecret.ID} {
		if s, body := dev.JSON(t, http.MethodDelete, "/api/v1/tokens/"+id, nil, nil); s != http.StatusNotFound {
			t.Errorf("Got(developer revokes token %s of someone else via the API) = %d %s; want 404", id, s, body)
		}
		if s, _ := pageTok.JSON(t, http.MethodDelete, "/api/v1/tokens/"+id, nil, nil); s != http.StatusNotFound {
			t.Errorf("Got(developer's token revokes token %s of someone else) = %d; want 404", id, s)
		}
		if s, _, _ := dev.Post(t, "/settings/tokens/"+id+"/revoke", nil); s != http.StatusNotFound {
			t.Errorf("Got(developer revokes token %s of someone else on the page) = %d; want 404", id, s)
		}
		if env.APIToken(t, id).RevokedAt != nil {
			t.Errorf("Got(token %s) revoked by another member; want live", id)
		}
	}
	if s, _ := me(t, env.WithToken(otherTok.Token)); s != http.StatusOK {
		t.Errorf("Got(/me of the other developer's token) = %d; want 200", s)
	}

	// Their own: revoked on the page, it stops at once, audited.
	if s, _, hdr := dev.Post(t, "/settings/tokens/"+childTok.ID+"/revoke", url.Values{"confirm": {"yes"}}); s != http.StatusSeeOther || hdr.Get("Location") != "/settings/tokens" {
		t.Errorf("Got(developer revokes their token) = %d %s; want 303 to /settings/tokens", s, hdr.Get("Location"))
	}
	if s, _ := me(t, env.WithToken(childTok.Token)); s != http.StatusUnauthorized {
		t.Errorf("Got(/me of a revoked token) = %d; want 401", s)
	}

	// The admin: all tokens, with who made them; revokes the developer's.
	s, body = admin.GetPage(t, "/settings/tokens")
	if s != http.StatusOK || !strings.Contains(body, "All tokens") {
		t.Fatalf("Got(admin's tokens page) = %d, all tokens heading %v; want 200 with it", s, strings.Contains(body, "All tokens"))
	}
	for _, name := range []string{"dev-laptop", "dev-agent", "other-ci", "ops-admin"} {
		if !strings.Contains(body, `data-token="`+name+`"`) {
			t.Errorf("Got(admin's page) without %s; want every token", name)
		}
	}
	if !strings.Contains(body, "dev@acme.test") {
		t.Errorf("Got(admin's page) without the creator dev@acme.test")
	}
	if got := listTokenNames(t, admin); len(got) != 5 {
		t.Errorf("Got(admin's GET /api/v1/tokens) = %v; want all 5", got)
	}
	if s, body := admin.JSON(t, http.MethodDelete, "/api/v1/tokens/"+apiTok.ID, nil, nil); s != http.StatusNoContent {
		t.Errorf("Got(admin revokes the developer's token) = %d %s; want 204", s, body)
	}
	if s, _ := me(t, env.WithToken(apiTok.Token)); s != http.StatusUnauthorized {
		t.Errorf("Got(/me of the token the admin revoked) = %d; want 401", s)
	}

	created, revoked := 0, 0
	for _, ev := range env.Events(t, audit.TypeTokenCreated) {
		if ev.TenantID == acme.ID {
			created++
		}
	}
	for _, ev := range env.Events(t, audit.TypeTokenRevoked) {
		if ev.TenantID == acme.ID {
			revoked++
		}
	}
	if created != 5 || revoked != 2 {
		t.Errorf("Got(token.created, token.revoked events) = %d, %d; want 5, 2", created, revoked)
	}
}

// TestPersonalTokensBrowser: a developer makes a token on the tokens page
// in headless Chromium and sees it once, under "Your tokens"; screenshot.
func TestPersonalTokensBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "dev@acme.test", tenants.RoleDeveloper)
	env.NewToken(t, acme, "ops-admin", tenants.RoleAdmin)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	b.Do(t, "sign in as the developer",
		chromedp.Navigate(env.URL+"/settings/tokens"),
		chromedp.Click(css(`form[action="/login/start"] button`)),
		chromedp.WaitVisible(css(`input[name="email"]`)),
		chromedp.SendKeys(css(`input[name="email"]`), "dev@acme.test"),
		chromedp.Click(css(`button[value="login"]`)),
		chromedp.WaitVisible(css(`form[action="/settings/tokens"] input[name="name"]`)))
	b.Do(t, "create a token",
		chromedp.SendKeys(css(`form[action="/settings/tokens"] input[name="name"]`), "dev-laptop"),
		chromedp.Click(css(`form[action="/settings/tokens"] button[type="submit"]`)),
		chromedp.WaitVisible(css(`#new-secret`)),
		chromedp.WaitVisible(css(`tr[data-token="dev-laptop"]`)))
	secret, err := chromedp.Run(b.Ctx, chromedp.Text(css(`#new-secret`)))
	if err != nil || !secretRE.MatchString(secret) {
		t.Fatalf("Got(new secret) = %q, %v; want a token", secret, err)
	}
	main, err := chromedp.Run(b.Ctx, chromedp.Text(css(`main`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(main, "Your tokens") || strings.Contains(main, "ops-admin") || !strings.Contains(main, "at most what your role (developer) can") {
		t.Errorf("Got(page) = %q; want Your tokens, the cap and no admin token", main)
	}
	if s, _ := me(t, env.WithToken(strings.TrimSpace(secret))); s != http.StatusOK {
		t.Errorf("Got(/me of the token from the page) = %d; want 200", s)
	}
	t.Logf("screenshot: %s", b.Screenshot(t, artifacts, "tokens-developer.png"))
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("Got(console problems) = %v; want none", p)
	}
}

// TestTokenCannotMintAboveItsRole: every role may make tokens now, so a
// token may make only tokens its own acting role covers, whoever made it:
// an admin's developer token and an operator-made developer token both
// get a field error naming role for an admin or manager token, and
// nothing is written.
func TestTokenCannotMintAboveItsRole(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "admin@acme.test", tenants.RoleAdmin)
	admin := env.Login(t, "admin@acme.test")
	var devOfAdmin api.Token
	if s, body := admin.JSON(t, http.MethodPost, "/api/v1/tokens", map[string]string{"name": "admin-dev", "role": "developer", "ttl": "24h"}, &devOfAdmin); s != http.StatusCreated {
		t.Fatalf("Got(admin makes a developer token) = %d %s; want 201", s, body)
	}
	opSecret, _ := env.NewToken(t, acme, "operator-dev", tenants.RoleDeveloper)
	before := env.Counts(t)
	for _, tc := range []struct {
		name, secret, role string
	}{
		{"admin's developer token", devOfAdmin.Token, "admin"},
		{"admin's developer token", devOfAdmin.Token, "manager"},
		{"operator's developer token", opSecret, "admin"},
		{"operator's developer token", opSecret, "auditor"},
	} {
		var p api.Problem
		s, body := env.WithToken(tc.secret).JSON(t, http.MethodPost, "/api/v1/tokens", map[string]string{"name": "up", "role": tc.role, "ttl": "24h"}, &p)
		if s != http.StatusUnprocessableEntity || len(p.Errors) != 1 || p.Errors[0].Field != "role" {
			t.Errorf("Got(%s makes a %s token) = %d %s; want 422 naming role", tc.name, tc.role, s, body)
		}
	}
	env.Unchanged(t, before)
}
