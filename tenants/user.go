package tenants

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Identity is what the identity provider says about a person at login.
// Email must be one the provider verified ("" otherwise): it activates
// pending invitations.
type Identity struct{ Issuer, Subject, Email, Name string }

// UserTenant is a tenant the user is an active member of, with their role.
type UserTenant struct {
	Tenant Tenant
	Role   Role
}

// errRetry marks a transaction that lost a race on a unique key and can run
// again.
var errRetry = errors.New("lost a race, retry")

// UpsertUserAtLogin finds or creates the user keyed by (issuer, subject),
// updates email, name and last login, and activates the pending memberships
// invited under that email (case-insensitive), all in one transaction.
func (s *Store) UpsertUserAtLogin(ctx context.Context, id Identity) (User, error) {
	id.Issuer = strings.TrimSpace(id.Issuer)
	id.Subject = strings.TrimSpace(id.Subject)
	id.Email = strings.TrimSpace(id.Email)
	id.Name = strings.TrimSpace(id.Name)
	switch {
	case id.Issuer == "":
		return User{}, errdefs.Invalid("issuer", "required", "must not be empty")
	case id.Subject == "":
		return User{}, errdefs.Invalid("subject", "required", "must not be empty")
	case len(id.Email) > 254:
		return User{}, errdefs.Invalid("email", "email_format", "must be at most 254 characters")
	}
	if err := checkName("name", id.Name, 200); err != nil {
		return User{}, err
	}
	// Two first logins of one person can race on the (issuer, subject) key;
	// the loser runs again and finds the winner's row.
	for attempt := 0; ; attempt++ {
		u, err := s.upsertUser(ctx, id)
		if errors.Is(err, errRetry) && attempt == 0 {
			continue
		}
		if err != nil {
			return User{}, fmt.Errorf("login %s/%s: %w", id.Issuer, id.Subject, err)
		}
		return u, nil
	}
}

func (s *Store) upsertUser(ctx context.Context, id Identity) (User, error) {
	var u User
	err := s.tx(ctx, func(tx *gorm.DB) error {
		now := s.now()
		err := tx.Take(&u, "issuer = ? AND subject = ?", id.Issuer, id.Subject).Error
		switch {
		case errors.Is(err, gorm.ErrRecordNotFound):
			uid, err := newID()
			if err != nil {
				return err
			}
			u = User{ID: uid, Issuer: id.Issuer, Subject: id.Subject, Email: id.Email, Name: id.Name,
				CreatedAt: now, LastLoginAt: &now}
			// DO NOTHING rather than a failed insert: a lost race is
			// expected here, not an error worth a log line.
			res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&u)
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 0 {
				return errRetry
			}
			if err := s.write(tx, userActor(u).Event("", audit.TypeUserCreated, "user", u.ID,
				map[string]any{"issuer": u.Issuer, "email": u.Email})); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			u.Email, u.Name, u.LastLoginAt = id.Email, id.Name, &now
			if err := tx.Model(&User{}).Where("id = ?", u.ID).Updates(map[string]any{
				"email": u.Email, "name": u.Name, "last_login_at": now,
			}).Error; err != nil {
				return err
			}
		}
		return s.activatePending(tx, u, now)
	})
	return u, err
}

// activatePending gives u the pending memberships invited under u's email,
// except in tenants where u already has a membership.
func (s *Store) activatePending(tx *gorm.DB, u User, now time.Time) error {
	if u.Email == "" {
		return nil
	}
	var pending []Membership
	err := tx.Where("email = ? AND user_id IS NULL", strings.ToLower(u.Email)).
		Where("tenant_id NOT IN (?)", tx.Model(&Membership{}).Select("tenant_id").Where("user_id = ?", u.ID)).
		Order("id").Find(&pending).Error
	if err != nil {
		return err
	}
	for _, m := range pending {
		res := tx.Model(&Membership{}).Where("id = ? AND user_id IS NULL", m.ID).
			Updates(map[string]any{"user_id": u.ID, "activated_at": now})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			continue
		}
		if err := s.write(tx, userActor(u).Event(m.TenantID, audit.TypeMemberActivated, "membership", m.ID,
			map[string]any{"email": m.Email, "role": string(m.Role), "user_id": u.ID})); err != nil {
			return err
		}
	}
	return nil
}

func userActor(u User) audit.Actor {
	// The email, as every other user event names its actor.
	name := u.Email
	if name == "" {
		name = u.Name
	}
	return audit.Actor{Kind: audit.ActorUser, ID: u.ID, Name: name}
}

// UserByID returns the user with that id.
func (s *Store) UserByID(ctx context.Context, id string) (User, error) {
	var u User
	if err := s.db.WithContext(ctx).Take(&u, "id = ?", id).Error; err != nil {
		return User{}, fmt.Errorf("user %s: %w", id, notFound(err))
	}
	return u, nil
}

// UserTenants returns the tenants the user is an active member of, by slug.
func (s *Store) UserTenants(ctx context.Context, userID string) ([]UserTenant, error) {
	type row struct {
		Tenant
		Role Role
	}
	var rows []row
	err := s.db.WithContext(ctx).Table("memberships m").
		Select("t.id, t.slug, t.name, t.created_at, m.role").
		Joins("JOIN tenants t ON t.id = m.tenant_id").
		Where("m.user_id = ? AND m.activated_at IS NOT NULL", userID).
		Order("t.slug").Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("tenants of user %s: %w", userID, err)
	}
	out := make([]UserTenant, len(rows))
	for i, r := range rows {
		r.Tenant.CreatedAt = r.Tenant.CreatedAt.UTC()
		out[i] = UserTenant{Tenant: r.Tenant, Role: r.Role}
	}
	return out, nil
}

// RoleOf returns the user's role in the tenant; errdefs.ErrNotFound without an
// active membership.
func (s *Store) RoleOf(ctx context.Context, tenantID, userID string) (Role, error) {
	var m Membership
	err := s.db.WithContext(ctx).
		Take(&m, "tenant_id = ? AND user_id = ? AND activated_at IS NOT NULL", tenantID, userID).Error
	if err != nil {
		return "", fmt.Errorf("role of user %s in tenant %s: %w", userID, tenantID, notFound(err))
	}
	return m.Role, nil
}
