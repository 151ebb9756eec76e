package tenants_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

func TestInviteActivatesOnFirstLogin(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		beta := e.tenant(t, "beta")
		m, err := e.store.InviteMember(ctx, admin, acme.ID, " Carol@Example.COM ", tenants.RoleDeveloper)
		if err != nil {
			t.Fatalf("InviteMember = %v", err)
		}
		if m.Active() || m.Email != "carol@example.com" || m.InvitedBy != admin.ID || m.TenantID != acme.ID {
			t.Errorf("Got(InviteMember) = %+v; want pending, lowercased email, invited by admin", m)
		}
		if _, err := e.store.InviteMember(ctx, admin, beta.ID, "carol@example.com", tenants.RoleAuditor); err != nil {
			t.Fatal(err)
		}
		if evs := e.events(t, acme.ID, audit.TypeMemberInvited); len(evs) != 1 || evs[0].TargetID != m.ID || evs[0].Details["role"] != "developer" {
			t.Errorf("Got(member.invited events) = %+v; want one for %s", evs, m.ID)
		}

		// Before login: no user has the role.
		e.clock.Advance(time.Hour)
		u := e.login(t, "carol-sub", "CAROL@example.com")
		if u.LastLoginAt == nil || !u.LastLoginAt.Equal(e.clock.Now().Truncate(time.Microsecond)) {
			t.Errorf("Got(LastLoginAt) = %v; want %v", u.LastLoginAt, e.clock.Now())
		}
		uts, err := e.store.UserTenants(ctx, u.ID)
		if err != nil {
			t.Fatalf("UserTenants = %v", err)
		}
		if len(uts) != 2 || uts[0].Tenant != acme || uts[0].Role != tenants.RoleDeveloper || uts[1].Tenant != beta || uts[1].Role != tenants.RoleAuditor {
			t.Errorf("Got(UserTenants) = %+v; want acme/developer, beta/auditor", uts)
		}
		role, err := e.store.RoleOf(ctx, acme.ID, u.ID)
		if err != nil || role != tenants.RoleDeveloper {
			t.Errorf("Got(RoleOf) = %q, %v; want developer", role, err)
		}
		members, err := e.store.ListMembers(ctx, acme.ID)
		if err != nil || len(members) != 1 || !members[0].Active() || *members[0].UserID != u.ID {
			t.Errorf("Got(ListMembers) = %+v, %v; want carol active", members, err)
		}
		evs := e.events(t, acme.ID, audit.TypeMemberActivated)
		if len(evs) != 1 || evs[0].ActorID != u.ID || evs[0].TargetID != m.ID || evs[0].Code != "SM3001I" {
			t.Errorf("Got(member.activated events) = %+v; want one by the user", evs)
		}
		if evs := e.events(t, "", audit.TypeUserCreated); len(evs) != 1 || evs[0].TargetID != u.ID {
			t.Errorf("Got(platform user.created events) = %+v; want one", evs)
		}

		// Second login: same user, updated profile, nothing activated again.
		e.clock.Advance(time.Hour)
		u2, err := e.store.UpsertUserAtLogin(ctx, tenants.Identity{Issuer: "https://idp.example", Subject: "carol-sub", Email: "carol@example.com", Name: "Carol C"})
		if err != nil || u2.ID != u.ID || u2.Name != "Carol C" {
			t.Errorf("Got(second login) = %+v, %v; want same id, new name", u2, err)
		}
		if got, _ := e.store.UserByID(ctx, u.ID); got.Name != "Carol C" || !got.LastLoginAt.Equal(e.clock.Now().Truncate(time.Microsecond)) {
			t.Errorf("Got(UserByID) = %+v; want updated name and last login", got)
		}
		if evs := e.events(t, acme.ID, audit.TypeMemberActivated); len(evs) != 1 {
			t.Errorf("Got(%d member.activated events after second login); want 1", len(evs))
		}

		// Another identity with the same email gets nothing: the invite is taken.
		other := e.login(t, "carol-other-idp", "carol@example.com")
		if uts, _ := e.store.UserTenants(ctx, other.ID); len(uts) != 0 {
			t.Errorf("Got(UserTenants of second identity) = %+v; want none", uts)
		}
		if _, err := e.store.UserByID(ctx, "missing"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(UserByID(missing)) = %v; want errdefs.ErrNotFound", err)
		}
	})
}

func TestInviteExistingUser(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		u := e.login(t, "dave", "Dave@Example.com")
		m, err := e.store.InviteMember(ctx, admin, acme.ID, "dave@example.com", tenants.RoleManager)
		if err != nil {
			t.Fatalf("InviteMember = %v", err)
		}
		if !m.Active() || *m.UserID != u.ID {
			t.Errorf("Got(InviteMember of existing user) = %+v; want active for %s", m, u.ID)
		}
		if role, err := e.store.RoleOf(ctx, acme.ID, u.ID); err != nil || role != tenants.RoleManager {
			t.Errorf("Got(RoleOf) = %q, %v; want manager", role, err)
		}
		if evs := e.events(t, acme.ID, audit.TypeMemberActivated); len(evs) != 1 {
			t.Errorf("Got(%d member.activated events); want 1", len(evs))
		}

		conflicts := []string{"DAVE@example.com", "dave@example.com"}
		for _, email := range conflicts {
			before := dbtest.Count(t, e.db)
			if _, err := e.store.InviteMember(ctx, admin, acme.ID, email, tenants.RoleAdmin); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("Got(InviteMember(%s) again) = %v; want errdefs.ErrConflict", email, err)
			}
			unchanged(t, e.db, before)
		}
		// The user changed email at the provider: inviting the new address
		// would give the same user two memberships.
		e.login(t, "dave", "dave@new.example")
		before := dbtest.Count(t, e.db)
		if _, err := e.store.InviteMember(ctx, admin, acme.ID, "dave@new.example", tenants.RoleAdmin); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("Got(InviteMember of a user already a member) = %v; want errdefs.ErrConflict", err)
		}
		unchanged(t, e.db, before)
		if _, err := e.store.InviteMember(ctx, admin, "missing-tenant", "x@example.com", tenants.RoleAdmin); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(InviteMember into a missing tenant) = %v; want errdefs.ErrNotFound", err)
		}
	})
}

func TestInviteValidation(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		cases := []struct {
			email       string
			role        tenants.Role
			field, rule string
		}{
			{"", tenants.RoleAdmin, "email", "required"},
			{"bob", tenants.RoleAdmin, "email", "email_format"},
			{"Bob <bob@example.com>", tenants.RoleAdmin, "email", "email_format"},
			{"a@b@example.com", tenants.RoleAdmin, "email", "email_format"},
			{"bob@", tenants.RoleAdmin, "email", "email_format"},
			{strings.Repeat("a", 250) + "@example.com", tenants.RoleAdmin, "email", "email_format"},
			{"bob@example.com", "owner", "role", "role"},
			{"bob@example.com", "", "role", "required"},
			{"bob@example.com", "Admin", "role", "role"},
		}
		for _, c := range cases {
			t.Run(c.email+"/"+string(c.role), func(t *testing.T) {
				before := dbtest.Count(t, e.db)
				_, err := e.store.InviteMember(ctx, admin, acme.ID, c.email, c.role)
				wantField(t, err, c.field, c.rule)
				unchanged(t, e.db, before)
			})
		}
	})
}

// TestInviteValidationAll: an invitation wrong in both fields names both,
// email first, so a form shows every error at once.
func TestInviteValidationAll(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		before := dbtest.Count(t, e.db)
		_, err := e.store.InviteMember(ctx, admin, acme.ID, "not-an-email", "owner")
		var got []string
		for _, fe := range errdefs.FieldErrors(err) {
			got = append(got, fe.Field+"/"+fe.Rule)
		}
		if strings.Join(got, ",") != "email/email_format,role/role" {
			t.Errorf("Got(field errors) = %v; want [email/email_format role/role]", got)
		}
		unchanged(t, e.db, before)
	})
}

func TestLastAdminProtection(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		_, first := e.member(t, acme, "ann", tenants.RoleAdmin)
		// A pending admin invitation does not count as an admin.
		pending, err := e.store.InviteMember(ctx, admin, acme.ID, "later@example.com", tenants.RoleAdmin)
		if err != nil {
			t.Fatal(err)
		}

		before := dbtest.Count(t, e.db)
		if err := e.store.SetMemberRole(ctx, admin, acme.ID, first.ID, tenants.RoleDeveloper); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("Got(demote last admin) = %v; want errdefs.ErrConflict", err)
		}
		if err := e.store.RemoveMember(ctx, admin, acme.ID, first.ID); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("Got(remove last admin) = %v; want errdefs.ErrConflict", err)
		}
		unchanged(t, e.db, before)

		// Same role again is a no-op, not a conflict, and not an event.
		if err := e.store.SetMemberRole(ctx, admin, acme.ID, first.ID, tenants.RoleAdmin); err != nil {
			t.Errorf("Got(SetMemberRole to the same role) = %v; want nil", err)
		}
		unchanged(t, e.db, before)

		if err := e.store.RemoveMember(ctx, admin, acme.ID, pending.ID); err != nil {
			t.Errorf("Got(remove pending admin) = %v; want nil", err)
		}

		_, second := e.member(t, acme, "ben", tenants.RoleDeveloper)
		if err := e.store.SetMemberRole(ctx, admin, acme.ID, second.ID, tenants.RoleAdmin); err != nil {
			t.Fatalf("promote = %v", err)
		}
		if err := e.store.SetMemberRole(ctx, admin, acme.ID, first.ID, tenants.RoleBilling); err != nil {
			t.Errorf("Got(demote one of two admins) = %v; want nil", err)
		}
		if err := e.store.RemoveMember(ctx, admin, acme.ID, second.ID); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("Got(remove the remaining admin) = %v; want errdefs.ErrConflict", err)
		}
		if err := e.store.RemoveMember(ctx, admin, acme.ID, first.ID); err != nil {
			t.Errorf("Got(remove a billing member) = %v; want nil", err)
		}

		changes := e.events(t, acme.ID, audit.TypeMemberRoleChanged)
		if len(changes) != 2 || changes[0].Details["from"] != "admin" || changes[0].Details["to"] != "billing" {
			t.Errorf("Got(member.role_changed events) = %+v; want 2, newest admin->billing", changes)
		}
		if removed := e.events(t, acme.ID, audit.TypeMemberRemoved); len(removed) != 2 {
			t.Errorf("Got(%d member.removed events); want 2", len(removed))
		}
		members, _ := e.store.ListMembers(ctx, acme.ID)
		if len(members) != 1 || members[0].ID != second.ID || members[0].Role != tenants.RoleAdmin {
			t.Errorf("Got(ListMembers) = %+v; want only ben, admin", members)
		}
		if err := e.store.SetMemberRole(ctx, admin, acme.ID, second.ID, "root"); err == nil {
			t.Errorf("Got(SetMemberRole(root)) = nil; want invalid")
		} else {
			wantField(t, err, "role", "role")
		}
	})
}

// Two admins demoting each other at once must not leave the tenant with
// none: the check and the write happen under one lock per tenant.
func TestLastAdminRace(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		for round := 0; round < 5; round++ {
			tn := e.tenant(t, "race"+string(rune('a'+round)))
			_, a := e.member(t, tn, "a"+tn.Slug, tenants.RoleAdmin)
			_, b := e.member(t, tn, "b"+tn.Slug, tenants.RoleAdmin)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i, m := range []tenants.Membership{a, b} {
				wg.Go(func() { errs[i] = e.store.SetMemberRole(ctx, admin, tn.ID, m.ID, tenants.RoleDeveloper) })
			}
			wg.Wait()
			var admins int
			members, _ := e.store.ListMembers(ctx, tn.ID)
			for _, m := range members {
				if m.Role == tenants.RoleAdmin {
					admins++
				}
			}
			if admins != 1 {
				t.Errorf("round %d: Got(admins after concurrent demotions) = %d (errors %v); want 1", round, admins, errs)
			}
			for _, err := range errs {
				if err != nil && !errors.Is(err, errdefs.ErrConflict) {
					t.Errorf("round %d: Got(SetMemberRole) = %v; want nil or errdefs.ErrConflict", round, err)
				}
			}
		}
	})
}

func TestConcurrentFirstLogin(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		var wg sync.WaitGroup
		ids := make([]string, 4)
		errs := make([]error, 4)
		for i := range ids {
			wg.Go(func() {
				u, err := e.store.UpsertUserAtLogin(ctx, tenants.Identity{Issuer: "https://idp.example", Subject: "same", Email: "s@example.com"})
				ids[i], errs[i] = u.ID, err
			})
		}
		wg.Wait()
		for i := range ids {
			if errs[i] != nil || ids[i] != ids[0] {
				t.Errorf("Got(login %d) = %q, %v; want %q, nil", i, ids[i], errs[i], ids[0])
			}
		}
		var n int64
		e.db.Table("users").Count(&n)
		if n != 1 {
			t.Errorf("Got(users) = %d; want 1", n)
		}
	})
}

func TestLoginValidation(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		cases := []struct {
			id          tenants.Identity
			field, rule string
		}{
			{tenants.Identity{Subject: "s"}, "issuer", "required"},
			{tenants.Identity{Issuer: "https://i", Subject: "  "}, "subject", "required"},
			{tenants.Identity{Issuer: "https://i", Subject: "s", Name: "a\x07b"}, "name", "name_format"},
		}
		for _, c := range cases {
			t.Run(c.field, func(t *testing.T) {
				before := dbtest.Count(t, e.db)
				_, err := e.store.UpsertUserAtLogin(ctx, c.id)
				wantField(t, err, c.field, c.rule)
				unchanged(t, e.db, before)
			})
		}
	})
}
