package web_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// navPages are all the pages any navigation links to: the tenant's pages,
// the Settings hub and its pages, the platform operators' pages.
var navPages = []string{
	"/", "/sandboxes", "/terminals", "/workflows", "/runs", "/vms", "/policy", "/egress", "/usage", "/compliance", "/audit",
	"/settings", "/settings/members", "/settings/tokens", "/settings/secrets", "/settings/integrations",
	"/operator/tenants", "/operator/usage", "/operator/prices", "/operator/hosts",
}

// TestNavBrowser signs in as each role (and a platform operator with no
// tenant) in headless Chromium and collects every link of the sidebar, of
// the dashboard and of the Settings hub. Every one must answer 200 to the
// browser, the walk must write no auth.access_denied, and the pages left
// out must be exactly those the role is refused: each of navPages the
// sidebar lacks does not answer 200 to the same person.
func TestNavBrowser(t *testing.T) {
	env := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t), Operators: []string{"olga@example.com"}})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	people := []struct {
		email string
		role  tenants.Role // "" for the operator: no tenant
		// some pages the sidebar must show, and some it must not
		shown, hidden []string
	}{
		{"ada@example.com", tenants.RoleAdmin, []string{"/sandboxes", "/usage", "/audit", "/settings/secrets", "/settings/integrations"}, []string{"/operator/tenants"}},
		{"mona@example.com", tenants.RoleManager, []string{"/sandboxes", "/usage", "/compliance", "/audit", "/settings/members"}, []string{"/operator/hosts"}},
		{"dev@example.com", tenants.RoleDeveloper, []string{"/sandboxes", "/terminals", "/runs", "/vms", "/settings/secrets"}, []string{"/usage", "/audit", "/compliance", "/settings/members", "/settings/integrations", "/operator/tenants"}},
		{"audrey@example.com", tenants.RoleAuditor, []string{"/sandboxes", "/compliance", "/audit", "/settings/members"}, []string{"/vms", "/usage", "/settings/integrations", "/operator/tenants"}},
		{"bill@example.com", tenants.RoleBilling, []string{"/", "/usage", "/policy", "/settings"}, []string{"/sandboxes", "/terminals", "/workflows", "/runs", "/vms", "/egress", "/compliance", "/audit", "/settings/members", "/settings/secrets", "/settings/integrations", "/operator/tenants"}},
		{"olga@example.com", "", []string{"/operator/tenants", "/operator/usage", "/operator/prices", "/operator/hosts"}, []string{"/", "/sandboxes", "/settings"}},
	}
	for _, p := range people {
		if p.role != "" {
			env.Member(t, acme, p.email, p.role)
		}
	}
	// Something to link to: a running and an ended sandbox with usage.
	for i, st := range []sandbox.State{sandbox.StateRunning, sandbox.StateDestroyed} {
		sb := sandboxtest.RecordState(t, env.DB, acme.ID, "dev@example.com", st)
		webtest.Meter(t, env.DB, webtest.Run{TenantID: acme.ID, SandboxID: sb.ID, Template: "debian", UserID: "u-dev", UserName: "dev@example.com",
			VCPUs: 1, MemoryMiB: 512, Start: time.Now().Add(-time.Duration(3+i) * time.Hour), For: time.Hour, Cores: 0.3, UsedMiB: 100,
			GrowMiB: 50, EgressUp: 1_000_000, EgressDown: 5_000_000, Every: 10 * time.Minute})
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	// hrefs lists the same-origin links under sel, as written in the page.
	hrefs := func(b *webtest.Browser, sel string) []string {
		t.Helper()
		got, err := chromedp.Run(b.Ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(`+"`"+sel+` a[href^="/"]`+"`"+`), a => a.getAttribute("href"))`))
		if err != nil {
			t.Fatalf("links under %s: %v", sel, err)
		}
		return got
	}
	// denials counts auth.access_denied in the tenant's and the platform's log.
	denials := func() int {
		t.Helper()
		n := 0
		for _, id := range []string{acme.ID, ""} {
			evs, err := env.Audit.List(t.Context(), id, audit.Filter{Type: audit.TypeAccessDenied, Limit: audit.MaxLimit})
			if err != nil {
				t.Fatal(err)
			}
			n += len(evs)
		}
		return n
	}
	for _, p := range people {
		t.Run(p.email, func(t *testing.T) {
			before := denials()
			b := webtest.NewBrowser(t)
			b.Do(t, "open /", chromedp.Navigate(env.URL+"/"), chromedp.WaitVisible(css(`form[action="/login/start"] button`)))
			b.Do(t, "click Sign in", chromedp.Click(css(`form[action="/login/start"] button`)), chromedp.WaitVisible(css(`input[name="email"]`)))
			b.Do(t, "sign in at the provider", chromedp.SendKeys(css(`input[name="email"]`), p.email),
				chromedp.Click(css(`button[value="login"]`)), chromedp.WaitVisible(css(`nav.sidenav`)))
			nav := hrefs(b, "nav.sidenav")
			for _, want := range p.shown {
				if !slices.Contains(nav, want) {
					t.Errorf("Got(sidebar) = %v; want a link to %s", nav, want)
				}
			}
			for _, no := range p.hidden {
				if slices.Contains(nav, no) {
					t.Errorf("Got(sidebar) = %v; want no link to %s", nav, no)
				}
			}
			links := slices.Clone(nav)
			if p.role != "" {
				b.Do(t, "dashboard", chromedp.Navigate(env.URL+"/"), chromedp.WaitVisible(css(`#areas-title`)))
				links = append(links, hrefs(b, "main")...)
				b.Do(t, "settings", chromedp.Navigate(env.URL+"/settings"), chromedp.WaitVisible(css(`#profile-title`)))
				links = append(links, hrefs(b, "main")...)
				// The hub's cards are the sidebar's pages under Settings.
				var under []string
				for _, l := range nav {
					if strings.HasPrefix(l, "/settings/") {
						under = append(under, l)
					}
				}
				if hub := hrefs(b, "ul.link-cards"); !slices.Equal(hub, under) {
					t.Errorf("Got(Settings hub cards) = %v; want the sidebar's pages under Settings, %v", hub, under)
				}
			}
			slices.Sort(links)
			links = slices.Compact(links)
			for _, l := range links {
				st, err := chromedp.Run(b.Ctx, chromedp.Evaluate[[]any](`fetch("`+l+`", {redirect: "manual"}).then(r => [r.status, r.type])`, chromedp.EvalAwaitPromise))
				if err != nil || len(st) != 2 || st[0] != float64(http.StatusOK) {
					t.Errorf("Got(GET %s from the page) = %v, %v; want 200", l, st, err)
				}
			}
			// Two levels further (the pages of the navigation, then the
			// pages they link to): no link leads to a refusal either.
			seen := map[string]bool{}
			for _, l := range links {
				seen[l] = true
			}
			level := nav
			for depth := 0; depth < 2; depth++ {
				var next []string
				for _, pg := range level {
					b.Do(t, "open "+pg, chromedp.Navigate(env.URL+pg), chromedp.WaitReady(css(`body`)))
					for _, l := range hrefs(b, "main") {
						if seen[l] {
							continue
						}
						seen[l] = true
						st, err := chromedp.Run(b.Ctx, chromedp.Evaluate[[]any](`fetch("`+l+`", {redirect: "manual"}).then(r => [r.status, (r.headers.get("Content-Type") || "")])`, chromedp.EvalAwaitPromise))
						if err != nil || len(st) != 2 || st[0] == float64(http.StatusForbidden) {
							t.Errorf("Got(GET %s, linked from %s) = %v, %v; want no refusal", l, pg, st, err)
							continue
						}
						// A terminal page connects at once (no VM here: 503).
						if ct, _ := st[1].(string); st[0] == float64(http.StatusOK) && strings.HasPrefix(ct, "text/html") && !strings.HasSuffix(l, "/terminal") {
							next = append(next, l)
						}
					}
				}
				level = next
			}
			for _, m := range b.Problems() {
				t.Errorf("Got(console) %s; want no errors, exceptions or CSP violations", m)
			}
			if n := denials() - before; n != 0 {
				t.Errorf("Got(auth.access_denied written by the walk) = %d; want 0", n)
			}
			// The pages left out are those refused to the same person.
			c := env.Login(t, p.email)
			for _, pg := range navPages {
				if slices.Contains(nav, pg) {
					continue
				}
				if st, _ := c.GetPage(t, pg); st == http.StatusOK {
					t.Errorf("Got(GET %s) = 200 as %s; want it in the sidebar, or refused", pg, p.email)
				}
			}
		})
	}
}

// TestNavScreenshots saves the dashboard and the Settings hub of a
// developer and of billing at desktop (1366x900) and phone (390x844) width
// to test-artifacts/.
func TestNavScreenshots(t *testing.T) {
	env := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t)})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "ada@example.com", tenants.RoleAdmin)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	for _, p := range []struct {
		email string
		role  tenants.Role
	}{{"dev@example.com", tenants.RoleDeveloper}, {"bill@example.com", tenants.RoleBilling}} {
		env.Member(t, acme, p.email, p.role)
		b := webtest.NewBrowser(t)
		b.Do(t, "open /", chromedp.Navigate(env.URL+"/"), chromedp.WaitVisible(css(`form[action="/login/start"] button`)))
		b.Do(t, "click Sign in", chromedp.Click(css(`form[action="/login/start"] button`)), chromedp.WaitVisible(css(`input[name="email"]`)))
		b.Do(t, "sign in", chromedp.SendKeys(css(`input[name="email"]`), p.email),
			chromedp.Click(css(`button[value="login"]`)), chromedp.WaitVisible(css(`#areas-title`)))
		for _, size := range []struct {
			name string
			w, h int64
		}{{"desktop", 1366, 900}, {"phone", 390, 844}} {
			opts := []chromedp.EmulateViewportOption{}
			if size.name == "phone" {
				opts = append(opts, chromedp.EmulateMobile)
			}
			b.Do(t, "dashboard "+size.name, chromedp.EmulateViewport(size.w, size.h, opts...), chromedp.Navigate(env.URL+"/"), chromedp.WaitVisible(css(`#areas-title`)))
			b.Screenshot(t, artifacts, "nav-dashboard-"+string(p.role)+"-"+size.name+".png")
			b.Do(t, "settings "+size.name, chromedp.Navigate(env.URL+"/settings"), chromedp.WaitVisible(css(`#profile-title`)))
			b.Screenshot(t, artifacts, "nav-settings-"+string(p.role)+"-"+size.name+".png")
		}
		for _, m := range b.Problems() {
			t.Errorf("Got(console) %s; want no errors, exceptions or CSP violations", m)
		}
		// A typed URL still reaches a 403 page (the browser logs its status).
		b.Do(t, "forbidden", chromedp.EmulateViewport(1366, 900), chromedp.Navigate(env.URL+"/audit"), chromedp.WaitVisible(css(`.error-status`)))
		b.Screenshot(t, artifacts, "nav-forbidden-"+string(p.role)+".png")
	}
}

// TestNavForbiddenPage: a 403 page reached by typing a URL says in words
// what the role can do and which admin to ask for which role, not the
// permission's code; the JSON API keeps the machine wording.
func TestNavForbiddenPage(t *testing.T) {
	env := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t)})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "ada@example.com", tenants.RoleAdmin)
	env.Member(t, acme, "alan@example.com", tenants.RoleAdmin)
	env.Member(t, acme, "bill@example.com", tenants.RoleBilling)
	env.Member(t, acme, "dev@example.com", tenants.RoleDeveloper)
	env.Member(t, acme, "audrey@example.com", tenants.RoleAuditor)
	tests := []struct {
		email, path string
		want        []string
	}{
		{"bill@example.com", "/sandboxes", []string{"Billing members can see usage and exports.",
			"Ask an admin of Acme Corporation (ada@example.com, alan@example.com) for the auditor, developer or manager role to see sandboxes and their egress."}},
		{"dev@example.com", "/usage", []string{"Developer members can start and use sandboxes and terminals",
			"Ask an admin of Acme Corporation (ada@example.com, alan@example.com) for the billing or manager role to see usage and cost."}},
		{"audrey@example.com", "/settings/integrations", []string{"Auditor members can see the audit log",
			"for the manager role to see the integrations."}},
		{"dev@example.com", "/operator/tenants", []string{"This page is for the platform's operators"}},
	}
	for _, tt := range tests {
		t.Run(tt.email+tt.path, func(t *testing.T) {
			c := env.Login(t, tt.email)
			st, body := c.GetPage(t, tt.path)
			if st != http.StatusForbidden {
				t.Fatalf("Got(GET %s as %s) = %d; want 403", tt.path, tt.email, st)
			}
			body = strings.Join(strings.Fields(html.UnescapeString(body)), " ")
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("Got(403 page of %s as %s) without %q; want it in:\n%s", tt.path, tt.email, w, body)
				}
			}
			for _, no := range []string{"does not allow", "sandboxes.read", "usage.read", "integrations.read"} {
				if strings.Contains(body, no) {
					t.Errorf("Got(403 page of %s as %s) with %q; want words, not permission codes", tt.path, tt.email, no)
				}
			}
		})
	}
	t.Run("error pages keep the navigation", func(t *testing.T) {
		c := env.Login(t, "dev@example.com")
		for _, path := range []string{"/usage", "/no-such-page"} {
			_, body := c.GetPage(t, path)
			if !strings.Contains(body, `<a href="/sandboxes">`) || strings.Contains(body, `<a href="/usage">`) {
				t.Errorf("Got(error page of %s for a developer) without their sidebar; want links to /sandboxes, none to /usage", path)
			}
		}
	})
	t.Run("api keeps the machine detail", func(t *testing.T) {
		c := env.WithToken(env.Token(t, acme, tenants.RoleBilling))
		st, body, _ := c.Request(t, http.MethodGet, "/api/v1/sandboxes", "", nil)
		if st != http.StatusForbidden || !strings.Contains(body, "the billing role does not allow sandboxes.read") {
			t.Errorf("Got(GET /api/v1/sandboxes as billing) = %d %s; want 403 naming the permission", st, body)
		}
	})
}

// TestNavDashboardTokenCount: the dashboard's count of active API tokens
// is of the tokens the caller's tokens page lists: all of them for admins
// and managers, none of an admin's for a developer (who, where they may
// open the page at all, sees their own).
func TestNavDashboardTokenCount(t *testing.T) {
	env := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t)})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "ada@example.com", tenants.RoleAdmin)
	env.Member(t, acme, "mona@example.com", tenants.RoleManager)
	env.Member(t, acme, "dev@example.com", tenants.RoleDeveloper)
	admin := env.Login(t, "ada@example.com")
	for _, name := range []string{"ci", "nightly"} {
		if st, body, _ := admin.Post(t, "/settings/tokens", url.Values{"name": {name}, "role": {"developer"}, "ttl": {"720h"}}); st >= 400 {
			t.Fatalf("Got(create token %s) = %d %s; want it made", name, st, body)
		}
	}
	count := regexp.MustCompile(`href="/settings/tokens"[^>]*>\s*<span class="stat-value"[^>]*>(\d+)<`)
	for _, tt := range []struct {
		email string
		want  string // "" for no count shown
		alt   string // also accepted ("" none)
	}{
		{"ada@example.com", "2", ""},
		{"mona@example.com", "2", ""},
		{"dev@example.com", "", "0"},
	} {
		_, body := env.Login(t, tt.email).GetPage(t, "/")
		got := ""
		if m := count.FindStringSubmatch(body); m != nil {
			got = m[1]
		}
		if got != tt.want && (tt.alt == "" || got != tt.alt) {
			t.Errorf("Got(token count on %s's dashboard) = %q; want %q", tt.email, got, tt.want)
		}
	}
}
