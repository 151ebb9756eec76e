package tenants_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

func TestCreateAndAuthenticateToken(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		maker := e.adminOf(t, acme)
		secret, tok, err := e.store.CreateToken(ctx, maker, acme.ID, tenants.NewToken{Name: "ci runner", Role: tenants.RoleDeveloper})
		if err != nil {
			t.Fatalf("CreateToken = %v", err)
		}
		if !regexp.MustCompile(`^stk_[a-z2-7]{8}_[a-z2-7]{52}$`).MatchString(secret) {
			t.Errorf("Got(secret) = %q; want stk_<8>_<52>", secret)
		}
		sum := sha256.Sum256([]byte(secret))
		if tok.Hash != hex.EncodeToString(sum[:]) || tok.Prefix != secret[:12] || !strings.HasPrefix(secret, tok.Prefix+"_") {
			t.Errorf("Got(Hash, Prefix) = %s, %s; want sha256(secret), %s", tok.Hash, tok.Prefix, secret[:12])
		}
		if want := e.clock.Now().Truncate(time.Microsecond).Add(720 * time.Hour); !tok.ExpiresAt.Equal(want) {
			t.Errorf("Got(ExpiresAt) = %v; want %v (default 720h)", tok.ExpiresAt, want)
		}
		if tok.CreatedBy != maker.ID || tok.CreatedByUserID == nil || *tok.CreatedByUserID != maker.ID || tok.TenantID != acme.ID || tok.LastUsedAt != nil {
			t.Errorf("Got(token) = %+v", tok)
		}

		// The secret (or its random part) is stored nowhere.
		body := secret[strings.LastIndex(secret, "_")+1:]
		for _, table := range dbtest.Tables() {
			var rows []map[string]any
			if err := e.db.Table(table).Find(&rows).Error; err != nil {
				t.Fatal(err)
			}
			for _, row := range rows {
				for col, v := range row {
					if s, ok := v.(string); ok && strings.Contains(s, body) {
						t.Errorf("%s.%s holds the token secret", table, col)
					}
				}
			}
		}
		evs := e.events(t, acme.ID, audit.TypeTokenCreated)
		if len(evs) != 1 || evs[0].Details["name"] != "ci runner" || evs[0].Details["prefix"] != tok.Prefix || evs[0].TargetID != tok.ID {
			t.Errorf("Got(token.created events) = %+v", evs)
		}

		e.clock.Advance(time.Minute)
		got, tn, err := e.store.AuthenticateToken(ctx, secret)
		if err != nil || got.ID != tok.ID || tn != acme || got.Role != tenants.RoleDeveloper {
			t.Fatalf("Got(AuthenticateToken) = %+v, %+v, %v; want the token of acme", got, tn, err)
		}
		firstUse := e.clock.Now().Truncate(time.Microsecond)
		if got.LastUsedAt == nil || !got.LastUsedAt.Equal(firstUse) {
			t.Errorf("Got(LastUsedAt) = %v; want %v", got.LastUsedAt, firstUse)
		}
		lastUsed := func() time.Time {
			t.Helper()
			toks, err := e.store.ListTokens(ctx, acme.ID)
			if err != nil || len(toks) != 1 || toks[0].LastUsedAt == nil {
				t.Fatalf("Got(ListTokens) = %+v, %v", toks, err)
			}
			return *toks[0].LastUsedAt
		}
		// Within a minute: not written again.
		e.clock.Advance(30 * time.Second)
		if _, _, err := e.store.AuthenticateToken(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if got := lastUsed(); !got.Equal(firstUse) {
			t.Errorf("Got(LastUsedAt after 30s) = %v; want unchanged %v", got, firstUse)
		}
		e.clock.Advance(31 * time.Second)
		if _, _, err := e.store.AuthenticateToken(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if got, want := lastUsed(), e.clock.Now().Truncate(time.Microsecond); !got.Equal(want) {
			t.Errorf("Got(LastUsedAt after 61s) = %v; want %v", got, want)
		}

		bad := []string{"", "stk_", "Bearer " + secret, strings.ToUpper(secret), secret + "a", secret[:len(secret)-1],
			// Well-formed but unknown.
			secret[:13] + strings.Repeat("a", 52)}
		for _, s := range bad {
			if _, _, err := e.store.AuthenticateToken(ctx, s); !errors.Is(err, errdefs.ErrUnauthorized) {
				t.Errorf("Got(AuthenticateToken(%q)) = %v; want errdefs.ErrUnauthorized", s, err)
			}
		}
		// The stored hash is not a credential.
		if _, _, err := e.store.AuthenticateToken(ctx, tok.Hash); !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Errorf("Got(AuthenticateToken(hash)) = %v; want errdefs.ErrUnauthorized", err)
		}
	})
}

func TestTokenExpiryAndRevocation(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		short, _, err := e.store.CreateToken(ctx, e.adminOf(t, acme), acme.ID, tenants.NewToken{Name: "short", Role: tenants.RoleAuditor, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		long, longTok, err := e.store.CreateToken(ctx, e.adminOf(t, acme), acme.ID, tenants.NewToken{Name: "long", Role: tenants.RoleAdmin, TTL: 8760 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Hour - time.Microsecond)
		if _, _, err := e.store.AuthenticateToken(ctx, short); err != nil {
			t.Errorf("Got(AuthenticateToken just before expiry) = %v; want nil", err)
		}
		e.clock.Advance(time.Microsecond)
		if _, _, err := e.store.AuthenticateToken(ctx, short); !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Errorf("Got(AuthenticateToken at expiry) = %v; want errdefs.ErrUnauthorized", err)
		}

		if err := e.store.RevokeToken(ctx, admin, acme.ID, longTok.ID); err != nil {
			t.Fatalf("RevokeToken = %v", err)
		}
		if _, _, err := e.store.AuthenticateToken(ctx, long); !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Errorf("Got(AuthenticateToken revoked) = %v; want errdefs.ErrUnauthorized", err)
		}
		if err := e.store.RevokeToken(ctx, admin, acme.ID, longTok.ID); err != nil {
			t.Errorf("Got(RevokeToken twice) = %v; want nil", err)
		}
		evs := e.events(t, acme.ID, audit.TypeTokenRevoked)
		if len(evs) != 1 || evs[0].TargetID != longTok.ID || evs[0].Code != "SK4001I" {
			t.Errorf("Got(token.revoked events) = %+v; want exactly one", evs)
		}
		toks, err := e.store.ListTokens(ctx, acme.ID)
		if err != nil || len(toks) != 2 || toks[0].ID != longTok.ID || toks[0].RevokedAt == nil {
			t.Errorf("Got(ListTokens) = %+v, %v; want 2, newest first, long revoked", toks, err)
		}
		if err := e.store.RevokeToken(ctx, admin, acme.ID, "missing"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(RevokeToken(missing)) = %v; want errdefs.ErrNotFound", err)
		}
	})
}

func TestCreateTokenValidation(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		maker := e.adminOf(t, acme)
		cases := []struct {
			name        string
			nt          tenants.NewToken
			field, rule string
		}{
			{"empty name", tenants.NewToken{Name: " ", Role: tenants.RoleDeveloper}, "name", "required"},
			{"empty role", tenants.NewToken{Name: "ci"}, "role", "required"},
			{"long name", tenants.NewToken{Name: strings.Repeat("x", 65), Role: tenants.RoleDeveloper}, "name", "name_length"},
			{"control", tenants.NewToken{Name: "a\tb", Role: tenants.RoleDeveloper}, "name", "name_format"},
			{"role", tenants.NewToken{Name: "ci", Role: "superuser"}, "role", "role"},
			{"ttl short", tenants.NewToken{Name: "ci", Role: tenants.RoleDeveloper, TTL: 59 * time.Minute}, "ttl", "ttl_range"},
			{"ttl long", tenants.NewToken{Name: "ci", Role: tenants.RoleDeveloper, TTL: 8761 * time.Hour}, "ttl", "ttl_range"},
			{"ttl negative", tenants.NewToken{Name: "ci", Role: tenants.RoleDeveloper, TTL: -time.Hour}, "ttl", "ttl_range"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				before := dbtest.Count(t, e.db)
				secret, _, err := e.store.CreateToken(ctx, maker, acme.ID, c.nt)
				wantField(t, err, c.field, c.rule)
				if secret != "" {
					t.Errorf("Got(secret) = %q on error; want empty", secret)
				}
				unchanged(t, e.db, before)
			})
		}
		// Every field at fault at once, in the fields' order.
		_, _, err := e.store.CreateToken(ctx, maker, acme.ID, tenants.NewToken{Name: "", Role: "superuser", TTL: time.Minute})
		var got []string
		for _, fe := range errdefs.FieldErrors(err) {
			got = append(got, fe.Field+"/"+fe.Rule)
		}
		if strings.Join(got, ",") != "name/required,role/role,ttl/ttl_range" {
			t.Errorf("Got(field errors of an all-bad token) = %v; want [name/required role/role ttl/ttl_range]", got)
		}
		if _, _, err := e.store.CreateToken(ctx, maker, acme.ID, tenants.NewToken{Name: strings.Repeat("x", 64), Role: tenants.RoleBilling}); err != nil {
			t.Errorf("Got(CreateToken 64-char name) = %v; want nil", err)
		}
	})
}

// TestTokensFollowTheirCreator: a token made by a person does no more than
// that person may. Demoting them caps their tokens (or revokes those the new
// role does not cover), removing them revokes every one, each audited; and
// authentication checks the person's current membership and role whatever
// the stored token says (a row the change missed, written before it, or
// restored from a backup).
func TestTokensFollowTheirCreator(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		ann, annM := e.member(t, acme, "ann", tenants.RoleAdmin)
		_, _ = e.member(t, acme, "bob", tenants.RoleAdmin)
		bob := e.adminOf(t, acme) // a third admin who demotes and removes
		annActor := audit.Actor{Kind: audit.ActorUser, ID: ann.ID, Name: ann.Email}
		mk := func(actor audit.Actor, name string, role tenants.Role) (string, tenants.APIToken) {
			t.Helper()
			secret, tok, err := e.store.CreateToken(ctx, actor, acme.ID, tenants.NewToken{Name: name, Role: role})
			if err != nil {
				t.Fatalf("CreateToken(%s, %s) = %v", name, role, err)
			}
			return secret, tok
		}
		adminSecret, adminTok := mk(annActor, "ann-admin", tenants.RoleAdmin)
		devSecret, devTok := mk(annActor, "ann-dev", tenants.RoleDeveloper)
		audSecret, audTok := mk(annActor, "ann-auditor", tenants.RoleAuditor)
		_, billTok := mk(annActor, "ann-billing", tenants.RoleBilling)
		// A token made through the API by ann's token is ann's too.
		childSecret, childTok := mk(audit.Actor{Kind: audit.ActorToken, ID: adminTok.ID, Name: "ann-admin"}, "ann-child", tenants.RoleAuditor)
		if childTok.CreatedByUserID == nil || *childTok.CreatedByUserID != ann.ID {
			t.Fatalf("Got(token made by ann's token).CreatedByUserID = %v; want ann %s", childTok.CreatedByUserID, ann.ID)
		}
		// Operator-made (admin command) tokens belong to no member.
		opSecret, _ := mk(audit.Actor{Kind: audit.ActorSystem, ID: "cli"}, "operator", tenants.RoleDeveloper)

		role := func(secret string) (tenants.Role, error) {
			t.Helper()
			tok, _, err := e.store.AuthenticateToken(ctx, secret)
			return tok.Role, err
		}
		stored := func(id string) tenants.APIToken {
			t.Helper()
			var tok tenants.APIToken
			if err := e.db.Take(&tok, "id = ?", id).Error; err != nil {
				t.Fatal(err)
			}
			return tok
		}
		reason := func(err error) string {
			var te *tenants.TokenError
			if errors.As(err, &te) {
				return te.Reason
			}
			return ""
		}

		// Demotion: admin -> manager.
		if err := e.store.SetMemberRole(ctx, bob, acme.ID, annM.ID, tenants.RoleManager); err != nil {
			t.Fatalf("SetMemberRole(ann, manager) = %v", err)
		}
		for _, tc := range []struct {
			name    string
			tok     tenants.APIToken
			role    tenants.Role // stored role afterwards
			revoked bool
		}{
			{"admin token capped", adminTok, tenants.RoleManager, false},
			{"developer token revoked (a manager may not write)", devTok, tenants.RoleDeveloper, true},
			{"auditor token kept", audTok, tenants.RoleAuditor, false},
			{"billing token revoked (a manager may not export)", billTok, tenants.RoleBilling, true},
		} {
			got := stored(tc.tok.ID)
			if got.Role != tc.role || (got.RevokedAt != nil) != tc.revoked {
				t.Errorf("%s: Got(role, revoked) = %s, %v; want %s, %v", tc.name, got.Role, got.RevokedAt != nil, tc.role, tc.revoked)
			}
		}
		if evs := e.events(t, acme.ID, audit.TypeTokenRoleCapped); len(evs) != 1 || evs[0].TargetID != adminTok.ID ||
			evs[0].Details["from"] != "admin" || evs[0].Details["to"] != "manager" || evs[0].ActorID != bob.ID {
			t.Errorf("Got(token.role_capped events) = %+v; want one, ann's admin token admin -> manager, by bob", evs)
		}
		if got, err := role(adminSecret); err != nil || got != tenants.RoleManager {
			t.Errorf("Got(authenticate ann's admin token after demotion) = %s, %v; want manager", got, err)
		}
		if _, err := role(devSecret); !errors.Is(err, errdefs.ErrUnauthorized) || reason(err) != "revoked" {
			t.Errorf("Got(authenticate ann's developer token after demotion) = %v; want revoked", err)
		}
		// Authentication caps whatever the row says.
		if err := e.db.Model(&tenants.APIToken{}).Where("id = ?", adminTok.ID).Update("role", tenants.RoleAdmin).Error; err != nil {
			t.Fatal(err)
		}
		if got, err := role(adminSecret); err != nil || got != tenants.RoleManager {
			t.Errorf("Got(authenticate an uncapped admin token of a manager) = %s, %v; want manager", got, err)
		}
		if err := e.db.Model(&tenants.APIToken{}).Where("id = ?", devTok.ID).Update("revoked_at", nil).Error; err != nil {
			t.Fatal(err)
		}
		if _, err := role(devSecret); !errors.Is(err, errdefs.ErrUnauthorized) || reason(err) != "creator_role" {
			t.Errorf("Got(authenticate an unrevoked developer token of a manager) = %v; want refused, creator_role", err)
		}

		// Removal revokes every live token of hers, audited with the reason.
		before := len(e.events(t, acme.ID, audit.TypeTokenRevoked))
		if err := e.store.RemoveMember(ctx, bob, acme.ID, annM.ID); err != nil {
			t.Fatalf("RemoveMember(ann) = %v", err)
		}
		revoked := map[string]bool{}
		evs := e.events(t, acme.ID, audit.TypeTokenRevoked)
		for _, ev := range evs {
			if ev.Details["reason"] == "member_removed" {
				revoked[ev.TargetID] = true
				if ev.ActorID != bob.ID {
					t.Errorf("Got(token.revoked actor) = %s; want bob %s", ev.ActorID, bob.ID)
				}
			}
		}
		if want := map[string]bool{adminTok.ID: true, devTok.ID: true, audTok.ID: true, childTok.ID: true}; len(evs)-before != 4 || len(revoked) != 4 ||
			!revoked[adminTok.ID] || !revoked[devTok.ID] || !revoked[audTok.ID] || !revoked[childTok.ID] {
			t.Errorf("Got(token.revoked member_removed) = %v (%d new events); want %v", revoked, len(evs)-before, want)
		}
		for _, s := range []string{adminSecret, audSecret, childSecret} {
			if _, err := role(s); !errors.Is(err, errdefs.ErrUnauthorized) {
				t.Errorf("Got(authenticate a removed member's token) = %v; want errdefs.ErrUnauthorized", err)
			}
		}
		// Authentication checks membership whatever the row says.
		if err := e.db.Model(&tenants.APIToken{}).Where("id = ?", audTok.ID).Update("revoked_at", nil).Error; err != nil {
			t.Fatal(err)
		}
		if _, err := role(audSecret); !errors.Is(err, errdefs.ErrUnauthorized) || reason(err) != "creator_not_member" {
			t.Errorf("Got(authenticate an unrevoked token of a removed member) = %v; want refused, creator_not_member", err)
		}
		// The operator's token does not depend on any member.
		if got, err := role(opSecret); err != nil || got != tenants.RoleDeveloper {
			t.Errorf("Got(authenticate the operator's token) = %s, %v; want developer", got, err)
		}
	})
}

// A member may only make tokens their role covers, and only while a member.
func TestCreateTokenNeedsMember(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		other := e.tenant(t, "other")
		stranger := e.adminOf(t, other)
		before := dbtest.Count(t, e.db)
		if _, _, err := e.store.CreateToken(ctx, stranger, acme.ID, tenants.NewToken{Name: "x", Role: tenants.RoleAdmin}); !errors.Is(err, errdefs.ErrForbidden) {
			t.Errorf("Got(CreateToken by another tenant's admin) = %v; want errdefs.ErrForbidden", err)
		}
		if _, _, err := e.store.CreateToken(ctx, audit.Actor{Kind: audit.ActorToken, ID: "no-such-token"}, acme.ID,
			tenants.NewToken{Name: "x", Role: tenants.RoleAdmin}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(CreateToken by an unknown token) = %v; want errdefs.ErrNotFound", err)
		}
		unchanged(t, e.db, before)
	})
}

func TestCapRole(t *testing.T) {
	for _, tc := range []struct {
		tok, member, want tenants.Role
		ok                bool
	}{
		{tenants.RoleAdmin, tenants.RoleAdmin, tenants.RoleAdmin, true},
		{tenants.RoleAdmin, tenants.RoleManager, tenants.RoleManager, true},
		{tenants.RoleAdmin, tenants.RoleDeveloper, tenants.RoleDeveloper, true},
		{tenants.RoleDeveloper, tenants.RoleAdmin, tenants.RoleDeveloper, true},
		{tenants.RoleAuditor, tenants.RoleManager, tenants.RoleAuditor, true},
		{tenants.RoleManager, tenants.RoleAuditor, tenants.RoleAuditor, true},
		{tenants.RoleDeveloper, tenants.RoleManager, "", false},
		{tenants.RoleDeveloper, tenants.RoleAuditor, "", false},
		{tenants.RoleBilling, tenants.RoleManager, "", false},
		{tenants.RoleAdmin, "superuser", "", false},
	} {
		if got, ok := tenants.CapRole(tc.tok, tc.member); got != tc.want || ok != tc.ok {
			t.Errorf("Got(CapRole(%s, %s)) = %s, %v; want %s, %v", tc.tok, tc.member, got, ok, tc.want, tc.ok)
		}
	}
}

// TestOwnTokens: a member lists and revokes only the tokens they made;
// another member's, an operator's or another tenant's token is not found
// to them and stays live; a role their own does not cover is a field error
// naming role.
func TestOwnTokens(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		other := e.tenant(t, "other")
		dev, _ := e.member(t, acme, "dev", tenants.RoleDeveloper)
		bob, _ := e.member(t, acme, "bob", tenants.RoleDeveloper)
		devActor := audit.Actor{Kind: audit.ActorUser, ID: dev.ID, Name: dev.Email}
		bobActor := audit.Actor{Kind: audit.ActorUser, ID: bob.ID, Name: bob.Email}
		mk := func(actor audit.Actor, tenantID, name string) tenants.APIToken {
			t.Helper()
			_, tok, err := e.store.CreateToken(ctx, actor, tenantID, tenants.NewToken{Name: name, Role: tenants.RoleDeveloper})
			if err != nil {
				t.Fatalf("CreateToken(%s) = %v", name, err)
			}
			return tok
		}
		mine := mk(devActor, acme.ID, "dev-1")
		mk(devActor, acme.ID, "dev-2")
		bobs := mk(bobActor, acme.ID, "bob-1")
		ops := mk(audit.Actor{Kind: audit.ActorSystem, ID: "cli"}, acme.ID, "operator")
		elsewhere := mk(e.adminOf(t, other), other.ID, "other-1")

		got, err := e.store.ListTokensOf(ctx, acme.ID, dev.ID)
		if err != nil || len(got) != 2 || got[0].Name != "dev-2" || got[1].Name != "dev-1" {
			t.Errorf("Got(ListTokensOf dev) = %+v, %v; want dev-2, dev-1", got, err)
		}
		for _, tok := range []tenants.APIToken{bobs, ops, elsewhere} {
			before := dbtest.Count(t, e.db)
			if err := e.store.RevokeTokenOf(ctx, devActor, acme.ID, dev.ID, tok.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(dev revokes %s) = %v; want errdefs.ErrNotFound", tok.Name, err)
			}
			unchanged(t, e.db, before)
		}
		if err := e.store.RevokeTokenOf(ctx, devActor, acme.ID, dev.ID, mine.ID); err != nil {
			t.Errorf("Got(dev revokes their own) = %v; want nil", err)
		}
		if got, _ := e.store.ListTokensOf(ctx, acme.ID, dev.ID); len(got) != 2 || got[1].RevokedAt == nil {
			t.Errorf("Got(dev's tokens after the revoke) = %+v; want dev-1 revoked", got)
		}
		for _, role := range []tenants.Role{tenants.RoleAdmin, tenants.RoleManager, tenants.RoleAuditor, tenants.RoleBilling} {
			before := dbtest.Count(t, e.db)
			_, _, err := e.store.CreateToken(ctx, devActor, acme.ID, tenants.NewToken{Name: "up", Role: role})
			wantField(t, err, "role", "role_above_yours")
			unchanged(t, e.db, before)
		}
	})
}

func TestRolesCoveredBy(t *testing.T) {
	for _, tc := range []struct {
		role tenants.Role
		want []tenants.Role
	}{
		{tenants.RoleAdmin, tenants.Roles},
		{tenants.RoleManager, []tenants.Role{tenants.RoleManager, tenants.RoleAuditor}},
		{tenants.RoleDeveloper, []tenants.Role{tenants.RoleDeveloper}},
		{tenants.RoleAuditor, []tenants.Role{tenants.RoleAuditor}},
		{tenants.RoleBilling, []tenants.Role{tenants.RoleBilling}},
		{"superuser", nil},
	} {
		if got := tenants.RolesCoveredBy(tc.role); !slices.Equal(got, tc.want) {
			t.Errorf("Got(RolesCoveredBy(%s)) = %v; want %v", tc.role, got, tc.want)
		}
	}
}
