package tenants

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

var slugPattern = regexp.MustCompile(`^[a-z][a-z0-9-]{1,38}[a-z0-9]$`)

// TenantSummary is a tenant with its number of active members.
type TenantSummary struct {
	Tenant
	Members int
}

// checkName validates a display name: at most max characters, no control
// characters.
func checkName(field, name string, max int) error {
	if utf8.RuneCountInString(name) > max {
		return errdefs.Invalid(field, "name_length", fmt.Sprintf("must be at most %d characters", max))
	}
	if strings.IndexFunc(name, unicode.IsControl) >= 0 || !utf8.ValidString(name) {
		return errdefs.Invalid(field, "name_format", "must not contain control characters")
	}
	return nil
}

// CreateTenant creates a tenant. The slug is 3-40 lowercase letters, digits
// or '-', starting with a letter and not ending with '-'; name defaults to
// the slug. A taken slug is errdefs.ErrConflict.
func (s *Store) CreateTenant(ctx context.Context, actor audit.Actor, slug, name string) (Tenant, error) {
	return s.CreateTenantWithAdmin(ctx, actor, slug, name, "")
}

// CreateTenantWithAdmin creates a tenant as CreateTenant does and, when
// adminEmail is not "", invites it as the tenant's admin in the same
// transaction: either both exist afterwards or neither.
func (s *Store) CreateTenantWithAdmin(ctx context.Context, actor audit.Actor, slug, name, adminEmail string) (Tenant, error) {
	if !slugPattern.MatchString(slug) {
		return Tenant{}, errdefs.Invalid("slug", "slug_format",
			"must be 3-40 lowercase letters, digits or '-', start with a letter and not end with '-'")
	}
	name = strings.TrimSpace(name)
	if name == "" {
		name = slug
	}
	if err := checkName("name", name, 100); err != nil {
		return Tenant{}, err
	}
	if adminEmail != "" {
		var err error
		if adminEmail, err = normalizeEmail(adminEmail); err != nil {
			var fe *errdefs.FieldError
			if errors.As(err, &fe) {
				return Tenant{}, errdefs.Invalid("admin_email", fe.Rule, fe.Detail)
			}
			return Tenant{}, err
		}
	}
	id, err := newID()
	if err != nil {
		return Tenant{}, err
	}
	t := Tenant{ID: id, Slug: slug, Name: name, CreatedAt: s.now()}
	err = s.tx(ctx, func(tx *gorm.DB) error {
		var n int64
		if err := tx.Model(&Tenant{}).Where("slug = ?", slug).Count(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			return errdefs.ErrConflict
		}
		if err := tx.Create(&t).Error; err != nil {
			if s.duplicate(err) {
				return errdefs.ErrConflict
			}
			return err
		}
		if err := s.write(tx, actor.Event(t.ID, audit.TypeTenantCreated, "tenant", t.ID,
			map[string]any{"slug": t.Slug, "name": t.Name})); err != nil {
			return err
		}
		if adminEmail == "" {
			return nil
		}
		_, err := s.invite(tx, actor, t.ID, adminEmail, RoleAdmin)
		return err
	})
	if err != nil {
		return Tenant{}, fmt.Errorf("create tenant %q: %w", slug, err)
	}
	return t, nil
}

// ListTenants returns every tenant with its active member count, by slug.
// It is for platform operators: it is not tenant-scoped.
func (s *Store) ListTenants(ctx context.Context) ([]TenantSummary, error) {
	var out []TenantSummary
	err := s.db.WithContext(ctx).Table("tenants").
		Select("tenants.id, tenants.slug, tenants.name, tenants.created_at, " +
			"(SELECT COUNT(*) FROM memberships m WHERE m.tenant_id = tenants.id AND m.user_id IS NOT NULL AND m.activated_at IS NOT NULL) AS members").
		Order("tenants.slug").
		Scan(&out).Error
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	for i := range out {
		out[i].CreatedAt = out[i].CreatedAt.UTC()
	}
	return out, nil
}

// TenantBySlug returns the tenant with that slug.
func (s *Store) TenantBySlug(ctx context.Context, slug string) (Tenant, error) {
	var t Tenant
	if err := s.db.WithContext(ctx).Take(&t, "slug = ?", slug).Error; err != nil {
		return Tenant{}, fmt.Errorf("tenant %q: %w", slug, notFound(err))
	}
	return t, nil
}

// TenantByID returns the tenant with that id.
func (s *Store) TenantByID(ctx context.Context, id string) (Tenant, error) {
	var t Tenant
	if err := s.db.WithContext(ctx).Take(&t, "id = ?", id).Error; err != nil {
		return Tenant{}, fmt.Errorf("tenant %s: %w", id, notFound(err))
	}
	return t, nil
}
