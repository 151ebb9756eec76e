package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// A refused API token is audited auth.token_failed: a revoked or expired
// one in its own tenant's log with its prefix and why, an unknown one in the
// platform's; never any part of an unknown secret; a flood is folded into a
// few events.
func TestTokenFailuresAudited(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(time.Now())
			env := webtest.New(t, webtest.Options{DB: d.DB, Clock: clock})
			acme := env.Tenant(t, "acme")
			secret := env.Token(t, acme, tenants.RoleDeveloper)
			toks, err := env.Store.ListTokens(context.Background(), acme.ID)
			if err != nil || len(toks) != 1 {
				t.Fatalf("tokens = %v, %v", toks, err)
			}
			if err := env.Store.RevokeToken(context.Background(), audit.Actor{Kind: audit.ActorSystem, ID: "test"}, acme.ID, toks[0].ID); err != nil {
				t.Fatal(err)
			}
			if s, _ := me(t, env.WithToken(secret)); s != http.StatusUnauthorized {
				t.Fatalf("Got(/api/v1/me with a revoked token) = %d; want 401", s)
			}
			var revoked []audit.Event
			for _, e := range env.Events(t, audit.TypeTokenFailed) {
				if e.TenantID == acme.ID {
					revoked = append(revoked, e)
				}
			}
			if len(revoked) != 1 || revoked[0].Details["reason"] != "revoked" || revoked[0].Details["token_prefix"] != toks[0].Prefix ||
				revoked[0].Outcome != audit.OutcomeFailure {
				t.Fatalf("Got(token_failed in the tenant's log) = %+v; want one, reason revoked, the token's prefix, outcome failure", revoked)
			}

			const unknown = "stk_this-token-does-not-exist-0123456789abcdef"
			for i := 0; i < 25; i++ {
				if s, _ := me(t, env.WithToken(unknown)); s != http.StatusUnauthorized {
					t.Fatalf("Got(/api/v1/me with an unknown token) = %d; want 401", s)
				}
			}
			var platform []audit.Event
			for _, e := range env.Events(t, audit.TypeTokenFailed) {
				if e.TenantID == "" {
					platform = append(platform, e)
				}
				for k, v := range e.Details {
					if s, ok := v.(string); ok && strings.Contains(s, "does-not-exist") {
						t.Errorf("Got(details[%s]) = %q; want no part of the secret", k, s)
					}
				}
			}
			if len(platform) == 0 || len(platform) > 10 {
				t.Errorf("Got(platform token_failed events for 25 tries) = %d; want between 1 and 10 (rate-limited)", len(platform))
			}
			// The next window's first event counts what was folded in.
			clock.Advance(2 * time.Minute)
			me(t, env.WithToken(unknown))
			evs := env.Events(t, audit.TypeTokenFailed)
			last := evs[len(evs)-1]
			if n, _ := last.Details["suppressed"].(float64); last.TenantID != "" || n != 15 {
				t.Errorf("Got(next window's event) = tenant %q, suppressed %v; want the platform's, 15", last.TenantID, last.Details["suppressed"])
			}
		})
	}
}

// A signed-in caller refused by a route's permission is audited
// auth.access_denied in its tenant's log (outcome denied, the route and the
// permission), rate-limited; the refusal writes nothing else.
func TestAccessDeniedAudited(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			env := webtest.New(t, webtest.Options{DB: d.DB})
			acme := env.Tenant(t, "acme")
			dev := env.WithToken(env.Token(t, acme, tenants.RoleDeveloper))
			before := env.Counts(t)
			for i := 0; i < 15; i++ {
				if s, _, _ := dev.Request(t, http.MethodGet, "/api/v1/members", "", nil); s != http.StatusForbidden {
					t.Fatalf("Got(GET /api/v1/members as a developer) = %d; want 403", s)
				}
			}
			env.Unchanged(t, before)
			evs := env.Events(t, audit.TypeAccessDenied)
			if len(evs) == 0 || len(evs) > 10 {
				t.Fatalf("Got(access_denied events for 15 refusals) = %d; want 1 to 10 (rate-limited)", len(evs))
			}
			e := evs[0]
			if e.TenantID != acme.ID || e.Outcome != audit.OutcomeDenied || e.ActorKind != "token" ||
				e.Details["route"] != "/api/v1/members" || e.Details["permission"] != string(tenants.PermMembersRead) {
				t.Errorf("Got(event) = %+v; want the tenant's, denied, by the token, naming the route and permission", e)
			}
		})
	}
}
