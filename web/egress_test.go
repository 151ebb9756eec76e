package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestEgressEvents: the gateway's decisions are listed per tenant (another
// tenant's never show), filtered, readable by the roles that read
// sandboxes, and bad filters are 422.
func TestEgressEvents(t *testing.T) {
	env := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t)})
	a := env.TenantNamed(t, "egress-a", "Egress A")
	b := env.TenantNamed(t, "egress-b", "Egress B")
	st := egress.NewStore(env.DB)
	now := time.Now()
	for _, ev := range []egress.Event{
		{TenantID: a.ID, SandboxID: "sb-a1", Method: "CONNECT", Host: "api.github.com", Port: 443, Decision: egress.DecisionAllow, Rule: "allow api.github.com", StartedAt: now,
			Intercepted: true, SecretsReflected: 3},
		{TenantID: a.ID, SandboxID: "sb-a2", Method: "GET", Host: "evil-a.test", Port: 80, Decision: egress.DecisionDeny, Rule: "default deny", StartedAt: now.Add(time.Second),
			Suppressed: 4},
		{TenantID: b.ID, SandboxID: "sb-b1", Method: "GET", Host: "marker-b.test", Port: 80, Decision: egress.DecisionDeny, Rule: "default deny", StartedAt: now},
	} {
		if err := st.Record(context.Background(), &ev); err != nil {
			t.Fatal(err)
		}
	}
	type list struct {
		Events []egress.Event `json:"events"`
	}
	tests := []struct {
		name      string
		role      tenants.Role
		query     string
		wantCode  int
		wantHosts string
	}{
		{"all of the tenant, newest first", tenants.RoleDeveloper, "", 200, "evil-a.test,api.github.com"},
		{"one sandbox", tenants.RoleAuditor, "?sandbox=sb-a1", 200, "api.github.com"},
		{"denied only", tenants.RoleManager, "?decision=deny", 200, "evil-a.test"},
		{"another tenant's sandbox shows nothing", tenants.RoleAdmin, "?sandbox=sb-b1", 200, ""},
		{"limit", tenants.RoleAdmin, "?limit=1", 200, "evil-a.test"},
		{"bad decision", tenants.RoleAdmin, "?decision=maybe", 422, ""},
		{"bad limit", tenants.RoleAdmin, "?limit=0", 422, ""},
		{"billing may not read", tenants.RoleBilling, "", 403, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := env.WithToken(env.Token(t, a, tc.role))
			var out list
			code, body := c.JSON(t, http.MethodGet, "/api/v1/egress-events"+tc.query, nil, &out)
			if code != tc.wantCode {
				t.Fatalf("Got(GET egress-events%s) = %d %s; want %d", tc.query, code, body, tc.wantCode)
			}
			if strings.Contains(body, "marker-b.test") {
				t.Errorf("Got(GET egress-events%s) = %s; want nothing of tenant B", tc.query, body)
			}
			if code != 200 {
				return
			}
			var hosts []string
			for _, e := range out.Events {
				hosts = append(hosts, e.Host)
			}
			if got := strings.Join(hosts, ","); got != tc.wantHosts {
				t.Errorf("Got(hosts) = %q; want %q", got, tc.wantHosts)
			}
			for _, e := range out.Events {
				if want := map[string]int{"evil-a.test": 4}[e.Host]; e.Suppressed != want {
					t.Errorf("Got(suppressed of %s) = %d; want %d", e.Host, e.Suppressed, want)
				}
			}
		})
	}
	t.Run("page", func(t *testing.T) {
		env.Member(t, a, "dev@egress-a.test", tenants.RoleDeveloper)
		code, page := env.Login(t, "dev@egress-a.test").GetPage(t, "/egress?decision=deny")
		if code != 200 || !strings.Contains(page, "evil-a.test:80") || !strings.Contains(page, "default deny") ||
			!strings.Contains(page, "4 earlier connections not listed (rate limit)") ||
			strings.Contains(page, "api.github.com") || strings.Contains(page, "marker-b.test") {
			t.Errorf("Got(GET /egress?decision=deny) = %d; want 200 with A's denied connection only:\n%s", code, page)
		}
		code, page = env.Login(t, "dev@egress-a.test").GetPage(t, "/egress?sandbox=sb-a1")
		if code != 200 || !strings.Contains(page, "3 secret values rewritten") {
			t.Errorf("Got(GET /egress?sandbox=sb-a1) = %d; want the rewritten count shown:\n%s", code, page)
		}
	})
}
