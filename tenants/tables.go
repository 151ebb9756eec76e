package tenants

import (
	"time"

	"gorm.io/gorm"
)

// Table names are spelled out rather than left to GORM's naming rules.

func (Tenant) TableName() string     { return "tenants" }
func (User) TableName() string       { return "users" }
func (Membership) TableName() string { return "memberships" }
func (APIToken) TableName() string   { return "api_tokens" }
func (Session) TableName() string    { return "sessions" }

// AfterFind callbacks (GORM calls them "hooks") keep every time in UTC
// whatever location the driver parsed.

func (t *Tenant) AfterFind(*gorm.DB) error {
	t.CreatedAt = t.CreatedAt.UTC()
	return nil
}

func (u *User) AfterFind(*gorm.DB) error {
	u.CreatedAt = u.CreatedAt.UTC()
	u.LastLoginAt = utcPtr(u.LastLoginAt)
	return nil
}

func (m *Membership) AfterFind(*gorm.DB) error {
	m.CreatedAt = m.CreatedAt.UTC()
	m.ActivatedAt = utcPtr(m.ActivatedAt)
	return nil
}

func (k *APIToken) AfterFind(*gorm.DB) error {
	k.CreatedAt = k.CreatedAt.UTC()
	k.ExpiresAt = k.ExpiresAt.UTC()
	k.LastUsedAt = utcPtr(k.LastUsedAt)
	k.RevokedAt = utcPtr(k.RevokedAt)
	return nil
}

func (s *Session) AfterFind(*gorm.DB) error {
	s.CreatedAt = s.CreatedAt.UTC()
	s.LastSeenAt = s.LastSeenAt.UTC()
	s.ExpiresAt = s.ExpiresAt.UTC()
	return nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
