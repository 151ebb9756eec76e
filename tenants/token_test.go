package tenants_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

func TestCreateAndAuthenticateToken(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		secret, tok, err := e.store.CreateToken(ctx, admin, acme.ID, tenants.NewToken{Name: "ci runner", Role: tenants.RoleDeveloper})
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
		if tok.CreatedBy != admin.ID || tok.TenantID != acme.ID || tok.LastUsedAt != nil {
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
			if _, _, err := e.store.AuthenticateToken(ctx, s); !errors.Is(err, tenants.ErrUnauthorized) {
				t.Errorf("Got(AuthenticateToken(%q)) = %v; want ErrUnauthorized", s, err)
			}
		}
		// The stored hash is not a credential.
		if _, _, err := e.store.AuthenticateToken(ctx, tok.Hash); !errors.Is(err, tenants.ErrUnauthorized) {
			t.Errorf("Got(AuthenticateToken(hash)) = %v; want ErrUnauthorized", err)
		}
	})
}

func TestTokenExpiryAndRevocation(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		short, _, err := e.store.CreateToken(ctx, admin, acme.ID, tenants.NewToken{Name: "short", Role: tenants.RoleAuditor, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		long, longTok, err := e.store.CreateToken(ctx, admin, acme.ID, tenants.NewToken{Name: "long", Role: tenants.RoleAdmin, TTL: 8760 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Hour - time.Microsecond)
		if _, _, err := e.store.AuthenticateToken(ctx, short); err != nil {
			t.Errorf("Got(AuthenticateToken just before expiry) = %v; want nil", err)
		}
		e.clock.Advance(time.Microsecond)
		if _, _, err := e.store.AuthenticateToken(ctx, short); !errors.Is(err, tenants.ErrUnauthorized) {
			t.Errorf("Got(AuthenticateToken at expiry) = %v; want ErrUnauthorized", err)
		}

		if err := e.store.RevokeToken(ctx, admin, acme.ID, longTok.ID); err != nil {
			t.Fatalf("RevokeToken = %v", err)
		}
		if _, _, err := e.store.AuthenticateToken(ctx, long); !errors.Is(err, tenants.ErrUnauthorized) {
			t.Errorf("Got(AuthenticateToken revoked) = %v; want ErrUnauthorized", err)
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
		if err := e.store.RevokeToken(ctx, admin, acme.ID, "missing"); !errors.Is(err, tenants.ErrNotFound) {
			t.Errorf("Got(RevokeToken(missing)) = %v; want ErrNotFound", err)
		}
	})
}

func TestCreateTokenValidation(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		cases := []struct {
			name        string
			nt          tenants.NewToken
			field, rule string
		}{
			{"empty name", tenants.NewToken{Name: " ", Role: tenants.RoleDeveloper}, "name", "name_length"},
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
				secret, _, err := e.store.CreateToken(ctx, admin, acme.ID, c.nt)
				wantField(t, err, c.field, c.rule)
				if secret != "" {
					t.Errorf("Got(secret) = %q on error; want empty", secret)
				}
				unchanged(t, e.db, before)
			})
		}
		if _, _, err := e.store.CreateToken(ctx, admin, acme.ID, tenants.NewToken{Name: strings.Repeat("x", 64), Role: tenants.RoleBilling}); err != nil {
			t.Errorf("Got(CreateToken 64-char name) = %v; want nil", err)
		}
	})
}
