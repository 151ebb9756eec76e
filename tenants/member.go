package tenants

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"strings"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// normalizeEmail validates a bare address ("a@b.example", no display name)
// and lowercases it: memberships are unique per lowercased email.
func normalizeEmail(email string) (string, error) {
	email = strings.TrimSpace(email)
	bad := errdefs.Invalid("email", "email_format", "must be an email address like name@example.com")
	if email == "" || len(email) > 254 {
		return "", bad
	}
	addr, err := mail.ParseAddress(email)
	if err != nil || addr.Address != email || addr.Name != "" {
		return "", bad
	}
	return strings.ToLower(email), nil
}

// CheckInvite validates an invitation's email and role, reporting both
// when both are wrong (a required one left empty says "required"), and
// returns the email normalised.
func CheckInvite(email string, role Role) (string, error) {
	var errs []error
	if strings.TrimSpace(email) == "" {
		errs = append(errs, errdefs.Required("email"))
	} else if e, err := normalizeEmail(email); err != nil {
		errs = append(errs, err)
	} else {
		email = e
	}
	if role == "" {
		errs = append(errs, errdefs.Required("role"))
	} else if err := checkRole(role); err != nil {
		errs = append(errs, err)
	}
	return email, errors.Join(errs...)
}

func checkRole(role Role) error {
	if !role.Valid() {
		return errdefs.Invalid("role", "role", "must be one of admin, manager, developer, auditor, billing")
	}
	return nil
}

// InviteMember invites email into the tenant with role. If exactly one user
// already has that email the membership is active at once; otherwise it
// waits for the invitee's first login. A second invite of the same email,
// or of a user who is already a member, is errdefs.ErrConflict.
func (s *Store) InviteMember(ctx context.Context, actor audit.Actor, tenantID, email string, role Role) (Membership, error) {
	email, err := CheckInvite(email, role)
	if err != nil {
		return Membership{}, err
	}
	var m Membership
	err = s.tx(ctx, func(tx *gorm.DB) error {
		if _, err := lockTenant(tx, tenantID); err != nil {
			return err
		}
		var ierr error
		m, ierr = s.invite(tx, actor, tenantID, email, role)
		return ierr
	})
	if err != nil {
		return Membership{}, fmt.Errorf("invite %s to tenant %s: %w", email, tenantID, err)
	}
	return m, nil
}

// invite adds the membership inside tx; the caller has validated email (as
// normalizeEmail returns it) and role, and locked the tenant.
func (s *Store) invite(tx *gorm.DB, actor audit.Actor, tenantID, email string, role Role) (Membership, error) {
	id, err := newID()
	if err != nil {
		return Membership{}, err
	}
	var n int64
	if err := tx.Model(&Membership{}).Where("tenant_id = ? AND email = ?", tenantID, email).Count(&n).Error; err != nil {
		return Membership{}, err
	}
	if n > 0 {
		return Membership{}, errdefs.ErrConflict
	}
	now := s.now()
	m := Membership{ID: id, TenantID: tenantID, Email: email, Role: role, InvitedBy: actor.ID, CreatedAt: now}
	// Two users with one email (two identity providers) is ambiguous:
	// then the first of them to log in takes the invitation.
	var users []User
	if err := tx.Where("lower(email) = ?", email).Limit(2).Find(&users).Error; err != nil {
		return Membership{}, err
	}
	if len(users) == 1 {
		u := users[0]
		if err := tx.Model(&Membership{}).Where("tenant_id = ? AND user_id = ?", tenantID, u.ID).Count(&n).Error; err != nil {
			return Membership{}, err
		}
		if n > 0 {
			return Membership{}, errdefs.ErrConflict
		}
		m.UserID, m.ActivatedAt = &u.ID, &now
	}
	if err := tx.Create(&m).Error; err != nil {
		if s.duplicate(err) {
			return Membership{}, errdefs.ErrConflict
		}
		return Membership{}, err
	}
	if err := s.write(tx, actor.Event(tenantID, audit.TypeMemberInvited, "membership", m.ID,
		map[string]any{"email": m.Email, "role": string(m.Role)})); err != nil {
		return Membership{}, err
	}
	if m.Active() {
		return m, s.write(tx, actor.Event(tenantID, audit.TypeMemberActivated, "membership", m.ID,
			map[string]any{"email": m.Email, "role": string(m.Role), "user_id": *m.UserID}))
	}
	return m, nil
}

// ListMembers returns the tenant's memberships, active and pending, by email.
func (s *Store) ListMembers(ctx context.Context, tenantID string) ([]Membership, error) {
	var out []Membership
	if err := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID).Order("email").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list members of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// lockedMembership locks the tenant (changes to its admins serialize on
// it) and reads one of its memberships, inside tx.
func lockedMembership(tx *gorm.DB, tenantID, membershipID string) (Membership, error) {
	if _, err := lockTenant(tx, tenantID); err != nil {
		return Membership{}, err
	}
	var m Membership
	err := tx.Take(&m, "id = ? AND tenant_id = ?", membershipID, tenantID).Error
	return m, notFound(err)
}

// errLastAdmin is the conflict of leaving a tenant with no active admin.
var errLastAdmin = fmt.Errorf("%w: the tenant must keep at least one active admin", errdefs.ErrConflict)

// lastActiveAdmin reports whether m is the tenant's only active admin.
func lastActiveAdmin(tx *gorm.DB, m Membership) (bool, error) {
	if m.Role != RoleAdmin || !m.Active() {
		return false, nil
	}
	var n int64
	err := tx.Model(&Membership{}).
		Where("tenant_id = ? AND role = ? AND user_id IS NOT NULL AND activated_at IS NOT NULL", m.TenantID, RoleAdmin).
		Count(&n).Error
	return n <= 1, err
}

// SetMemberRole changes a member's role. Demoting the last active admin is
// errdefs.ErrConflict. The member's tokens are capped at the new role (each
// audited token.role_capped), or revoked when CapRole refuses them.
func (s *Store) SetMemberRole(ctx context.Context, actor audit.Actor, tenantID, membershipID string, role Role) error {
	if err := checkRole(role); err != nil {
		return err
	}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		m, err := lockedMembership(tx, tenantID, membershipID)
		if err != nil {
			return err
		}
		if m.Role == role {
			return nil
		}
		if role != RoleAdmin {
			last, err := lastActiveAdmin(tx, m)
			if err != nil {
				return err
			}
			if last {
				return errLastAdmin
			}
		}
		if err := tx.Model(&Membership{}).Where("id = ? AND tenant_id = ?", m.ID, tenantID).
			Update("role", role).Error; err != nil {
			return err
		}
		if err := s.write(tx, actor.Event(tenantID, audit.TypeMemberRoleChanged, "membership", m.ID,
			map[string]any{"email": m.Email, "from": string(m.Role), "to": string(role)})); err != nil {
			return err
		}
		if m.UserID == nil {
			return nil
		}
		// Their tokens may do no more than they may now.
		return s.capTokensOf(tx, actor, tenantID, *m.UserID, role)
	})
	if err != nil {
		return fmt.Errorf("set role of membership %s: %w", membershipID, err)
	}
	return nil
}

// RemoveMember deletes a membership and revokes the tokens its person made
// in the tenant (each audited token.revoked, reason member_removed).
// Removing the last active admin is errdefs.ErrConflict.
func (s *Store) RemoveMember(ctx context.Context, actor audit.Actor, tenantID, membershipID string) error {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		m, err := lockedMembership(tx, tenantID, membershipID)
		if err != nil {
			return err
		}
		last, err := lastActiveAdmin(tx, m)
		if err != nil {
			return err
		}
		if last {
			return errLastAdmin
		}
		if err := tx.Where("id = ? AND tenant_id = ?", m.ID, tenantID).Delete(&Membership{}).Error; err != nil {
			return err
		}
		if err := s.write(tx, actor.Event(tenantID, audit.TypeMemberRemoved, "membership", m.ID,
			map[string]any{"email": m.Email, "role": string(m.Role)})); err != nil {
			return err
		}
		if m.UserID == nil {
			return nil
		}
		// Their tokens leave with them.
		return s.revokeTokensOf(tx, actor, tenantID, *m.UserID, "member_removed")
	})
	if err != nil {
		return fmt.Errorf("remove membership %s: %w", membershipID, err)
	}
	return nil
}
