package tenants_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

func TestCreateTenant(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn, err := e.store.CreateTenant(ctx, admin, "acme", "  ACME Corp  ")
		if err != nil {
			t.Fatalf("CreateTenant = %v", err)
		}
		if tn.Slug != "acme" || tn.Name != "ACME Corp" || len(tn.ID) != 36 || !tn.CreatedAt.Equal(e.clock.Now().Truncate(time.Microsecond)) {
			t.Errorf("Got(CreateTenant) = %+v; want slug acme, name ACME Corp, uuid id, created now", tn)
		}
		got, err := e.store.TenantByID(ctx, tn.ID)
		if err != nil || got != tn {
			t.Errorf("Got(TenantByID) = %+v, %v; want %+v", got, err, tn)
		}
		if got.CreatedAt.Location().String() != "UTC" {
			t.Errorf("Got(CreatedAt location) = %s; want UTC", got.CreatedAt.Location())
		}
		got, err = e.store.TenantBySlug(ctx, "acme")
		if err != nil || got != tn {
			t.Errorf("Got(TenantBySlug) = %+v, %v; want %+v", got, err, tn)
		}

		evs := e.events(t, tn.ID, audit.TypeTenantCreated)
		if len(evs) != 1 {
			t.Fatalf("Got(%d tenant.created events); want 1", len(evs))
		}
		ev := evs[0]
		if ev.Code != "ST2000I" || ev.ActorID != admin.ID || ev.ActorName != admin.Name || ev.TargetID != tn.ID ||
			ev.RemoteAddr != admin.RemoteAddr || ev.RequestID != admin.RequestID || ev.Outcome != audit.OutcomeSuccess ||
			ev.Details["slug"] != "acme" || !ev.Time.Equal(tn.CreatedAt) {
			t.Errorf("Got(tenant.created event) = %+v", ev)
		}

		def, err := e.store.CreateTenant(ctx, admin, "beta-2", "")
		if err != nil || def.Name != "beta-2" {
			t.Errorf("Got(CreateTenant with no name) = %+v, %v; want name = slug", def, err)
		}

		before := dbtest.Count(t, e.db)
		if _, err := e.store.CreateTenant(ctx, admin, "acme", "Other"); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("Got(CreateTenant duplicate slug) = %v; want errdefs.ErrConflict", err)
		}
		unchanged(t, e.db, before)

		for _, id := range []string{"missing", ""} {
			if _, err := e.store.TenantByID(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(TenantByID(%q)) = %v; want errdefs.ErrNotFound", id, err)
			}
		}
		if _, err := e.store.TenantBySlug(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(TenantBySlug(nope)) = %v; want errdefs.ErrNotFound", err)
		}
	})
}

func TestCreateTenantValidation(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		cases := []struct {
			slug, name  string
			field, rule string
		}{
			{"", "", "slug", "slug_format"},
			{"ab", "", "slug", "slug_format"},
			{"Acme", "", "slug", "slug_format"},
			{"1acme", "", "slug", "slug_format"},
			{"acme-", "", "slug", "slug_format"},
			{"ac_me", "", "slug", "slug_format"},
			{"acme\n", "", "slug", "slug_format"},
			{"a" + strings.Repeat("b", 40), "", "slug", "slug_format"},
			{"acme", strings.Repeat("n", 101), "name", "name_length"},
			{"acme", "bad\x00name", "name", "name_format"},
		}
		for _, c := range cases {
			t.Run(c.slug+"/"+c.rule, func(t *testing.T) {
				before := dbtest.Count(t, e.db)
				_, err := e.store.CreateTenant(ctx, admin, c.slug, c.name)
				wantField(t, err, c.field, c.rule)
				unchanged(t, e.db, before)
			})
		}
		// The limits themselves are accepted.
		for _, slug := range []string{"abc", "a" + strings.Repeat("b", 39)} {
			if _, err := e.store.CreateTenant(ctx, admin, slug, strings.Repeat("n", 100)); err != nil {
				t.Errorf("Got(CreateTenant(%q)) = %v; want nil", slug, err)
			}
		}
	})
}

// A failing audit write rolls the change back: event and change commit
// together or not at all.
func TestAuditFailureRollsBack(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "acme")
		bad := audit.Actor{Kind: "robot", ID: "r1"}
		calls := []struct {
			name string
			call func() error
		}{
			{"CreateTenant", func() error { _, err := e.store.CreateTenant(ctx, bad, "other", ""); return err }},
			{"InviteMember", func() error {
				_, err := e.store.InviteMember(ctx, bad, tn.ID, "x@example.com", tenants.RoleDeveloper)
				return err
			}},
			{"CreateToken", func() error {
				_, _, err := e.store.CreateToken(ctx, bad, tn.ID, tenants.NewToken{Name: "ci", Role: tenants.RoleDeveloper})
				return err
			}},
		}
		for _, c := range calls {
			t.Run(c.name, func(t *testing.T) {
				before := dbtest.Count(t, e.db)
				if err := c.call(); err == nil {
					t.Fatalf("Got(%s with invalid actor) = nil; want error", c.name)
				}
				unchanged(t, e.db, before)
			})
		}
	})
}

func TestListTenants(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		b := e.tenant(t, "bravo")
		a := e.tenant(t, "alpha")
		e.member(t, a, "ann", tenants.RoleAdmin)
		e.member(t, a, "bob", tenants.RoleDeveloper)
		if _, err := e.store.InviteMember(ctx, admin, a.ID, "pending@example.com", tenants.RoleAuditor); err != nil {
			t.Fatal(err)
		}
		got, err := e.store.ListTenants(ctx)
		if err != nil {
			t.Fatalf("ListTenants = %v", err)
		}
		if len(got) != 2 || got[0].ID != a.ID || got[1].ID != b.ID {
			t.Fatalf("Got(ListTenants) = %+v; want alpha, bravo", got)
		}
		if got[0].Members != 2 || got[1].Members != 0 {
			t.Errorf("Got(Members) = %d, %d; want 2 (pending invite not counted), 0", got[0].Members, got[1].Members)
		}
		if got[0].Tenant != a {
			t.Errorf("Got(ListTenants[0].Tenant) = %+v; want %+v", got[0].Tenant, a)
		}
	})
}

func TestCreateTenantWithAdmin(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		u := e.login(t, "ann", "Ann@Example.com")
		tn, err := e.store.CreateTenantWithAdmin(ctx, admin, "acme", "Acme", "ann@example.com")
		if err != nil {
			t.Fatalf("CreateTenantWithAdmin = %v", err)
		}
		if role, err := e.store.RoleOf(ctx, tn.ID, u.ID); err != nil || role != tenants.RoleAdmin {
			t.Errorf("Got(RoleOf(ann)) = %q, %v; want admin at once", role, err)
		}
		pend, err := e.store.CreateTenantWithAdmin(ctx, admin, "beta", "", "New@Example.com")
		if err != nil {
			t.Fatalf("CreateTenantWithAdmin(pending) = %v", err)
		}
		ms, _ := e.store.ListMembers(ctx, pend.ID)
		if len(ms) != 1 || ms[0].Active() || ms[0].Email != "new@example.com" || ms[0].Role != tenants.RoleAdmin {
			t.Errorf("Got(ListMembers) = %+v; want one pending admin new@example.com", ms)
		}
		if evs := e.events(t, pend.ID, audit.TypeMemberInvited); len(evs) != 1 {
			t.Errorf("Got(%d member.invited events); want 1", len(evs))
		}

		before := dbtest.Count(t, e.db)
		_, err = e.store.CreateTenantWithAdmin(ctx, admin, "gamma", "", "not-an-email")
		wantField(t, err, "admin_email", "email_format")
		if _, err := e.store.CreateTenantWithAdmin(ctx, admin, "acme", "", "x@example.com"); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("Got(CreateTenantWithAdmin duplicate slug) = %v; want errdefs.ErrConflict", err)
		}
		unchanged(t, e.db, before)
	})
}
