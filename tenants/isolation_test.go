package tenants_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// TestTenantIsolation calls every tenant-scoped store method on an object of
// tenant "own", once through its own tenant (works) and once through tenant
// "other" (errdefs.ErrNotFound, nothing written, nothing leaked).
func TestTenantIsolation(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		own := e.tenant(t, "own")
		other := e.tenant(t, "other")
		ownUser, _ := e.member(t, own, "ann", tenants.RoleAdmin)
		e.member(t, other, "olga", tenants.RoleAdmin)

		// fixture makes a fresh object in own for each call, so destructive
		// calls each get their own.
		type fixture struct {
			member tenants.Membership
			token  tenants.APIToken
			sessID string
		}
		n := 0
		fresh := func(t *testing.T) fixture {
			t.Helper()
			n++
			sub := "dev" + string(rune('a'+n))
			u, m := e.member(t, own, sub, tenants.RoleDeveloper)
			_, tok, err := e.store.CreateToken(ctx, e.adminOf(t, own), own.ID, tenants.NewToken{Name: sub, Role: tenants.RoleDeveloper})
			if err != nil {
				t.Fatal(err)
			}
			_, sess, err := e.store.CreateSession(ctx, u.ID, "", "", "", absolute)
			if err != nil {
				t.Fatal(err)
			}
			return fixture{member: m, token: tok, sessID: sess.ID}
		}

		cases := []struct {
			method string
			call   func(tenantID string, f fixture) error
		}{
			{"SetMemberRole", func(tn string, f fixture) error {
				return e.store.SetMemberRole(ctx, admin, tn, f.member.ID, tenants.RoleAuditor)
			}},
			{"RemoveMember", func(tn string, f fixture) error {
				return e.store.RemoveMember(ctx, admin, tn, f.member.ID)
			}},
			{"RevokeToken", func(tn string, f fixture) error {
				return e.store.RevokeToken(ctx, admin, tn, f.token.ID)
			}},
			{"RoleOf", func(tn string, f fixture) error {
				_, err := e.store.RoleOf(ctx, tn, *f.member.UserID)
				return err
			}},
			{"SetSessionTenant", func(tn string, f fixture) error {
				return e.store.SetSessionTenant(ctx, f.sessID, tn)
			}},
			{"CreateSession", func(tn string, f fixture) error {
				_, _, err := e.store.CreateSession(ctx, *f.member.UserID, tn, "", "", absolute)
				return err
			}},
		}
		for _, c := range cases {
			t.Run(c.method, func(t *testing.T) {
				f := fresh(t)
				before := dbtest.Count(t, e.db)
				if err := c.call(other.ID, f); !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("Got(%s via other tenant) = %v; want errdefs.ErrNotFound", c.method, err)
				}
				unchanged(t, e.db, before)
				if err := c.call(own.ID, f); err != nil {
					t.Errorf("Got(%s via own tenant) = %v; want nil", c.method, err)
				}
			})
		}

		t.Run("lists", func(t *testing.T) {
			f := fresh(t)
			members, err := e.store.ListMembers(ctx, other.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range members {
				if m.TenantID != other.ID {
					t.Errorf("ListMembers(other) returned a membership of %s", m.TenantID)
				}
			}
			if len(members) != 1 {
				t.Errorf("Got(len(ListMembers(other))) = %d; want 1", len(members))
			}
			toks, err := e.store.ListTokens(ctx, other.ID)
			if err != nil || len(toks) != 0 {
				t.Errorf("Got(ListTokens(other)) = %+v, %v; want none", toks, err)
			}
			ownToks, _ := e.store.ListTokens(ctx, own.ID)
			if !slices.ContainsFunc(ownToks, func(k tenants.APIToken) bool { return k.ID == f.token.ID }) {
				t.Errorf("ListTokens(own) misses the own token")
			}
			evs, err := e.log.List(ctx, other.ID, audit.Filter{Limit: audit.MaxLimit})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				if ev.TenantID != other.ID {
					t.Errorf("audit List(other) returned an event of %q", ev.TenantID)
				}
			}
			uts, _ := e.store.UserTenants(ctx, ownUser.ID)
			if len(uts) != 1 || uts[0].Tenant.ID != own.ID {
				t.Errorf("Got(UserTenants(ann)) = %+v; want only own", uts)
			}
		})

		t.Run("token tenant", func(t *testing.T) {
			secret, _, err := e.store.CreateToken(ctx, e.adminOf(t, own), own.ID, tenants.NewToken{Name: "x", Role: tenants.RoleAdmin})
			if err != nil {
				t.Fatal(err)
			}
			_, tn, err := e.store.AuthenticateToken(ctx, secret)
			if err != nil || tn.ID != own.ID {
				t.Errorf("Got(AuthenticateToken tenant) = %s, %v; want %s", tn.ID, err, own.ID)
			}
		})

		t.Run("create in missing tenant", func(t *testing.T) {
			before := dbtest.Count(t, e.db)
			if _, _, err := e.store.CreateToken(ctx, admin, "missing", tenants.NewToken{Name: "x", Role: tenants.RoleAdmin}); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(CreateToken in a missing tenant) = %v; want errdefs.ErrNotFound", err)
			}
			if _, err := e.store.InviteMember(ctx, admin, "missing", "z@example.com", tenants.RoleAdmin); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(InviteMember in a missing tenant) = %v; want errdefs.ErrNotFound", err)
			}
			unchanged(t, e.db, before)
		})
	})
}
