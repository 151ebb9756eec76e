package tenants

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// maxUserAgent bounds the stored User-Agent header.
const maxUserAgent = 512

// truncate makes s valid UTF-8 of at most n bytes, cut on a rune boundary.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// activeMember checks that userID is an active member of tenantID inside tx;
// errdefs.ErrNotFound otherwise (a tenant the user cannot see does not exist).
func activeMember(tx *gorm.DB, tenantID, userID string) error {
	var n int64
	err := tx.Model(&Membership{}).
		Where("tenant_id = ? AND user_id = ? AND activated_at IS NOT NULL", tenantID, userID).Count(&n).Error
	if err != nil {
		return err
	}
	if n == 0 {
		return errdefs.ErrNotFound
	}
	return nil
}

// CreateSession signs a user in: it returns the cookie secret (32 random
// bytes, base64url) and the session, whose ID is the SHA-256 of the secret.
// tenantID is "" or a tenant the user is an active member of. The caller
// records auth.login (it knows the request id and the identity provider).
func (s *Store) CreateSession(ctx context.Context, userID, tenantID, userAgent, remoteAddr string, absolute time.Duration) (string, Session, error) {
	if absolute <= 0 {
		return "", Session{}, errdefs.Invalid("absolute", "duration", "must be positive")
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", Session{}, fmt.Errorf("create session: random: %w", err)
	}
	secret := base64.RawURLEncoding.EncodeToString(b)
	now := s.now()
	sess := Session{
		ID: sha256Hex(secret), UserID: userID, TenantID: tenantID,
		CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(absolute),
		UserAgent: truncate(userAgent, maxUserAgent), RemoteAddr: truncate(remoteAddr, 100),
	}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var u User
		if err := tx.Take(&u, "id = ?", userID).Error; err != nil {
			return notFound(err)
		}
		if tenantID != "" {
			if err := activeMember(tx, tenantID, userID); err != nil {
				return err
			}
		}
		return tx.Create(&sess).Error
	})
	if err != nil {
		return "", Session{}, fmt.Errorf("create session for user %s: %w", userID, err)
	}
	return secret, sess, nil
}

// SessionBySecret returns the live session of a cookie secret. A missing
// session, or one past its absolute expiry or idle for idle or longer
// (idle 0: no idle limit), is errdefs.ErrUnauthorized; an expired one is deleted.
// LastSeenAt is written at most once a minute.
func (s *Store) SessionBySecret(ctx context.Context, secret string, idle time.Duration) (Session, error) {
	if secret == "" {
		return Session{}, fmt.Errorf("session: no secret: %w", errdefs.ErrUnauthorized)
	}
	db := s.db.WithContext(ctx)
	var sess Session
	if err := db.Take(&sess, "id = ?", sha256Hex(secret)).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return Session{}, fmt.Errorf("session: unknown: %w", errdefs.ErrUnauthorized)
		}
		return Session{}, fmt.Errorf("session: %w", err)
	}
	now := s.now()
	if !now.Before(sess.ExpiresAt) || (idle > 0 && now.Sub(sess.LastSeenAt) >= idle) {
		if err := db.Where("id = ?", sess.ID).Delete(&Session{}).Error; err != nil {
			return Session{}, fmt.Errorf("session: delete expired: %w", err)
		}
		return Session{}, fmt.Errorf("session: expired: %w", errdefs.ErrUnauthorized)
	}
	if now.Sub(sess.LastSeenAt) >= touchInterval {
		res := db.Model(&Session{}).Where("id = ? AND last_seen_at <= ?", sess.ID, now.Add(-touchInterval)).
			Update("last_seen_at", now)
		if res.Error != nil {
			return Session{}, fmt.Errorf("session: touch: %w", res.Error)
		}
		sess.LastSeenAt = now
	}
	return sess, nil
}

// SetSessionTenant switches the tenant a session acts in; tenantID must be
// one the session's user is an active member of (errdefs.ErrNotFound otherwise), or
// "" to clear it. It records auth.tenant_selected in that tenant.
func (s *Store) SetSessionTenant(ctx context.Context, sessionID, tenantID string) error {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var sess Session
		if err := tx.Take(&sess, "id = ?", sessionID).Error; err != nil {
			return notFound(err)
		}
		if sess.TenantID == tenantID {
			return nil
		}
		if tenantID != "" {
			if err := activeMember(tx, tenantID, sess.UserID); err != nil {
				return err
			}
		}
		if err := tx.Model(&Session{}).Where("id = ?", sessionID).Update("tenant_id", tenantID).Error; err != nil {
			return err
		}
		if tenantID == "" {
			return nil
		}
		var u User
		if err := tx.Take(&u, "id = ?", sess.UserID).Error; err != nil {
			return err
		}
		a := userActor(u)
		a.RemoteAddr = sess.RemoteAddr
		return s.write(tx, a.Event(tenantID, audit.TypeTenantSelected, "tenant", tenantID, nil))
	})
	if err != nil {
		return fmt.Errorf("set tenant of session: %w", err)
	}
	return nil
}

// DeleteSession signs a session out. Deleting a missing session does
// nothing. The caller records auth.logout.
func (s *Store) DeleteSession(ctx context.Context, sessionID string) error {
	if err := s.db.WithContext(ctx).Where("id = ?", sessionID).Delete(&Session{}).Error; err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

// DeleteExpiredSessions deletes sessions past their absolute expiry and
// returns how many. Idle sessions go when next presented (SessionBySecret).
func (s *Store) DeleteExpiredSessions(ctx context.Context) (int64, error) {
	res := s.db.WithContext(ctx).Where("expires_at <= ?", s.now()).Delete(&Session{})
	if res.Error != nil {
		return 0, fmt.Errorf("delete expired sessions: %w", res.Error)
	}
	return res.RowsAffected, nil
}
