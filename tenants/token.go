package tenants

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
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

// ParseTTL reads a lifetime as people and the CLI write it (tokens,
// secrets): a Go duration ("36h") or whole days ("30d"); "" is 0 (the
// default). A malformed one is a *errdefs.FieldError on "ttl". Whether the
// lifetime is allowed is for the store that keeps it to say.
func ParseTTL(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n <= 0 {
			return 0, errdefs.Invalid("ttl", "ttl_format", `must be a duration like "720h" or "30d"`)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		return 0, errdefs.Invalid("ttl", "ttl_format", `must be a duration like "720h" or "30d"`)
	}
	return dur, nil
}

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

// Check validates every field of nt, reporting all that are wrong at once
// (joined *errdefs.FieldError), and returns it normalised: the name trimmed,
// the default TTL for none. The role's cap (at most the creator's) is
// checked where the creator is known.
func (nt NewToken) Check() (NewToken, error) {
	var errs []error
	nt.Name = strings.TrimSpace(nt.Name)
	switch {
	case nt.Name == "":
		errs = append(errs, errdefs.Required("name"))
	case utf8.RuneCountInString(nt.Name) > 64:
		errs = append(errs, errdefs.Invalid("name", "name_length", "must be 1-64 characters"))
	default:
		if err := checkName("name", nt.Name, 64); err != nil {
			errs = append(errs, err)
		}
	}
	if nt.Role == "" {
		errs = append(errs, errdefs.Required("role"))
	} else if err := checkRole(nt.Role); err != nil {
		errs = append(errs, err)
	}
	if nt.TTL == 0 {
		nt.TTL = DefaultTokenTTL
	}
	if nt.TTL < MinTokenTTL || nt.TTL > MaxTokenTTL {
		errs = append(errs, errdefs.Invalid("ttl", "ttl_range", "must be between 1h and 8760h (one year)"))
	}
	return nt, errors.Join(errs...)
}

// CreateToken makes an API token and returns its secret, which is shown
// once and never stored: the database keeps its SHA-256 and visible prefix.
func (s *Store) CreateToken(ctx context.Context, actor audit.Actor, tenantID string, nt NewToken) (string, APIToken, error) {
	nt, err := nt.Check()
	if err != nil {
		return "", APIToken{}, err
	}
	name, ttl := nt.Name, nt.TTL
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
		if tok.CreatedByUserID, err = tokenCreator(tx, actor, tenantID, tok.Role); err != nil {
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

// tokenCreator is the person behind a new token of role made by actor in
// the tenant: a user actor must be an active member whose role covers the
// token's; a token actor passes on its own person and may make tokens its
// own acting role covers (its role capped by its person's); system actors
// (admin commands) have none and no cap. A role above the cap is a field
// error naming role.
func tokenCreator(tx *gorm.DB, actor audit.Actor, tenantID string, role Role) (*string, error) {
	var userID string
	var parent *APIToken
	switch actor.Kind {
	case audit.ActorUser:
		userID = actor.ID
	case audit.ActorToken:
		parent = &APIToken{}
		if err := tx.Take(parent, "id = ? AND tenant_id = ?", actor.ID, tenantID).Error; err != nil {
			return nil, fmt.Errorf("creating token: %w", notFound(err))
		}
		if parent.CreatedByUserID == nil {
			return nil, capTokenRole(role, parent.Role, "this token's")
		}
		userID = *parent.CreatedByUserID
	default:
		return nil, nil
	}
	var m Membership
	err := tx.Take(&m, "tenant_id = ? AND user_id = ? AND activated_at IS NOT NULL", tenantID, userID).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, fmt.Errorf("%w: only a member of the tenant may make its tokens", errdefs.ErrForbidden)
	}
	if err != nil {
		return nil, err
	}
	limit, whose := m.Role, "your"
	if parent != nil {
		capped, ok := CapRole(parent.Role, m.Role)
		if !ok {
			return nil, fmt.Errorf("%w: this token may not act for its member", errdefs.ErrForbidden)
		}
		limit, whose = capped, "this token's"
	}
	if err := capTokenRole(role, limit, whose); err != nil {
		return nil, err
	}
	return &userID, nil
}

// capTokenRole refuses a token role that limit does not cover, as a field
// error naming role and the roles that are allowed.
func capTokenRole(role, limit Role, whose string) error {
	if covers(limit, role) && limit.Valid() {
		return nil
	}
	allowed := make([]string, 0, len(Roles))
	for _, r := range RolesCoveredBy(limit) {
		allowed = append(allowed, string(r))
	}
	return errdefs.Invalid("role", "role_above_yours", fmt.Sprintf("may be at most %s role (%s): one of %s",
		whose, limit, strings.Join(allowed, ", ")))
}

// tokensOf returns the live tokens of the user in the tenant, inside tx.
func tokensOf(tx *gorm.DB, tenantID, userID string) ([]APIToken, error) {
	var out []APIToken
	err := tx.Where("tenant_id = ? AND created_by_user_id = ? AND revoked_at IS NULL", tenantID, userID).Order("id").Find(&out).Error
	return out, err
}

// revokeTokensOf revokes the user's live tokens in the tenant inside tx,
// each audited as token.revoked with reason.
func (s *Store) revokeTokensOf(tx *gorm.DB, actor audit.Actor, tenantID, userID, reason string) error {
	toks, err := tokensOf(tx, tenantID, userID)
	if err != nil {
		return err
	}
	for _, tok := range toks {
		if err := s.revoke(tx, actor, tok, reason); err != nil {
			return err
		}
	}
	return nil
}

// capTokensOf lowers the role of the user's live tokens in the tenant to
// what role allows (CapRole) inside tx, each audited as token.role_capped;
// a token CapRole refuses outright is revoked (reason member_role_changed).
func (s *Store) capTokensOf(tx *gorm.DB, actor audit.Actor, tenantID, userID string, role Role) error {
	toks, err := tokensOf(tx, tenantID, userID)
	if err != nil {
		return err
	}
	for _, tok := range toks {
		capped, ok := CapRole(tok.Role, role)
		switch {
		case !ok:
			if err := s.revoke(tx, actor, tok, "member_role_changed"); err != nil {
				return err
			}
		case capped != tok.Role:
			if err := tx.Model(&APIToken{}).Where("id = ? AND tenant_id = ?", tok.ID, tenantID).Update("role", capped).Error; err != nil {
				return err
			}
			if err := s.write(tx, actor.Event(tenantID, audit.TypeTokenRoleCapped, "token", tok.ID, map[string]any{
				"name": tok.Name, "prefix": tok.Prefix, "from": string(tok.Role), "to": string(capped),
			})); err != nil {
				return err
			}
		}
	}
	return nil
}

// revoke revokes one live token inside tx and audits it; reason is ""
// when a person revoked it by hand.
func (s *Store) revoke(tx *gorm.DB, actor audit.Actor, tok APIToken, reason string) error {
	res := tx.Model(&APIToken{}).Where("id = ? AND tenant_id = ? AND revoked_at IS NULL", tok.ID, tok.TenantID).
		Update("revoked_at", s.now())
	if res.Error != nil || res.RowsAffected == 0 {
		return res.Error
	}
	details := map[string]any{"name": tok.Name, "prefix": tok.Prefix}
	if reason != "" {
		details["reason"] = reason
	}
	return s.write(tx, actor.Event(tok.TenantID, audit.TypeTokenRevoked, "token", tok.ID, details))
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

// ListTokensOf returns the tokens the user made in the tenant (directly or
// through another of their tokens), newest first, revoked and expired ones
// included.
func (s *Store) ListTokensOf(ctx context.Context, tenantID, userID string) ([]APIToken, error) {
	var out []APIToken
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND created_by_user_id = ?", tenantID, userID).Order("id DESC").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list tokens of user %s in tenant %s: %w", userID, tenantID, err)
	}
	return out, nil
}

// RevokeToken revokes a token of the tenant. Revoking a revoked token does
// nothing.
func (s *Store) RevokeToken(ctx context.Context, actor audit.Actor, tenantID, tokenID string) error {
	return s.revokeToken(ctx, actor, tenantID, tokenID, nil)
}

// RevokeTokenOf revokes a token the user made in the tenant; another
// member's token (or one no member made) is errdefs.ErrNotFound.
func (s *Store) RevokeTokenOf(ctx context.Context, actor audit.Actor, tenantID, userID, tokenID string) error {
	return s.revokeToken(ctx, actor, tenantID, tokenID, &userID)
}

// revokeToken revokes the tenant's token, made by *owner when owner is set.
func (s *Store) revokeToken(ctx context.Context, actor audit.Actor, tenantID, tokenID string, owner *string) error {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		q := tx.Where("id = ? AND tenant_id = ?", tokenID, tenantID)
		if owner != nil {
			q = q.Where("created_by_user_id = ?", *owner)
		}
		var tok APIToken
		if err := q.Take(&tok).Error; err != nil {
			return notFound(err)
		}
		if tok.RevokedAt != nil {
			return nil
		}
		return s.revoke(tx, actor, tok, "")
	})
	if err != nil {
		return fmt.Errorf("revoke token %s: %w", tokenID, err)
	}
	return nil
}

// TokenError is a known token that may no longer be used: its tenant's
// security team wants to hear of it. It wraps errdefs.ErrUnauthorized.
type TokenError struct {
	// Reason: revoked, expired, creator_not_member (the person who made it
	// left the tenant), creator_role (their role no longer covers it).
	TenantID, Prefix, Reason string
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("authenticate token %s: %s", e.Prefix, e.Reason)
}

// Unwrap makes errors.Is(err, errdefs.ErrUnauthorized) hold.
func (e *TokenError) Unwrap() error { return errdefs.ErrUnauthorized }

// AuthenticateToken returns the live token whose secret this is, and its
// tenant. Unknown, malformed, expired and revoked tokens are all
// errdefs.ErrUnauthorized. Lookup is by hash, so no constant-time compare is needed.
// Expired and revoked ones are a *TokenError naming their tenant.
//
// A token made by a person acts only while that person is an active member
// of the tenant, and with at most their current role: the returned token's
// Role is the role it acts with (CapRole of its own and theirs). Removal
// and demotion also revoke or cap the stored token; this check is what
// holds whatever the stored row says.
func (s *Store) AuthenticateToken(ctx context.Context, secret string) (APIToken, Tenant, error) {
	if !tokenPattern.MatchString(secret) {
		return APIToken{}, Tenant{}, fmt.Errorf("authenticate token: malformed: %w", errdefs.ErrUnauthorized)
	}
	db := s.db.WithContext(ctx)
	var tok APIToken
	if err := db.Take(&tok, "hash = ?", sha256Hex(secret)).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return APIToken{}, Tenant{}, fmt.Errorf("authenticate token: unknown: %w", errdefs.ErrUnauthorized)
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
	if tok.CreatedByUserID != nil {
		var m Membership
		err := db.Take(&m, "tenant_id = ? AND user_id = ? AND activated_at IS NOT NULL", tok.TenantID, *tok.CreatedByUserID).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return APIToken{}, Tenant{}, &TokenError{TenantID: tok.TenantID, Prefix: tok.Prefix, Reason: "creator_not_member"}
		}
		if err != nil {
			return APIToken{}, Tenant{}, fmt.Errorf("authenticate token %s: creator: %w", tok.Prefix, err)
		}
		role, ok := CapRole(tok.Role, m.Role)
		if !ok {
			return APIToken{}, Tenant{}, &TokenError{TenantID: tok.TenantID, Prefix: tok.Prefix, Reason: "creator_role"}
		}
		tok.Role = role
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
