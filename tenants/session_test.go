package tenants_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

const (
	idle     = 30 * time.Minute
	absolute = 12 * time.Hour
)

func TestSessionLifecycle(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		u, _ := e.member(t, acme, "ann", tenants.RoleAdmin)
		secret, sess, err := e.store.CreateSession(ctx, u.ID, "", "Mozilla/5.0", "192.0.2.7", absolute)
		if err != nil {
			t.Fatalf("CreateSession = %v", err)
		}
		sum := sha256.Sum256([]byte(secret))
		if sess.ID != hex.EncodeToString(sum[:]) || len(secret) != 43 || sess.TenantID != "" {
			t.Errorf("Got(session) = %+v, secret %q; want ID = sha256(secret), 43-char secret", sess, secret)
		}
		var stored int64
		e.db.Table("sessions").Where("id = ?", secret).Count(&stored)
		if stored != 0 {
			t.Errorf("the session secret is stored as an id")
		}

		got, err := e.store.SessionBySecret(ctx, secret, idle)
		if err != nil || got.ID != sess.ID || got.UserID != u.ID {
			t.Fatalf("Got(SessionBySecret) = %+v, %v; want the session", got, err)
		}
		if err := e.store.SetSessionTenant(ctx, sess.ID, acme.ID); err != nil {
			t.Fatalf("SetSessionTenant = %v", err)
		}
		if got, _ := e.store.SessionBySecret(ctx, secret, idle); got.TenantID != acme.ID {
			t.Errorf("Got(TenantID) = %q; want %q", got.TenantID, acme.ID)
		}
		if evs := e.events(t, acme.ID, audit.TypeTenantSelected); len(evs) != 1 {
			t.Errorf("Got(%d auth.tenant_selected events); want 1", len(evs))
		}
		other := e.tenant(t, "other")
		if err := e.store.SetSessionTenant(ctx, sess.ID, other.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(SetSessionTenant to a tenant the user is not in) = %v; want errdefs.ErrNotFound", err)
		}
		if err := e.store.SetSessionTenant(ctx, "missing", acme.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(SetSessionTenant of a missing session) = %v; want errdefs.ErrNotFound", err)
		}
		if _, _, err := e.store.CreateSession(ctx, u.ID, other.ID, "", "", absolute); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(CreateSession in a tenant the user is not in) = %v; want errdefs.ErrNotFound", err)
		}
		if _, _, err := e.store.CreateSession(ctx, "missing", "", "", "", absolute); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(CreateSession of a missing user) = %v; want errdefs.ErrNotFound", err)
		}

		if err := e.store.DeleteSession(ctx, sess.ID); err != nil {
			t.Fatalf("DeleteSession = %v", err)
		}
		if _, err := e.store.SessionBySecret(ctx, secret, idle); !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Errorf("Got(SessionBySecret after logout) = %v; want errdefs.ErrUnauthorized", err)
		}
		if err := e.store.DeleteSession(ctx, sess.ID); err != nil {
			t.Errorf("Got(DeleteSession twice) = %v; want nil", err)
		}
		for _, s := range []string{"", "nope", sess.ID} {
			if _, err := e.store.SessionBySecret(ctx, s, idle); !errors.Is(err, errdefs.ErrUnauthorized) {
				t.Errorf("Got(SessionBySecret(%q)) = %v; want errdefs.ErrUnauthorized", s, err)
			}
		}
	})
}

func TestSessionExpiry(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		u := e.login(t, "ann", "ann@example.com")
		count := func() int64 {
			var n int64
			e.db.Table("sessions").Count(&n)
			return n
		}
		lastSeen := func(id string) time.Time {
			var s tenants.Session
			if err := e.db.Take(&s, "id = ?", id).Error; err != nil {
				t.Fatal(err)
			}
			return s.LastSeenAt
		}

		t.Run("idle", func(t *testing.T) {
			secret, sess, err := e.store.CreateSession(ctx, u.ID, "", "", "", absolute)
			if err != nil {
				t.Fatal(err)
			}
			created := sess.LastSeenAt
			e.clock.Advance(30 * time.Second)
			if _, err := e.store.SessionBySecret(ctx, secret, idle); err != nil {
				t.Fatal(err)
			}
			if got := lastSeen(sess.ID); !got.Equal(created) {
				t.Errorf("Got(LastSeenAt after 30s) = %v; want unchanged %v", got, created)
			}
			e.clock.Advance(31 * time.Second)
			got, err := e.store.SessionBySecret(ctx, secret, idle)
			if err != nil {
				t.Fatal(err)
			}
			now := e.clock.Now().Truncate(time.Microsecond)
			if !got.LastSeenAt.Equal(now) || !lastSeen(sess.ID).Equal(now) {
				t.Errorf("Got(LastSeenAt after 61s) = %v; want %v", got.LastSeenAt, now)
			}
			// Activity keeps it alive past the idle limit counted from creation.
			e.clock.Advance(idle - time.Second)
			if _, err := e.store.SessionBySecret(ctx, secret, idle); err != nil {
				t.Errorf("Got(SessionBySecret just inside idle) = %v; want nil", err)
			}
			before := count()
			e.clock.Advance(idle)
			if _, err := e.store.SessionBySecret(ctx, secret, idle); !errors.Is(err, errdefs.ErrUnauthorized) {
				t.Errorf("Got(SessionBySecret after idle) = %v; want errdefs.ErrUnauthorized", err)
			}
			if after := count(); after != before-1 {
				t.Errorf("Got(sessions after idle expiry) = %d; want %d (deleted)", after, before-1)
			}
		})

		t.Run("absolute", func(t *testing.T) {
			secret, _, err := e.store.CreateSession(ctx, u.ID, "", "", "", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			// Kept active: idle never triggers, the absolute limit still does.
			for range 5 {
				e.clock.Advance(11 * time.Minute)
				if _, err := e.store.SessionBySecret(ctx, secret, idle); err != nil {
					t.Fatalf("Got(SessionBySecret within lifetime) = %v; want nil", err)
				}
			}
			e.clock.Advance(5 * time.Minute)
			if _, err := e.store.SessionBySecret(ctx, secret, idle); !errors.Is(err, errdefs.ErrUnauthorized) {
				t.Errorf("Got(SessionBySecret after absolute expiry) = %v; want errdefs.ErrUnauthorized", err)
			}
		})

		t.Run("DeleteExpiredSessions", func(t *testing.T) {
			_, _, err := e.store.CreateSession(ctx, u.ID, "", "", "", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			_, live, err := e.store.CreateSession(ctx, u.ID, "", "", "", 3*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(2 * time.Hour)
			n, err := e.store.DeleteExpiredSessions(ctx)
			if err != nil || n != 1 {
				t.Errorf("Got(DeleteExpiredSessions) = %d, %v; want 1", n, err)
			}
			var ids []string
			e.db.Table("sessions").Pluck("id", &ids)
			if len(ids) != 1 || ids[0] != live.ID {
				t.Errorf("Got(remaining sessions) = %v; want [%s]", ids, live.ID)
			}
		})

		t.Run("validation", func(t *testing.T) {
			_, _, err := e.store.CreateSession(ctx, u.ID, "", "", "", 0)
			wantField(t, err, "absolute", "duration")
		})

		t.Run("long user agent", func(t *testing.T) {
			ua := "\xff" + strings.Repeat("é", 600)
			_, sess, err := e.store.CreateSession(ctx, u.ID, "", ua, "", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			var got tenants.Session
			if err := e.db.Take(&got, "id = ?", sess.ID).Error; err != nil {
				t.Fatal(err)
			}
			if len(got.UserAgent) > 512 || len(got.UserAgent) < 500 || !utf8.ValidString(got.UserAgent) {
				t.Errorf("Got(stored user agent) = %d bytes, valid %v; want 500-512 bytes of valid UTF-8", len(got.UserAgent), utf8.ValidString(got.UserAgent))
			}
		})
	})
}
