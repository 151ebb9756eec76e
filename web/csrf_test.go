package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestCSRFBoundToSession: a CSRF token is good only with the session it was
// minted for. The attack: Bob, a member himself, takes his own CSRF cookie
// and token, plants the cookie in Alice's browser (any page that can set a
// cookie for the host can: a sibling subdomain, plain http) and makes her
// browser post his token. With a token that is just the cookie's value the
// post goes through; bound to the session it does not.
func TestCSRFBoundToSession(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "alice@acme.test", tenants.RoleAdmin)
	env.Member(t, acme, "bob@acme.test", tenants.RoleDeveloper)
	alice := env.Login(t, "alice@acme.test")
	bob := env.Login(t, "bob@acme.test")
	invite := func(n string) url.Values {
		return url.Values{"email": {"invitee-" + n + "@evil.test"}, "role": {"admin"}}
	}
	post := func(c *webtest.Client, csrf string, form url.Values) (int, string) {
		t.Helper()
		form.Set("_csrf", csrf)
		s, body, _ := c.Request(t, http.MethodPost, "/settings/members", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
		return s, body
	}

	aliceToken, bobToken := alice.CSRF(t), bob.CSRF(t)
	aliceCookie, bobCookie := alice.Cookie(webtest.CSRFCookieName), bob.Cookie(webtest.CSRFCookieName)
	if aliceToken == "" || bobToken == "" || aliceCookie == "" || bobCookie == "" {
		t.Fatalf("Got(tokens, cookies) = %q %q %q %q; want all four", aliceToken, bobToken, aliceCookie, bobCookie)
	}

	tests := []struct {
		name   string
		client *webtest.Client
		cookie string // CSRF cookie planted first ("" leaves the client's)
		token  string
	}{
		{"bob's cookie and token in alice's browser", alice, bobCookie, bobToken},
		{"alice's cookie and token in bob's session", bob, aliceCookie, aliceToken},
		{"alice's own cookie, bob's token", alice, aliceCookie, bobToken},
		{"the cookie value as the token", alice, aliceCookie, aliceCookie},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.client.SetCookie(webtest.CSRFCookieName, tc.cookie)
			before := env.Counts(t)
			if s, body := post(tc.client, tc.token, invite(string(rune('a'+i)))); s != http.StatusForbidden || !strings.Contains(strings.ToLower(body), "csrf") {
				t.Errorf("Got(status) = %d %.200s; want 403 naming the CSRF token", s, body)
			}
			env.Unchanged(t, before)
		})
	}

	// Her own token in her own session works.
	alice.SetCookie(webtest.CSRFCookieName, aliceCookie)
	if s, body := post(alice, alice.CSRF(t), invite("ok")); s != http.StatusSeeOther {
		t.Errorf("Got(alice's own token) = %d %.200s; want 303", s, body)
	}
	// A new session (sign out, sign in again) makes the old token worthless,
	// with the same CSRF cookie.
	if s, _, _ := alice.Post(t, "/logout", url.Values{}); s != http.StatusSeeOther {
		t.Fatalf("Got(logout) = %d; want 303", s)
	}
	again := env.Anonymous()
	again.Jar = alice.Jar
	if _, err := again.LoginFlow("alice@acme.test"); err != nil {
		t.Fatal(err)
	}
	if alice.Cookie(webtest.CSRFCookieName) != aliceCookie {
		t.Fatalf("Got(CSRF cookie after signing in again) changed; want the same cookie (the token must change with the session alone)")
	}
	before := env.Counts(t)
	if s, body := post(alice, aliceToken, invite("stale")); s != http.StatusForbidden {
		t.Errorf("Got(the previous session's token) = %d %.200s; want 403", s, body)
	}
	env.Unchanged(t, before)
}

// TestCSRFProblem: every refusal of the CSRF protection reaches the error
// handler as a typed error and is answered as the csrf problem (API) or a
// 403 page naming the token, and changes nothing.
func TestCSRFProblem(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "alice@acme.test", tenants.RoleAdmin)
	alice := env.Login(t, "alice@acme.test")
	body := `{"email":"csrf-victim@acme.test","role":"admin"}`
	tests := []struct {
		name string
		hdr  []string
	}{
		{"no token", nil},
		{"a wrong token", []string{"X-CSRF-Token", "forged"}},
		{"cross-site, with the token", []string{"X-CSRF-Token", alice.CSRF(t), "Sec-Fetch-Site", "cross-site"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := env.Counts(t)
			s, raw, h := alice.Request(t, http.MethodPost, "/api/v1/members", "application/json", strings.NewReader(body), tc.hdr...)
			p := webtest.Problem(t, h, raw)
			if s != http.StatusForbidden || p.Type != errdefs.ProblemBase+"csrf" || !strings.Contains(p.Detail, "CSRF token") {
				t.Errorf("Got(POST /api/v1/members) = %d %s %q; want 403 %scsrf naming the token", s, p.Type, p.Detail, errdefs.ProblemBase)
			}
			env.Unchanged(t, before)
		})
	}
}
