package web_test

import (
	"context"
	"html"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/compliance"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestDashboardBrowser signs in as each role in headless Chromium on a
// seeded tenant (sandboxes, a run, metered usage, a probe run, six
// egress denials, a secret near its expiry, a pending invitation; a
// frozen tenant and one near its quota for the operator) and checks the
// role's dashboard: exactly the role's tiles (none for what it may not
// read), their figures those of the seed, every tile's link answering 200
// to the same person, the six denials one folded row, no console errors
// or CSP violations. Screenshots at desktop and phone width go to
// test-artifacts/.
func TestDashboardBrowser(t *testing.T) {
	env := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t), Operators: []string{"olga@example.com"}})
	ctx := context.Background()
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	globex := env.TenantNamed(t, "globex", "Globex")
	roles := map[string]tenants.Role{"ada@example.com": tenants.RoleAdmin, "mona@example.com": tenants.RoleManager,
		"dev@example.com": tenants.RoleDeveloper, "audrey@example.com": tenants.RoleAuditor, "bill@example.com": tenants.RoleBilling}
	for email, r := range roles {
		env.Member(t, acme, email, r)
	}
	env.Member(t, acme, "newbie@example.com", tenants.RoleDeveloper) // never signs in: pending
	// Sign everyone in once, so their users exist (sandboxes name their
	// creator by user id).
	ids := map[string]string{}
	for email := range roles {
		env.Login(t, email)
	}
	ms, err := env.Store.ListMembers(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.UserID != nil {
			ids[m.Email] = *m.UserID
		}
	}
	sys := audit.Actor{Kind: audit.ActorSystem, Name: "dashboard test"}

	// Sandboxes: two of the developer's running and one ended, one of the
	// admin's running. The quota of three running makes acme near it.
	for _, s := range []struct {
		who string
		st  sandbox.State
	}{{"dev@example.com", sandbox.StateRunning}, {"dev@example.com", sandbox.StateRunning}, {"dev@example.com", sandbox.StateDestroyed}, {"ada@example.com", sandbox.StateRunning}} {
		sandboxtest.RecordState(t, env.DB, acme.ID, ids[s.who], s.st)
	}
	q := tenants.DefaultQuota()
	q.MaxSandboxes = 3
	if _, err := env.Store.SetQuota(ctx, sys, acme.ID, q); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.FreezeTenant(ctx, sys, globex.ID, "leaked credentials"); err != nil {
		t.Fatal(err)
	}
	// Usage this month, metered through the accounting path.
	now := time.Now().UTC()
	start := now.Add(-3 * time.Hour)
	if ms := usage.MonthStart(now); start.Before(ms) {
		start = ms
	}
	sb := sandboxtest.RecordState(t, env.DB, acme.ID, ids["dev@example.com"], sandbox.StateDestroyed)
	webtest.Meter(t, env.DB, webtest.Run{TenantID: acme.ID, SandboxID: sb.ID, Template: "debian", UserID: ids["dev@example.com"], UserName: "dev@example.com",
		VCPUs: 2, MemoryMiB: 512, Start: start, For: min(time.Hour, now.Sub(start)-time.Minute), Cores: 0.5, UsedMiB: 100, EgressUp: 1e6, EgressDown: 5e6, Every: 10 * time.Minute})
	// A run of the developer's, started by hand.
	devActor := audit.Actor{Kind: audit.ActorUser, ID: ids["dev@example.com"], Name: "dev@example.com"}
	wf, err := env.Workflows.Save(ctx, devActor, acme.ID, []byte("name: tests\ntriggers:\n  - event: manual\nsteps:\n  - name: test\n    run: make test\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	run, err := env.Runs.Store().Create(ctx, devActor, acme.ID, runs.NewRun{Version: wf, Trigger: runs.Trigger{Kind: runs.TriggerManual}})
	if err != nil {
		t.Fatal(err)
	}
	// A probe run: two escapes tried, both blocked.
	probeID := recordProbeRun(t, env.DB, acme.ID, "probe output\n", []compliance.ProbeCheck{
		{ID: compliance.CheckSSHKeys, Name: compliance.CheckName(compliance.CheckSSHKeys), Outcome: compliance.OutcomeBlocked, Detail: "no keys"},
		{ID: compliance.CheckHostFiles, Name: compliance.CheckName(compliance.CheckHostFiles), Outcome: compliance.OutcomeBlocked, Detail: "no host fs"}})
	// Six refusals of one host by the egress gateway, as it audits them.
	gw := audit.Actor{Kind: audit.ActorSystem, ID: "egress-gateway", Name: "egress gateway"}
	for i := range 6 {
		e := gw.Event(acme.ID, audit.TypeEgressDenied, "sandbox", sb.ID, map[string]any{"host": "evil.example.com", "port": 443, "egress_event": strconv.Itoa(i)})
		e.Outcome = audit.OutcomeDenied
		if err := env.Audit.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// A secret that expires in three days.
	if _, err := env.Secrets.Create(ctx, sys, acme.ID, secrets.NewSecret{Name: "GITHUB_TOKEN", Value: "ghp_x", Hosts: []string{"api.github.com"}, TTL: 72 * time.Hour}); err != nil {
		t.Fatal(err)
	}

	// The figures the seed should show, from the stores.
	mtd, err := env.Usage.MonthToDate(ctx, acme.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if mtd.Total.Cost.IsZero() {
		t.Fatalf("Got(month-to-date cost of the seed) = 0; want the metered run's cost")
	}
	cost := mtd.Total.Cost.Round(2) + " " + mtd.Total.Currency
	pending := func() string {
		ms, err := env.Store.ListMembers(ctx, acme.ID)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range ms {
			if !m.Active() {
				n++
			}
		}
		return strconv.Itoa(n)
	}

	// Each role's tiles, with the figure each must show ("" : any).
	sandboxes := map[string]string{"sandboxes-running": "3"}
	costs := map[string]string{"cost-mtd": cost, "cost-forecast": "", "quota-cpu": ""}
	complianceTiles := map[string]string{"compliance-score": "", "probe": "2 blocked"}
	auditTiles := map[string]string{"denials": "6", "audit-export": "CSV · JSONL"}
	merge := func(ms ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	people := []struct {
		email string
		path  string
		tiles map[string]string
	}{
		{"dev@example.com", "/", map[string]string{"sandboxes-running": "2", "terminals-live": "0", "runs-mine": "1", "tokens": "0"}},
		{"mona@example.com", "/", merge(sandboxes, costs, complianceTiles, auditTiles, map[string]string{"terminals-live": "0", "runs": "1", "runs-success": "", "members": "6", "tokens": "0"})},
		{"bill@example.com", "/", merge(costs, map[string]string{"usage-export": "CSV · JSON", "tokens": "0"})},
		{"audrey@example.com", "/", merge(sandboxes, complianceTiles, auditTiles, map[string]string{"terminals-live": "0", "runs": "1", "runs-success": "", "members": "6", "tokens": "0"})},
		{"ada@example.com", "/", merge(sandboxes, costs, complianceTiles, auditTiles, map[string]string{"terminals-live": "0", "runs": "1", "runs-success": "",
			"usage-export": "CSV · JSON", "invitations": "", "secrets-expiring": "1", "members": "6", "tokens": "0"})},
		{"olga@example.com", "/operator", map[string]string{"hosts": "", "near-quota": "", "frozen": "1"}},
	}
	type tile struct{ ID, Href, Value string }
	for _, p := range people {
		t.Run(p.email, func(t *testing.T) {
			b := webtest.NewBrowser(t)
			b.Login(t, env.URL+p.path, p.email, `nav.sidenav`)
			b.Do(t, "dashboard", chromedp.Navigate(env.URL+p.path), chromedp.WaitVisible(webtest.CSS(`.tiles`)))
			got := webtest.Eval[[]tile](t, b, `Array.from(document.querySelectorAll("a[data-testid^='tile-']"), a => ({ID: a.dataset.testid.slice(5), Href: a.getAttribute("href"),
				Value: a.querySelector("[data-testid$='-value']").textContent.trim()}))`)
			var gotIDs, wantIDs []string
			for _, g := range got {
				gotIDs = append(gotIDs, g.ID)
			}
			for id := range p.tiles {
				wantIDs = append(wantIDs, id)
			}
			sort.Strings(gotIDs)
			sort.Strings(wantIDs)
			if !slices.Equal(gotIDs, wantIDs) {
				t.Errorf("Got(tiles of %s) = %v; want %v", p.email, gotIDs, wantIDs)
			}
			want := p.tiles
			if p.email == "ada@example.com" {
				want["invitations"] = pending()
			}
			for _, g := range got {
				if w, ok := want[g.ID]; ok && w != "" && g.Value != w {
					t.Errorf("Got(tile %s of %s) = %q; want %q", g.ID, p.email, g.Value, w)
				}
				if g.Value == "" || g.Value == "0" && strings.HasPrefix(g.ID, "cost") {
					t.Errorf("Got(tile %s of %s) = %q; want a figure", g.ID, p.email, g.Value)
				}
				st, err := chromedp.Run(b.Ctx, chromedp.Evaluate[float64](`fetch(`+webtest.JSString(g.Href)+`, {redirect: "manual"}).then(r => r.status)`, chromedp.EvalAwaitPromise))
				if err != nil || st != http.StatusOK {
					t.Errorf("Got(GET %s, tile %s of %s) = %v, %v; want 200", g.Href, g.ID, p.email, st, err)
				}
			}
			if _, ok := p.tiles["denials"]; ok {
				rows := webtest.Eval[[][]string](t, b, `Array.from(document.querySelectorAll("[data-testid=recent-row]"), r => [r.querySelector("code").textContent,
					(r.querySelector("[data-testid=recent-count]") || {textContent: ""}).textContent.trim(), (r.querySelector("td[data-label=Target] a") || {textContent: ""}).textContent])`)
				var denials [][]string
				for _, r := range rows {
					if r[0] == audit.TypeEgressDenied {
						denials = append(denials, r)
					}
				}
				if len(denials) != 1 || denials[0][1] != "×6" || !strings.HasPrefix(denials[0][2], "sandbox "+sb.ID[len(sb.ID)-12:]) {
					t.Errorf("Got(egress denials in the recent activity of %s) = %v; want one row ×6 naming and linking the sandbox by its short id", p.email, denials)
				}
			}
			if _, ok := p.tiles["runs-mine"]; ok {
				if href := b.Attr(t, `[data-testid=recent-run] a`, "href"); href != "/runs/"+run.ID {
					t.Errorf("Got(recent run link of %s) = %q; want /runs/%s", p.email, href, run.ID)
				}
			}
			if _, ok := p.tiles["probe"]; ok {
				if href := b.Attr(t, `[data-testid=tile-probe]`, "href"); href != "/compliance/probes/"+probeID {
					t.Errorf("Got(probe tile link of %s) = %q; want the probe run", p.email, href)
				}
			}
			if p.path == "/operator" {
				if n := webtest.Eval[int](t, b, `document.querySelectorAll("[data-testid=near-quota]").length`); n == 0 {
					t.Errorf("Got(tenants near quota) = none; want acme at 3 of 3 sandboxes")
				}
				if f := b.Text(t, `[data-testid=frozen-tenant]`); !strings.Contains(f, "globex") || !strings.Contains(f, "leaked credentials") {
					t.Errorf("Got(frozen tenants) = %q; want globex with its reason", f)
				}
			}
			name := strings.Split(p.email, "@")[0]
			for _, size := range []struct {
				name string
				w, h int64
			}{{"desktop", 1366, 900}, {"phone", 390, 844}} {
				var opts []chromedp.EmulateViewportOption
				if size.name == "phone" {
					opts = append(opts, chromedp.EmulateMobile)
				}
				b.Do(t, "dashboard "+size.name, chromedp.EmulateViewport(size.w, size.h, opts...), chromedp.Navigate(env.URL+p.path), chromedp.WaitVisible(webtest.CSS(`.tiles`)))
				if size.name == "phone" {
					if w := webtest.Eval[float64](t, b, `document.documentElement.scrollWidth`); w > float64(size.w) {
						t.Errorf("Got(page width of %s's dashboard on a phone) = %v px; want at most %d (no sideways scroll)", p.email, w, size.w)
					}
					// Chart labels stay readable: drawn at least 9 px tall.
					if h := webtest.Eval[float64](t, b, `Math.min(...Array.from(document.querySelectorAll(".dash-chart .tick"), e => e.getBoundingClientRect().height), 99)`); h < 9 {
						t.Errorf("Got(chart label height on %s's phone dashboard) = %.1f px (viewport %v); want at least 9", p.email, h,
							webtest.Eval[float64](t, b, `window.innerWidth`))
					}
				}
				b.Screenshot(t, artifacts, "dashboard-"+name+"-"+size.name+".png")
			}
			for _, m := range b.Problems() {
				t.Errorf("Got(console) %s; want no errors, exceptions or CSP violations", m)
			}
		})
	}
}

// TestDashboardEmpty: a tenant where nothing ran yet gets an empty state
// with the command to start in every panel, not zero-height charts; an
// operator who is also a member sees the platform's part under the
// tenant's.
func TestDashboardEmpty(t *testing.T) {
	env := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t), Operators: []string{"olga@example.com"}})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "olga@example.com", tenants.RoleAdmin)
	st, body := env.Login(t, "olga@example.com").GetPage(t, "/")
	if st != http.StatusOK {
		t.Fatalf("Got(GET / as an admin of a new tenant) = %d; want 200", st)
	}
	// testID is the text of the paragraph marked data-testid=id.
	testID := func(id string) string {
		_, rest, ok := strings.Cut(body, `data-testid="`+id+`"`)
		if !ok {
			return ""
		}
		p, _, _ := strings.Cut(rest, "</p>")
		return html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(p, ""))
	}
	for _, want := range []struct{ id, says string }{
		{"activity-empty", "stockade sandbox create"},
		{"cost-empty", "stockade usage summary"},
		{"probe-empty", "POST /api/v1/compliance/probe"},
		{"runs-empty", "stockade workflow run"},
	} {
		got := testID(want.id)
		if !strings.Contains(got, want.says) {
			t.Errorf("Got(empty state %s) = %q; want it to say %q", want.id, got, want.says)
		}
	}
	for _, no := range []string{`id="activity-chart"`, `id="cost-chart"`} {
		if strings.Contains(body, no) {
			t.Errorf("Got(dashboard of a new tenant) with %s; want the empty state instead of a chart", no)
		}
	}
	if !strings.Contains(body, `data-testid="panel-operator"`) {
		t.Errorf("Got(dashboard of an operator who is a member) without the platform's part; want hosts, tenants near quota, frozen tenants")
	}
}
