package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Preview links (previews.go)
//
// A preview link reaches one port of one sandbox without a session: a
// random token in the URL, valid until it expires or is revoked. Only the
// token's SHA-256 is stored; the token itself is shown once, at creation.
// Creating and revoking are audited (sandbox.preview_created,
// sandbox.preview_revoked) without the token.

// Preview link lifetimes: DefaultPreviewTTL when none is asked,
// MaxPreviewTTL at most.
const (
	DefaultPreviewTTL = time.Hour
	MaxPreviewTTL     = 7 * 24 * time.Hour
	// previewTokenPrefix marks a preview token (so a leaked one is
	// recognisable by scanners).
	previewTokenPrefix = "stkp_"
	// maxPreviewLinks bounds the live links of one sandbox.
	maxPreviewLinks = 50
)

// PreviewLink is a stored preview link.
type PreviewLink struct {
	ID        string     `gorm:"primaryKey"`
	TenantID  string     `gorm:"column:tenant_id"`
	SandboxID string     `gorm:"column:sandbox_id"`
	Port      int        `gorm:"column:port"`
	TokenHash string     `gorm:"column:token_hash"`
	CreatedBy string     `gorm:"column:created_by"`
	CreatedAt time.Time  `gorm:"column:created_at"`
	ExpiresAt time.Time  `gorm:"column:expires_at"`
	RevokedAt *time.Time `gorm:"column:revoked_at"`
	RevokedBy string     `gorm:"column:revoked_by"`
}

// TableName is the link table.
func (PreviewLink) TableName() string { return "sandbox_preview_links" }

// Active reports whether the link still opens its port at now.
func (l PreviewLink) Active(now time.Time) bool { return l.RevokedAt == nil && now.Before(l.ExpiresAt) }

func previewHash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// LooksLikePreviewToken reports whether s has a preview token's shape, so a
// caller can refuse anything else without a database read.
func LooksLikePreviewToken(s string) bool {
	rest, ok := strings.CutPrefix(s, previewTokenPrefix)
	if !ok || len(rest) != 52 {
		return false
	}
	for _, r := range rest {
		if !(r >= 'a' && r <= 'z' || r >= '2' && r <= '7') {
			return false
		}
	}
	return true
}

func newPreviewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return previewTokenPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b)), nil
}

// CreatePreviewLink makes a preview link to port of the tenant's active
// sandbox, valid for ttl (0: DefaultPreviewTTL; over MaxPreviewTTL a
// FieldError on ttl_seconds). It returns the link and its token, which is
// not stored and cannot be read again.
func (s *Service) CreatePreviewLink(ctx context.Context, actor audit.Actor, tenantID, id string, port int, ttl time.Duration) (PreviewLink, string, error) {
	sb, err := s.store.Sandbox(ctx, tenantID, id)
	if err != nil {
		return PreviewLink{}, "", err
	}
	if err := CheckPort(port); err != nil {
		return PreviewLink{}, "", err
	}
	switch {
	case ttl == 0:
		ttl = DefaultPreviewTTL
	case ttl < time.Minute || ttl > MaxPreviewTTL:
		return PreviewLink{}, "", errdefs.Invalid("ttl_seconds", "ttl_range",
			fmt.Sprintf("must be 60 to %d seconds", int(MaxPreviewTTL.Seconds())))
	}
	if !slices.Contains(activeStates(), sb.State) {
		return PreviewLink{}, "", fmt.Errorf("preview link of sandbox %s: %w: it is %s", id, errdefs.ErrConflict, sb.State)
	}
	token, err := newPreviewToken()
	if err != nil {
		return PreviewLink{}, "", fmt.Errorf("preview link: %w", err)
	}
	linkID, err := newID()
	if err != nil {
		return PreviewLink{}, "", fmt.Errorf("preview link: %w", err)
	}
	now := s.store.now()
	l := PreviewLink{ID: linkID, TenantID: tenantID, SandboxID: sb.ID, Port: port, TokenHash: previewHash(token),
		CreatedBy: actor.Name, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	err = s.store.tx(ctx, func(tx *gorm.DB) error {
		var live int64
		if err := tx.Model(&PreviewLink{}).Where("tenant_id = ? AND sandbox_id = ? AND revoked_at IS NULL AND expires_at > ?",
			tenantID, sb.ID, now).Count(&live).Error; err != nil {
			return err
		}
		if live >= maxPreviewLinks {
			return &errdefs.QuotaError{Quota: "max_preview_links", Limit: maxPreviewLinks, Want: int(live) + 1}
		}
		if err := tx.Create(&l).Error; err != nil {
			return err
		}
		return s.store.audit(tx, actor.Event(tenantID, audit.TypeSandboxPreviewCreated, "sandbox", sb.ID,
			map[string]any{"link": l.ID, "port": port, "expires_at": l.ExpiresAt}))
	})
	if err != nil {
		return PreviewLink{}, "", fmt.Errorf("create preview link of sandbox %s: %w", id, err)
	}
	return l, token, nil
}

// PreviewLinks lists the preview links of the tenant's sandbox, newest
// first (revoked and expired ones too, for the record).
func (s *Service) PreviewLinks(ctx context.Context, tenantID, id string) ([]PreviewLink, error) {
	if _, err := s.store.Sandbox(ctx, tenantID, id); err != nil {
		return nil, err
	}
	var out []PreviewLink
	if err := s.store.db.WithContext(ctx).Where("tenant_id = ? AND sandbox_id = ?", tenantID, id).
		Order("created_at DESC, id DESC").Limit(200).Find(&out).Error; err != nil {
		return nil, fmt.Errorf("preview links of sandbox %s: %w", id, err)
	}
	return out, nil
}

// RevokePreviewLink ends a preview link of the tenant's sandbox at once.
// Another tenant's or sandbox's link is errdefs.ErrNotFound; a revoked one
// ErrConflict.
func (s *Service) RevokePreviewLink(ctx context.Context, actor audit.Actor, tenantID, id, linkID string) (PreviewLink, error) {
	var l PreviewLink
	err := s.store.tx(ctx, func(tx *gorm.DB) error {
		if err := tx.Take(&l, "tenant_id = ? AND sandbox_id = ? AND id = ?", tenantID, id, linkID).Error; err != nil {
			return fmt.Errorf("preview link %s: %w", linkID, notFound(err))
		}
		if l.RevokedAt != nil {
			return fmt.Errorf("preview link %s: %w: revoked already", linkID, errdefs.ErrConflict)
		}
		now := s.store.now()
		res := tx.Model(&PreviewLink{}).Where("id = ? AND revoked_at IS NULL", l.ID).
			Updates(map[string]any{"revoked_at": now, "revoked_by": actor.Name})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("preview link %s: %w: revoked already", linkID, errdefs.ErrConflict)
		}
		l.RevokedAt, l.RevokedBy = &now, actor.Name
		return s.store.audit(tx, actor.Event(tenantID, audit.TypeSandboxPreviewRevoked, "sandbox", id,
			map[string]any{"link": l.ID, "port": l.Port}))
	})
	if err != nil {
		return PreviewLink{}, fmt.Errorf("revoke preview link: %w", err)
	}
	return l, nil
}

// ResolvePreview returns the live link a token names: errdefs.ErrNotFound
// for a malformed, unknown, expired or revoked token (one answer for all,
// so a guesser learns nothing).
func (s *Service) ResolvePreview(ctx context.Context, token string) (PreviewLink, error) {
	if !LooksLikePreviewToken(token) {
		return PreviewLink{}, fmt.Errorf("preview link: %w", errdefs.ErrNotFound)
	}
	var l PreviewLink
	if err := s.store.db.WithContext(ctx).Take(&l, "token_hash = ?", previewHash(token)).Error; err != nil {
		return PreviewLink{}, fmt.Errorf("preview link: %w", notFound(err))
	}
	if !l.Active(s.store.now()) {
		return PreviewLink{}, fmt.Errorf("preview link: %w", errdefs.ErrNotFound)
	}
	return l, nil
}
