package web_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal/terminaltest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/web/webtest"
)

// walkDir is where the walk leaves its screenshots and timings.
var walkDir = filepath.Join(artifacts, "walk")

// walkDetail names the detail pages the walk opens from the links of the
// navigation's pages: the first link of each kind. Other links (exports,
// artifacts, filters of a page already seen) are not pages of their own.
var walkDetail = []struct {
	name string
	re   *regexp.Regexp
}{
	{"sandbox", regexp.MustCompile(`^/sandboxes/[0-9a-f-]{36}$`)},
	{"terminal-recording", regexp.MustCompile(`^/terminals/[0-9a-f-]{36}$`)},
	{"run", regexp.MustCompile(`^/runs/[0-9a-f-]{36}$`)},
	{"workflow-new", regexp.MustCompile(`^/workflows/new$`)},
	{"workflow", regexp.MustCompile(`^/workflows/[a-z0-9][a-z0-9-]*$`)},
	{"policy-version", regexp.MustCompile(`^/policy/versions/\d+$`)},
	{"compliance-probe", regexp.MustCompile(`^/compliance/probes/[0-9a-f-]{36}$`)},
	{"compliance-print", regexp.MustCompile(`^/compliance/print$`)},
	{"sandbox-usage", regexp.MustCompile(`^/usage/sandboxes/[0-9a-f-]{36}$`)},
}

// walkPageName is the file name part of a navigation page: "/" is the
// dashboard, "/settings/members" settings-members.
func walkPageName(path string) string {
	if path == "/" {
		return "dashboard"
	}
	return strings.ReplaceAll(strings.Trim(path, "/"), "/", "-")
}

// walkTiming is one page load as the browser measured it.
type walkTiming struct {
	role, page, path string
	ttfb, dom, load  float64 // ms from the start of the navigation
}

// TestWalkBrowser is the walk of the whole UI: one seeded tenant, one
// browser, each role in turn (and a platform operator with no tenant). It
// opens every page of the role's navigation and the detail page of each
// kind of object those pages link to (sandbox, run, terminal recording,
// workflow, policy version, probe), at desktop (1366x900) and phone
// (390x844) width, and for each: it answers 200, writes nothing to the
// console that means a fault (errors, exceptions, warnings) and raises no
// CSP violation, and at phone width the document is no wider than the
// screen. It saves test-artifacts/walk/<role>/<page>-desktop.png and
// -phone.png, and each page's load times to test-artifacts/walk/timings.txt
// (figures to read, not a timed assertion).
func TestWalkBrowser(t *testing.T) {
	env := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t), Operators: []string{"olga@example.com"}})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	people := []struct{ role, email string }{
		{"admin", "ada@example.com"}, {"manager", "mona@example.com"}, {"developer", "dev@example.com"},
		{"auditor", "audrey@example.com"}, {"billing", "bill@example.com"}, {"operator", "olga@example.com"},
	}
	for _, p := range people {
		if p.role != "operator" {
			env.Member(t, acme, p.email, tenants.Role(p.role))
		}
	}
	seedWalk(t, env, acme)
	if err := os.RemoveAll(walkDir); err != nil {
		t.Fatal(err)
	}

	b := webtest.NewBrowser(t)
	b.WatchCSP(t)
	// The watch sees what a page does against the policy: here an inline
	// script, which the CSP forbids (and the console reports).
	mark := b.Mark()
	b.Do(t, "open /login", chromedp.Navigate(env.URL+"/login"))
	webtest.Eval[bool](t, b, `(() => { const s = document.createElement("script"); s.textContent = "window.inlineRan = true"; document.head.append(s); return true; })()`)
	for deadline := time.Now().Add(10 * time.Second); len(b.CSPViolations(t)) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Got(CSP violations after an inline script) = none (watch installed: %v); want the watch to see it",
				webtest.Eval[bool](t, b, `Array.isArray(window.__stockadeCSP)`))
		}
	}
	// The console reports it too, a moment later.
	for deadline := time.Now().Add(10 * time.Second); len(b.ProblemsSince(mark)) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Got(console after a CSP violation) = nothing; want the report")
		}
	}
	var timings []walkTiming
	sizes := []struct {
		name string
		w, h int64
		opts []chromedp.EmulateViewportOption
	}{{"desktop", 1366, 900, nil}, {"phone", 390, 844, []chromedp.EmulateViewportOption{chromedp.EmulateMobile, chromedp.EmulateTouch}}}
	for _, p := range people {
		t.Run(p.role, func(t *testing.T) {
			b.ClearCookies(t)
			b.Do(t, "desktop", chromedp.EmulateViewport(sizes[0].w, sizes[0].h))
			b.Login(t, env.URL+"/", p.email, `nav.sidenav`)
			var pages []string
			for _, l := range walkLinks(t, b, "nav.sidenav") {
				if !slices.Contains(pages, l) {
					pages = append(pages, l)
				}
			}
			names := map[string]string{}
			for _, pg := range pages {
				names[pg] = walkPageName(pg)
			}
			// The detail pages: the first link of each kind on the
			// navigation's pages.
			for _, pg := range slices.Clone(pages) {
				b.Do(t, "open "+pg, chromedp.Navigate(env.URL+pg))
				for _, l := range walkLinks(t, b, "main") {
					for _, d := range walkDetail {
						if !d.re.MatchString(l) {
							continue
						}
						if _, seen := names[l]; !seen && !slices.Contains(slices.Collect(maps.Values(names)), d.name) {
							pages = append(pages, l)
							names[l] = d.name
						}
						break
					}
				}
			}
			for _, size := range sizes {
				b.Do(t, size.name, chromedp.EmulateViewport(size.w, size.h, size.opts...))
				for _, pg := range pages {
					mark := b.Mark()
					resp, err := chromedp.RunResponse(b.Ctx, chromedp.Navigate(env.URL+pg))
					if err != nil {
						t.Fatalf("open %s: %v", pg, err)
					}
					if resp.Status != http.StatusOK {
						t.Errorf("Got(GET %s as %s) = %d; want 200", pg, p.role, resp.Status)
					}
					name := names[pg]
					b.Screenshot(t, filepath.Join(walkDir, p.role), name+"-"+size.name+".png")
					for _, v := range b.CSPViolations(t) {
						t.Errorf("Got(CSP violation on %s, %s) %s; want none", pg, size.name, v)
					}
					for _, m := range b.ProblemsSince(mark) {
						t.Errorf("Got(console on %s, %s) %s; want no errors, exceptions or CSP reports", pg, size.name, m)
					}
					// Words run together where a template joins text to a
					// time or a name without a space ("UTCby", "since2026").
					if joins := webtest.Eval[[]string](t, b, walkJoins); len(joins) > 0 {
						t.Errorf("Got(text of %s) with words run together: %q; want spaces", pg, joins)
					}
					if size.name == "phone" {
						w := webtest.Eval[[]float64](t, b, `[document.documentElement.scrollWidth, window.innerWidth, document.documentElement.clientWidth]`)
						if w[0] > float64(size.w) || w[0] > w[2] {
							t.Errorf("Got(document width of %s at 390 px) = %v (scroll, inner, client); want no wider than the screen; too wide: %v",
								pg, w, webtest.Eval[[]string](t, b, walkOverflowing))
						}
						// Nor is anything cut off inside a box that scrolls
						// or clips (a form control past a card's edge).
						if cut := webtest.Eval[[]string](t, b, walkClipped); len(cut) > 0 {
							t.Errorf("Got(controls of %s cut off at 390 px) %v; want every control on the screen", pg, cut)
						}
						continue
					}
					nt := webtest.Eval[[]float64](t, b, `(n => [n.responseStart - n.startTime, n.domContentLoadedEventEnd - n.startTime, n.loadEventEnd - n.startTime])(performance.getEntriesByType("navigation")[0])`)
					timings = append(timings, walkTiming{role: p.role, page: name, path: pg, ttfb: nt[0], dom: nt[1], load: nt[2]})
				}
			}
			walkPhoneMenu(t, b, env.URL, p.role)
		})
	}
	writeWalkTimings(t, timings)
}

// walkJoins finds text run together: a time's "UTC" followed by a
// letter, a letter followed by a date.
const walkJoins = `Array.from(document.body.innerText.matchAll(/\S*(:\d\d UTC[A-Za-z]|[A-Za-z]\d{4}-\d{2}-\d{2})\S*/g), m => m[0]).slice(0, 5)`

// walkClipped lists the form controls and links whose right edge is past
// the screen's: hidden in a box that scrolls or clips, a person at phone
// width cannot reach them (code and terminals scroll by design).
const walkClipped = `Array.from(document.querySelectorAll("main input:not([type=hidden]), main select, main textarea, main button, main a")).filter(e => {
  const r = e.getBoundingClientRect();
  return r.width > 0 && e.checkVisibility() && r.right > document.documentElement.clientWidth + 1 && !e.closest("pre, .xterm, .terminal");
}).slice(0, 8).map(e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.name ? "[name=" + e.name + "]" : "") + " " + (e.textContent || "").trim().slice(0, 30) + " " + Math.round(e.getBoundingClientRect().right) + "px")`

// walkOverflowing lists the elements wider than the screen whose parent is
// not (the ones to fix), for a failure message.
const walkOverflowing = `Array.from(document.querySelectorAll("body *")).filter(e => {
  const r = e.getBoundingClientRect(), p = e.parentElement.getBoundingClientRect();
  return r.right > document.documentElement.clientWidth + 0.5 && p.right <= document.documentElement.clientWidth + 0.5;
}).slice(0, 8).map(e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className && typeof e.className === "string" ? "." + e.className.split(" ").join(".") : "") + " " + Math.round(e.getBoundingClientRect().right) + "px")`

// walkPhoneMenu: at phone width the navigation is one menu button; its
// links are hidden until it is opened, and it opens from the keyboard.
func walkPhoneMenu(t *testing.T, b *webtest.Browser, base, role string) {
	t.Helper()
	b.Do(t, "settings at phone width", chromedp.Navigate(base+"/settings"), chromedp.WaitVisible(webtest.CSS(`button[data-navtoggle]`)))
	if n := webtest.Eval[int](t, b, `Array.from(document.querySelectorAll("nav.sidenav a")).filter(a => a.offsetParent !== null).length`); n != 0 {
		t.Errorf("Got(visible navigation links at phone width, menu closed) = %d; want 0", n)
	}
	b.Do(t, "open the menu from the keyboard", chromedp.Focus(webtest.CSS(`button[data-navtoggle]`)), chromedp.KeyEvent("\r"))
	if n := webtest.Eval[int](t, b, `Array.from(document.querySelectorAll("nav.sidenav a")).filter(a => a.offsetParent !== null).length`); n == 0 {
		t.Errorf("Got(visible navigation links after Enter on the menu) = 0; want the navigation")
	}
	if got := b.Attr(t, `button[data-navtoggle]`, "aria-expanded"); got != "true" {
		t.Errorf("Got(aria-expanded of the open menu) = %q; want true", got)
	}
	b.Screenshot(t, filepath.Join(walkDir, role), "menu-open-phone.png")
}

// walkLinks lists the same-origin links under sel, as written in the page,
// without their query and fragment.
func walkLinks(t *testing.T, b *webtest.Browser, sel string) []string {
	t.Helper()
	return webtest.Eval[[]string](t, b, `Array.from(document.querySelectorAll(`+webtest.JSString(sel+` a[href^="/"]`)+`), a => a.getAttribute("href").split(/[?#]/)[0])`)
}

// writeWalkTimings writes the load times table.
func writeWalkTimings(t *testing.T, rows []walkTiming) {
	t.Helper()
	if err := os.MkdirAll(walkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(walkDir, "timings.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintf(f, "Page loads of the walk at 1366x900, one Chromium tab, SQLite, ms from navigation start (TestWalkBrowser, %s)\n\n", time.Now().UTC().Format(time.RFC3339))
	w := tabwriter.NewWriter(f, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "role\tpage\tfirst byte\tDOM ready\tloaded\t")
	var worst walkTiming
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%.0f\t%.0f\t%.0f\t\n", r.role, r.page, r.ttfb, r.dom, r.load)
		if r.load > worst.load {
			worst = r
		}
	}
	w.Flush()
	fmt.Fprintf(f, "\nslowest: %s as %s, %.0f ms (%s)\n", worst.page, worst.role, worst.load, worst.path)
	t.Logf("walk: %d page loads; slowest %s as %s, %.0f ms", len(rows), worst.path, worst.role, worst.load)
}

// seedWalk gives the tenant one of everything the pages show: a running
// and an ended sandbox with usage, a terminal recording, an egress denial,
// a probe run, a workflow with a run, two policy versions, a secret, an
// API token, a webhook endpoint, a pending invitation, a host.
func seedWalk(t *testing.T, env *webtest.Env, acme tenants.Tenant) {
	t.Helper()
	ctx, sys := context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}
	var running sandbox.Sandbox
	for i, st := range []sandbox.State{sandbox.StateRunning, sandbox.StateDestroyed} {
		sb := sandboxtest.RecordState(t, env.DB, acme.ID, "dev@example.com", st)
		if i == 0 {
			running = sb
		}
		webtest.Meter(t, env.DB, webtest.Run{TenantID: acme.ID, SandboxID: sb.ID, Template: "debian", UserID: "u-dev", UserName: "dev@example.com",
			VCPUs: 1, MemoryMiB: 512, Start: time.Now().Add(-time.Duration(3+i) * time.Hour), For: time.Hour, Cores: 0.3, UsedMiB: 100,
			GrowMiB: 50, EgressUp: 1_000_000, EgressDown: 5_000_000, Every: 10 * time.Minute})
	}
	terminaltest.Record(t, env.DB, env.Terminals.Config().DataDir, acme.ID, running.ID, "dev@example.com")
	if err := egress.NewStore(env.DB).Record(ctx, &egress.Event{TenantID: acme.ID, SandboxID: running.ID, Method: "CONNECT",
		Host: "pypi.org", Port: 443, Decision: egress.DecisionDeny, Rule: "default deny", StartedAt: time.Now()}); err != nil {
		t.Fatalf("record egress event: %v", err)
	}
	recordProbeRun(t, env.DB, acme.ID, "probe output\n", nil)
	recordRun(t, env, acme.ID, "nightly-evals", "dev@example.com")
	doc := policy.Defaults()
	for _, host := range []string{"api.github.com", "pypi.org"} {
		doc.Network.Egress.Allow = append(doc.Network.Egress.Allow, policy.Rule{Domain: host, Ports: []int{443}})
		if _, err := env.Policies.Save(ctx, sys, acme.ID, policy.Edit{Doc: doc, Reason: "allow " + host}); err != nil {
			t.Fatalf("save policy: %v", err)
		}
	}
	if _, err := env.Secrets.Create(ctx, sys, acme.ID, secrets.NewSecret{Name: "GITHUB_TOKEN", Value: "ghp_walk", Hosts: []string{"api.github.com"}}); err != nil {
		t.Fatalf("create secret: %v", err)
	}
	env.NewToken(t, acme, "nightly-evals", tenants.RoleDeveloper)
	env.Invite(t, acme, "newhire@example.com", tenants.RoleDeveloper)
	// A frozen tenant, for the operator's pages.
	globex := env.TenantNamed(t, "globex", "Globex Industries")
	if _, err := env.Store.FreezeTenant(ctx, sys, globex.ID, "unpaid invoice"); err != nil {
		t.Fatalf("freeze tenant: %v", err)
	}
	if err := env.DB.FirstOrCreate(&vmpool.Host{URI: "test:///walk", Health: vmpool.HealthOK, CPUs: 4}).Error; err != nil {
		t.Fatalf("record host: %v", err)
	}
}
