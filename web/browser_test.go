package web_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// artifacts is test-artifacts/ at the repository root.
const artifacts = "../test-artifacts"

// TestBrowser signs in with headless Chromium through the development
// identity provider's form, lands on the dashboard, walks the main pages
// and saves a screenshot of each. Any console error, uncaught exception or
// CSP violation fails it.
func TestBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	env := webtest.New(t, webtest.Options{Operators: []string{"dev@example.com"}})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "dev@example.com", tenants.RoleAdmin)
	env.Member(t, acme, "ada@example.com", tenants.RoleDeveloper)
	env.Member(t, acme, "grace@example.com", tenants.RoleAuditor)
	env.NewToken(t, acme, "nightly-evals", tenants.RoleDeveloper)
	env.TenantNamed(t, "globex", "Globex Industries")
	css := webtest.CSS
	where := func() *url.URL {
		t.Helper()
		u, err := url.Parse(b.Location(t))
		if err != nil {
			t.Fatal(err)
		}
		return u
	}

	// Signed out, the app sends the browser to the sign-in page.
	b.Do(t, "open /", chromedp.Navigate(env.URL+"/"), chromedp.WaitVisible(css(`form[action="/login/start"] button`)))
	if u := where(); u.Path != "/login" || u.Query().Get("return_to") != "/" {
		t.Fatalf("Got(location after GET /) = %s; want /login?return_to=/", u)
	}
	b.Screenshot(t, artifacts, "login.png")

	b.Do(t, "click Sign in", chromedp.Click(css(`form[action="/login/start"] button`)), chromedp.WaitVisible(css(`input[name="email"]`)))
	if u := where(); !strings.HasPrefix(u.Path, "/dev-idp/") {
		t.Fatalf("Got(location after Sign in) = %s; want the development identity provider", u)
	}
	b.Do(t, "sign in at the provider",
		chromedp.SendKeys(css(`input[name="email"]`), "dev@example.com"),
		chromedp.Click(css(`button[value="login"]`)),
		chromedp.WaitVisible(css(`main h1`)))
	if u := where(); u.Path != "/" {
		t.Fatalf("Got(location after login) = %s; want /", u)
	}
	if h1 := b.Text(t, `main h1`); h1 != acme.Name {
		t.Errorf("Got(dashboard heading) = %q; want %q", h1, acme.Name)
	}
	b.Screenshot(t, artifacts, "login-dashboard.png")

	b.Do(t, "members", chromedp.Navigate(env.URL+"/settings/members"), chromedp.WaitVisible(css(`main table`)))
	if body := b.Text(t, `main table`); !strings.Contains(body, "ada@example.com") || !strings.Contains(body, "grace@example.com") {
		t.Errorf("Got(members table) = %q; want the invited members", body)
	}
	b.Screenshot(t, artifacts, "members.png")

	// Create a token through the form: its secret is shown once.
	b.Do(t, "tokens", chromedp.Navigate(env.URL+"/settings/tokens"), chromedp.WaitVisible(css(`input[name="name"]`)))
	b.Do(t, "create a token",
		chromedp.SendKeys(css(`input[name="name"]`), "ci-runner"),
		chromedp.Click(css(`form[action="/settings/tokens"] button[type="submit"]`)),
		chromedp.WaitVisible(css(`.secret-box`)),
		// app.js reveals the copy button: the page's script runs under the CSP.
		chromedp.WaitVisible(css(`button[data-copy="new-secret"]`)))
	secret := b.Text(t, `#new-secret`)
	if !regexp.MustCompile(`^stk_[a-z2-7]{8}_[a-z2-7]{52}$`).MatchString(secret) {
		t.Errorf("Got(new token) = %q; want a stk_ token", secret)
	}
	if s, m := me(t, env.WithToken(secret)); s != http.StatusOK || m.Token == nil || m.Token.Name != "ci-runner" {
		t.Errorf("Got(/api/v1/me with the new token) = %d %+v; want token ci-runner", s, m)
	}
	b.Screenshot(t, artifacts, "tokens.png")

	b.Do(t, "audit", chromedp.Navigate(env.URL+"/audit"), chromedp.WaitVisible(css(`main table`)))
	if body := b.Text(t, `main table`); !strings.Contains(body, "token.created") {
		t.Errorf("Got(audit table) lacks token.created; want the token just made: %.300q", body)
	}
	b.Screenshot(t, artifacts, "audit.png")

	b.Do(t, "tenants", chromedp.Navigate(env.URL+"/operator/tenants"), chromedp.WaitVisible(css(`main table`)))
	if body := b.Text(t, `main table`); !strings.Contains(body, "globex") || !strings.Contains(body, "acme-corp") {
		t.Errorf("Got(tenants table) = %q; want every tenant", body)
	}
	b.Screenshot(t, artifacts, "tenants.png")

	// The dashboard on a phone.
	b.Do(t, "phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(env.URL+"/"), chromedp.WaitVisible(css(`main h1`)))
	b.Screenshot(t, artifacts, "dashboard-phone.png")
	b.Do(t, "desktop", chromedp.ResetViewport())

	for _, p := range b.Problems() {
		t.Errorf("Got(console) %s; want no errors, exceptions or CSP violations", p)
	}

	// The console check can fail: an inline script is refused and reported.
	before := len(b.Problems())
	b.Do(t, "inject an inline script", chromedp.Evaluate[chromedp.Void](
		`(() => { const s = document.createElement("script"); s.textContent = "window.inlineRan = true"; document.body.appendChild(s); })()`))
	ran, err := chromedp.Run(b.Ctx, chromedp.Evaluate[bool](`window.inlineRan === true`))
	if err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Errorf("Got(inline script ran) = true; want the CSP to block it")
	}
	waitFor(t, func() bool { return len(b.Problems()) > before }, "the CSP violation of the injected script in the console")
}

// waitFor polls cond for a few seconds.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for range 100 {
		if cond() {
			return
		}
		sleep()
	}
	t.Errorf("Got(%s) = nothing after 5s; want it", what)
}
