package web_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/views"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestEgressShortID: the egress filter takes the 12-character short id
// the pages show as well as the whole id, on the page and in the API;
// another tenant's sandbox matches nothing; a filter that matches nothing
// says so, with a way back. On SQLite and PostgreSQL (the match is SQL).
func TestEgressShortID(t *testing.T) {
	for _, db := range dbtest.Databases(t) {
		t.Run(db.Name, func(t *testing.T) { testEgressShortID(t, webtest.New(t, webtest.Options{DB: db.DB})) })
	}
}

func testEgressShortID(t *testing.T, env *webtest.Env) {
	a := env.TenantNamed(t, "short-a", "Short A")
	b := env.TenantNamed(t, "short-b", "Short B")
	env.Member(t, a, "dev@short-a.test", tenants.RoleDeveloper)
	ids := map[string]string{"one": "01a23304-0000-7000-8000-aaaaaaaaaaaa", "two": "01a23304-0000-7000-8000-bbbbbbbbbbbb",
		"theirs": "01a23304-0000-7000-8000-cccccccccccc"}
	st := egress.NewStore(env.DB)
	for _, ev := range []egress.Event{
		{TenantID: a.ID, SandboxID: ids["one"], Host: "one.test"}, {TenantID: a.ID, SandboxID: ids["two"], Host: "two.test"},
		{TenantID: b.ID, SandboxID: ids["theirs"], Host: "theirs.test"},
	} {
		ev.Method, ev.Port, ev.Decision, ev.Rule, ev.StartedAt = "CONNECT", 443, egress.DecisionDeny, "default deny", time.Now()
		if err := st.Record(context.Background(), &ev); err != nil {
			t.Fatal(err)
		}
	}
	page := env.Login(t, "dev@short-a.test")
	api := env.WithToken(env.Token(t, a, tenants.RoleDeveloper))
	tests := []struct {
		name, sandbox string
		want, not     []string
	}{
		{"short id", views.ShortID(ids["one"]), []string{"one.test"}, []string{"two.test", "No match"}},
		{"short id in capitals", strings.ToUpper(views.ShortID(ids["two"])), []string{"two.test"}, []string{"one.test"}},
		{"whole id", ids["two"], []string{"two.test"}, []string{"one.test"}},
		{"another tenant's short id", views.ShortID(ids["theirs"]), []string{"No match", `href="/egress"`}, []string{"theirs.test", "one.test"}},
		{"no such sandbox", "ffffffffffff", []string{"No match: no connection of sandbox ffffffffffff"}, []string{"one.test", "No egress yet"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := page.GetPage(t, "/egress?sandbox="+tc.sandbox)
			body = html.UnescapeString(body)
			if code != http.StatusOK {
				t.Fatalf("Got(GET /egress?sandbox=%s) = %d; want 200", tc.sandbox, code)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("Got(GET /egress?sandbox=%s) without %q; want it", tc.sandbox, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(body, n) {
					t.Errorf("Got(GET /egress?sandbox=%s) with %q; want it not", tc.sandbox, n)
				}
			}
			_, js := api.JSON(t, http.MethodGet, "/api/v1/egress-events?sandbox="+tc.sandbox, nil, nil)
			for _, w := range tc.want {
				if strings.HasSuffix(w, ".test") && !strings.Contains(js, w) {
					t.Errorf("Got(API egress-events?sandbox=%s) = %s; want %s", tc.sandbox, js, w)
				}
			}
			if strings.Contains(js, "theirs.test") {
				t.Errorf("Got(API egress-events?sandbox=%s) = %s; want nothing of tenant B", tc.sandbox, js)
			}
		})
	}
}

// TestAuditReadable: the audit page names its targets as people know them
// (a member's email, a secret's name, the policy version) and links them
// to their pages, but only to the pages the reader may open; the details
// are key/value pairs, not JSON.
func TestAuditReadable(t *testing.T) {
	env := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t)})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "ada@example.com", tenants.RoleAdmin)
	env.Member(t, acme, "audrey@example.com", tenants.RoleAuditor)
	env.Invite(t, acme, "newhire@example.com", tenants.RoleDeveloper)
	ctx, sys := context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}
	doc := policy.Defaults()
	doc.Network.Egress.Allow = []policy.Rule{{Domain: "pypi.org", Ports: []int{443}}}
	if _, err := env.Policies.Save(ctx, sys, acme.ID, policy.Edit{Doc: doc, Reason: "allow pypi.org"}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Secrets.Create(ctx, sys, acme.ID, secrets.NewSecret{Name: "GITHUB_TOKEN", Value: "ghp_x", Hosts: []string{"api.github.com"}}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`<a href="/settings/members">member newhire@example.com</a>`,
		`<a href="/settings/secrets">secret GITHUB_TOKEN</a>`,
		`<a href="/policy/versions/1">policy version 1</a>`,
		`<dt>reason</dt><dd>allow pypi.org</dd>`,
		`<dt>hosts</dt><dd>api.github.com</dd>`,
		`<dt>email</dt><dd>newhire@example.com</dd>`,
	}
	for _, who := range []string{"ada@example.com", "audrey@example.com"} {
		_, body := env.Login(t, who).GetPage(t, "/audit")
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("Got(audit page as %s) without %s; want it", who, w)
			}
		}
		if _, table, ok := strings.Cut(body, `<table class="audit`); !ok || strings.Contains(table, `{&#34;`) {
			t.Errorf("Got(audit table as %s) with JSON details (or none); want key/value pairs", who)
		}

	}
}

// TestPeopleByName: who invited a member and who set a price show as
// emails, not user ids.
func TestPeopleByName(t *testing.T) {
	env := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t), Operators: []string{"olga@example.com"}})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "ada@example.com", tenants.RoleAdmin)
	ada := env.Login(t, "ada@example.com")
	if st, body, _ := ada.Post(t, "/settings/members", url.Values{"email": {"newhire@example.com"}, "role": {"developer"}}); st >= 400 {
		t.Fatalf("Got(invite) = %d %s; want it done", st, body)
	}
	_, page := ada.GetPage(t, "/settings/members")
	if !strings.Contains(page, `<td data-label="Invited by">ada@example.com</td>`) {
		t.Errorf("Got(members page) without ada@example.com as who invited newhire; want her email, not her id")
	}
	olga := env.Login(t, "olga@example.com")
	if st, body, _ := olga.Post(t, "/operator/prices", url.Values{"currency": {"USD"}, "vcpu_second": {"0.00001"}, "gib_second": {"0.000001"},
		"cpu_second": {"0.00001"}, "egress_gb": {"0.09"}}); st >= 400 {
		t.Fatalf("Got(set price) = %d %s; want it set", st, body)
	}
	_, page = olga.GetPage(t, "/operator/prices")
	if !strings.Contains(page, `<td data-label="Set by">olga@example.com</td>`) {
		t.Errorf("Got(prices page) without olga@example.com as who set the price; want her email, not her id")
	}
}

// TestComplianceBeforeFirstProbe: until a probe has completed, the page
// says why its items are at warning (and, to an admin, how to end it);
// after one, it no longer does.
func TestComplianceBeforeFirstProbe(t *testing.T) {
	ce := newComplianceEnv(t, webtest.Options{})
	for _, tc := range []struct {
		role tenants.Role
		want string
	}{{tenants.RoleAdmin, "Run the probe now (above)"}, {tenants.RoleAuditor, "an admin can run it now"}} {
		_, body := ce.people[tc.role].GetPage(t, "/compliance")
		if !strings.Contains(body, `id="compliance-before-probe"`) || !strings.Contains(body, tc.want) {
			t.Errorf("Got(compliance page as %s before any probe) without the explanation %q; want it", tc.role, tc.want)
		}
	}
	recordProbeRun(t, ce.env.DB, ce.acme.ID, "probe output\n", nil)
	if _, body := ce.people[tenants.RoleAdmin].GetPage(t, "/compliance"); strings.Contains(body, `id="compliance-before-probe"`) {
		t.Errorf("Got(compliance page after a probe) with the before-the-first-probe explanation; want it gone")
	}
}

// TestEmptyStatesShowCommands: a fresh tenant's empty lists say how to
// start from the CLI or the API.
func TestEmptyStatesShowCommands(t *testing.T) {
	env := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t)})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "ada@example.com", tenants.RoleAdmin)
	ada := env.Login(t, "ada@example.com")
	for path, want := range map[string]string{
		"/sandboxes": "stockade sandbox create --template debian",
		"/vms":       `curl -X POST "$STOCKADE_URL/api/v1/vms"`,
		"/egress":    "stockade sandbox exec SANDBOX_ID -- curl",
		"/workflows": "stockade workflow apply ci.yaml",
		"/terminals": "stockade sandbox attach SANDBOX_ID",
	} {
		st, body := ada.GetPage(t, path)
		if body = html.UnescapeString(body); st != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("Got(GET %s of a fresh tenant) = %d without %q; want the command shown", path, st, want)
		}
	}
}
