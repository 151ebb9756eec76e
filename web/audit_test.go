package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestAuditFilters: the audit page and its exports filter by what a person
// types (an email, a token prefix, an event type) and agree with each other.
func TestAuditFilters(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "dev@acme.test", tenants.RoleAdmin)
	env.Member(t, acme, "ada@acme.test", tenants.RoleDeveloper)
	admin := env.Login(t, "dev@acme.test")
	env.Login(t, "ada@acme.test")
	_, who := me(t, admin)
	var tok struct{ ID, Prefix, Token string }
	if s, body := admin.JSON(t, http.MethodPost, "/api/v1/tokens", map[string]string{"name": "ci", "role": "admin", "ttl": "24h"}, &tok); s != http.StatusCreated {
		t.Fatalf("Got(create token) = %d %s; want 201", s, body)
	}
	if s, body := env.WithToken(tok.Token).JSON(t, http.MethodPost, "/api/v1/members", map[string]string{"email": "bot-invited@acme.test", "role": "billing"}, nil); s != http.StatusCreated {
		t.Fatalf("Got(invite by token) = %d %s; want 201", s, body)
	}

	tests := []struct {
		name    string
		query   url.Values
		want    func(audit.Event) bool
		atLeast int
	}{
		{"actor by email", url.Values{"actor": {"dev@acme.test"}}, func(e audit.Event) bool { return e.ActorID == who.User.ID }, 2},
		{"actor by email, any case", url.Values{"actor": {" Dev@Acme.test "}}, func(e audit.Event) bool { return e.ActorID == who.User.ID }, 2},
		{"actor by id", url.Values{"actor": {who.User.ID}}, func(e audit.Event) bool { return e.ActorID == who.User.ID }, 2},
		{"actor by token prefix", url.Values{"actor": {tok.Prefix}}, func(e audit.Event) bool { return e.ActorID == tok.ID && e.ActorKind == "token" }, 1},
		{"type prefix", url.Values{"type": {"member."}}, func(e audit.Event) bool { return strings.HasPrefix(e.Type, "member.") }, 4},
		{"exact type", url.Values{"type": {audit.TypeLogin}}, func(e audit.Event) bool { return e.Type == audit.TypeLogin }, 2},
		{"outcome", url.Values{"outcome": {"success"}}, func(e audit.Event) bool { return e.Outcome == "success" }, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := url.Values{"format": {"jsonl"}}
			for k, v := range tc.query {
				q[k] = v
			}
			evs := exportedEvents(t, admin, "/api/v1/audit?"+q.Encode())
			if len(evs) < tc.atLeast {
				t.Errorf("Got(events) = %d; want at least %d", len(evs), tc.atLeast)
			}
			all := map[string]bool{}
			for _, e := range evs {
				if !tc.want(e) {
					t.Errorf("Got(event) = %s %s by %s %s; want only matching events", e.Type, e.Outcome, e.ActorKind, e.ActorID)
				}
				all["event-"+e.ID] = true
			}
			// The page shows the same events as the export.
			status, page := admin.GetPage(t, "/audit?"+tc.query.Encode())
			if status != http.StatusOK {
				t.Fatalf("Got(GET /audit) = %d; want 200", status)
			}
			shown := webtest.ParseHTML(t, page).IDs("event-")
			if len(shown) != len(all) {
				t.Errorf("Got(events on the page) = %d; want %d as exported", len(shown), len(all))
			}
			for _, id := range shown {
				if !all[id] {
					t.Errorf("Got(page) shows %s; want only the exported events", id)
				}
			}
		})
	}
	if s, body, h := admin.Request(t, http.MethodGet, "/api/v1/audit?outcome=maybe", "", nil); s != http.StatusUnprocessableEntity {
		t.Errorf("Got(outcome=maybe) = %d; want 422", s)
	} else if p := webtest.Problem(t, h, body); len(p.Errors) != 1 || p.Errors[0].Field != "outcome" {
		t.Errorf("Got(problem) = %+v; want the outcome field named", p)
	}
}
