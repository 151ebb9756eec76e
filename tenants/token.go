package tenants

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
)

// NewToken describes an API token to create. TTL 0 means DefaultTokenTTL.
type NewToken struct {
	Name string
	Role Role
	TTL  time.Duration
}

// Token lifetimes.
const (
	DefaultTokenTTL = 720 * time.Hour
	MinTokenTTL     = time.Hour
	MaxTokenTTL     = 8760 * time.Hour
)

// tokenEncoding is lowercase base32 without padding: case-insensitive safe,
// no characters that need quoting in a shell or header.
var tokenEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// tokenPattern is "stk_" + 8-char prefix (5 random bytes) + "_" + 52 chars
// (32 random bytes).
var tokenPattern = regexp.MustCompile(`^stk_[a-z2-7]{8}_[a-z2-7]{52}$`)

// touchInterval bounds how often a use of a token or session is written.
const touchInterval = time.Minute

func randomText(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return tokenEncoding.EncodeToString(b), nil
}

// CreateToken makes an API token and returns its secret, which is shown
// once and never stored: the database keeps its SHA-256 and visible prefix.
func (s *Store) CreateToken(ctx context.Context, actor audit.Actor, tenantID string, nt NewToken) (string, APIToken, error) {
	name := strings.TrimSpace(nt.Name)
	if name == "" || utf8.RuneCountInString(name) > 64 {
		return "", APIToken{}, Invalid("name", "name_length", "must be 1-64 characters")
	}
	if err := checkName("name", name, 64); err != nil {
		return "", APIToken{}, err
	}
	if err := checkRole(nt.Role); err != nil {
		return "", APIToken{}, err
	}
	ttl := nt.TTL
	if ttl == 0 {
		ttl = DefaultTokenTTL
	}
	if ttl < MinTokenTTL || ttl > MaxTokenTTL {
		return "", APIToken{}, Invalid("ttl", "ttl_range", "must be between 1h and 8760h (one year)")
	}
	prefix, err := randomText(5)
	if err != nil {
		return "", APIToken{}, err
	}
	body, err := randomText(32)
	if err != nil {
		return "", APIToken{}, err
	}
	secret := "stk_" + prefix + "_" + body
	id, err := newID()
	if err != nil {
		return "", APIToken{}, err
	}
	now := s.now()
	tok := APIToken{
		ID: id, TenantID: tenantID, Name: name, Prefix: "stk_" + prefix, Hash: sha256Hex(secret),
		Role: nt.Role, CreatedBy: actor.ID, CreatedAt: now, ExpiresAt: now.Add(ttl),
	}
	err = s.tx(ctx, func(tx *gorm.DB) error {
		if _, err := lockTenant(tx, tenantID); err != nil {
			return err
		}
		if err := tx.Create(&tok).Error; err != nil {
			return err
		}
		return s.write(tx, actor.Event(tenantID, audit.TypeTokenCreated, "token", tok.ID, map[string]any{
			"name": tok.Name, "prefix": tok.Prefix, "role": string(tok.Role), "expires_at": tok.ExpiresAt,
		}))
	})
	if err != nil {
		return "", APIToken{}, fmt.Errorf("create token %q in tenant %s: %w", name, tenantID, err)
	}
	return secret, tok, nil
}

// ListTokens returns the tenant's tokens, newest first, including revoked
// and expired ones (the UI shows their state).
func (s *Store) ListTokens(ctx context.Context, tenantID string) ([]APIToken, error) {
	var out []APIToken
	if err := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID).Order("id DESC").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list tokens of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// RevokeToken revokes a token of the tenant. Revoking a revoked token does
// nothing.
func (s *Store) RevokeToken(ctx context.Context, actor audit.Actor, tenantID, tokenID string) error {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var tok APIToken
		if err := tx.Take(&tok, "id = ? AND tenant_id = ?", tokenID, tenantID).Error; err != nil {
			return notFound(err)
		}
		if tok.RevokedAt != nil {
			return nil
		}
		res := tx.Model(&APIToken{}).Where("id = ? AND tenant_id = ? AND revoked_at IS NULL", tokenID, tenantID).
			Update("revoked_at", s.now())
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return nil
		}
		return s.write(tx, actor.Event(tenantID, audit.TypeTokenRevoked, "token", tok.ID,
			map[string]any{"name": tok.Name, "prefix": tok.Prefix}))
	})
	if err != nil {
		return fmt.Errorf("revoke token %s: %w", tokenID, err)
	}
	return nil
}

// TokenError is a known token that may no longer be used: its tenant's
// security team wants to hear of it. It wraps ErrUnauthorized.
type TokenError struct {
	TenantID, Prefix, Reason string // reason: revoked, expired
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("authenticate token %s: %s", e.Prefix, e.Reason)
}

// Unwrap makes errors.Is(err, ErrUnauthorized) hold.
func (e *TokenError) Unwrap() error { return ErrUnauthorized }

// AuthenticateToken returns the live token whose secret this is, and its
// tenant. Unknown, malformed, expired and revoked tokens are all
// ErrUnauthorized. Lookup is by hash, so no constant-time compare is needed.
// Expired and revoked ones are a *TokenError naming their tenant.
func (s *Store) AuthenticateToken(ctx context.Context, secret string) (APIToken, Tenant, error) {
	if !tokenPattern.MatchString(secret) {
		return APIToken{}, Tenant{}, fmt.Errorf("authenticate token: malformed: %w", ErrUnauthorized)
	}
	db := s.db.WithContext(ctx)
	var tok APIToken
	if err := db.Take(&tok, "hash = ?", sha256Hex(secret)).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return APIToken{}, Tenant{}, fmt.Errorf("authenticate token: unknown: %w", ErrUnauthorized)
		}
		return APIToken{}, Tenant{}, fmt.Errorf("authenticate token: %w", err)
	}
	now := s.now()
	switch {
	case tok.RevokedAt != nil:
		return APIToken{}, Tenant{}, &TokenError{TenantID: tok.TenantID, Prefix: tok.Prefix, Reason: "revoked"}
	case !now.Before(tok.ExpiresAt):
		return APIToken{}, Tenant{}, &TokenError{TenantID: tok.TenantID, Prefix: tok.Prefix, Reason: "expired"}
	}
	var t Tenant
	if err := db.Take(&t, "id = ?", tok.TenantID).Error; err != nil {
		return APIToken{}, Tenant{}, fmt.Errorf("authenticate token %s: tenant: %w", tok.Prefix, notFound(err))
	}
	if tok.LastUsedAt == nil || now.Sub(*tok.LastUsedAt) >= touchInterval {
		// Conditional, so concurrent requests and replicas write once.
		res := db.Model(&APIToken{}).
			Where("id = ? AND (last_used_at IS NULL OR last_used_at <= ?)", tok.ID, now.Add(-touchInterval)).
			Update("last_used_at", now)
		if res.Error != nil {
			return APIToken{}, Tenant{}, fmt.Errorf("authenticate token %s: touch: %w", tok.Prefix, res.Error)
		}
		if res.RowsAffected > 0 {
			tok.LastUsedAt = &now
		}
	}
	return tok, t, nil
}
