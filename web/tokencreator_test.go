package web_test

import (
	"net/http"
	"testing"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestTokensOfRemovedOrDemotedMembers: an admin makes API tokens, then is
// demoted and removed by another admin. The tokens act with no more than
// the admin's current role, and stop at the removal; the refusal is audited
// with its reason.
func TestTokensOfRemovedOrDemotedMembers(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "ann@acme.test", tenants.RoleAdmin)
	env.Member(t, acme, "boss@acme.test", tenants.RoleAdmin)
	ann := env.Login(t, "ann@acme.test")
	boss := env.Login(t, "boss@acme.test")

	mkToken := func(name, role string) *webtest.Client {
		t.Helper()
		var out api.Token
		if s, body := ann.JSON(t, http.MethodPost, "/api/v1/tokens", map[string]string{"name": name, "role": role, "ttl": "24h"}, &out); s != http.StatusCreated {
			t.Fatalf("Got(ann creates a %s token) = %d %s; want 201", role, s, body)
		}
		return env.WithToken(out.Token)
	}
	adminTok := mkToken("ann-admin", "admin")
	devTok := mkToken("ann-dev", "developer")

	var members struct {
		Members []api.Member `json:"members"`
	}
	if s, body := boss.JSON(t, http.MethodGet, "/api/v1/members", nil, &members); s != http.StatusOK {
		t.Fatalf("Got(GET members) = %d %s", s, body)
	}
	annID := ""
	for _, m := range members.Members {
		if m.Email == "ann@acme.test" {
			annID = m.ID
		}
	}
	if annID == "" {
		t.Fatalf("Got(members) = %+v; want ann", members.Members)
	}

	// Before: the admin token may invite.
	if s, _, _ := adminTok.Request(t, http.MethodGet, "/api/v1/members", "", nil); s != http.StatusOK {
		t.Fatalf("Got(admin token lists members) = %d; want 200", s)
	}

	// Demoted to developer: the admin token acts as a developer.
	if s, body := boss.JSON(t, http.MethodPatch, "/api/v1/members/"+annID, map[string]string{"role": "developer"}, nil); s != http.StatusNoContent {
		t.Fatalf("Got(demote ann) = %d %s; want 204", s, body)
	}
	if s, m := me(t, adminTok); s != http.StatusOK || deref(m.Role) != "developer" {
		t.Errorf("Got(/me of ann's admin token after demotion) = %d role %s; want 200 developer", s, deref(m.Role))
	}
	if s, _ := adminTok.JSON(t, http.MethodPost, "/api/v1/members", map[string]string{"email": "mallory@evil.test", "role": "admin"}, nil); s != http.StatusForbidden {
		t.Errorf("Got(demoted admin's token invites an admin) = %d; want 403", s)
	}
	if s, _, _ := devTok.Request(t, http.MethodGet, "/api/v1/sandboxes", "", nil); s != http.StatusOK {
		t.Errorf("Got(developer token of a developer) = %d; want 200", s)
	}

	// Removed: every token of ann stops.
	if s, body := boss.JSON(t, http.MethodDelete, "/api/v1/members/"+annID, nil, nil); s != http.StatusNoContent {
		t.Fatalf("Got(remove ann) = %d %s; want 204", s, body)
	}
	for name, c := range map[string]*webtest.Client{"admin": adminTok, "developer": devTok} {
		if s, _ := me(t, c); s != http.StatusUnauthorized {
			t.Errorf("Got(/me of ann's %s token after her removal) = %d; want 401", name, s)
		}
	}
	revoked := 0
	for _, ev := range env.Events(t, audit.TypeTokenRevoked) {
		if ev.Details["reason"] == "member_removed" {
			revoked++
		}
	}
	if revoked != 2 {
		t.Errorf("Got(token.revoked member_removed events) = %d; want 2", revoked)
	}
	failed := env.Events(t, audit.TypeTokenFailed)
	if len(failed) == 0 || failed[len(failed)-1].Details["reason"] != "revoked" || failed[len(failed)-1].TenantID != acme.ID {
		t.Errorf("Got(auth.token_failed events) = %+v; want the refusal in acme's log", failed)
	}
}
