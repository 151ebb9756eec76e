package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtime"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// MaxPerTenant bounds the live workflows of a tenant.
const MaxPerTenant = 100

// Version is one saved version of a tenant's workflow.
type Version struct {
	TenantID string
	Name     string
	Version  int
	// Source is the YAML as written; empty for a deletion.
	Source     string
	Def        Definition
	Deleted    bool
	AuthorID   string
	AuthorName string
	AuthorKind string
	CreatedAt  time.Time
}

// row is a Version as stored.
type row struct {
	TenantID   string    `gorm:"column:tenant_id;primaryKey"`
	Name       string    `gorm:"column:name;primaryKey"`
	Version    int       `gorm:"column:version;primaryKey;autoIncrement:false"`
	Source     string    `gorm:"column:source"`
	Doc        string    `gorm:"column:doc"`
	Deleted    bool      `gorm:"column:deleted"`
	AuthorID   string    `gorm:"column:author_id"`
	AuthorName string    `gorm:"column:author_name"`
	AuthorKind string    `gorm:"column:author_kind"`
	CreatedAt  time.Time `gorm:"column:created_at;autoCreateTime:false"`
}

func (row) TableName() string { return "workflows" }

func (r row) version() (Version, error) {
	v := Version{TenantID: r.TenantID, Name: r.Name, Version: r.Version, Source: r.Source, Deleted: r.Deleted,
		AuthorID: r.AuthorID, AuthorName: r.AuthorName, AuthorKind: r.AuthorKind, CreatedAt: r.CreatedAt.UTC()}
	if !r.Deleted {
		if err := json.Unmarshal([]byte(r.Doc), &v.Def); err != nil {
			return Version{}, fmt.Errorf("read workflow %s version %d: %w", r.Name, r.Version, err)
		}
	}
	return v, nil
}

// settingsRow is a tenant's workflow settings.
type settingsRow struct {
	TenantID         string    `gorm:"column:tenant_id;primaryKey"`
	GitHubSecretName string    `gorm:"column:github_secret_name"`
	UpdatedBy        string    `gorm:"column:updated_by"`
	UpdatedAt        time.Time `gorm:"column:updated_at;autoCreateTime:false;autoUpdateTime:false"`
}

func (settingsRow) TableName() string { return "workflow_settings" }

// Store keeps the workflow versions and settings of every tenant. Every
// method takes the tenant: another tenant's workflow is not found.
type Store struct {
	db    *gorm.DB
	clock dbtime.Clock
	p     *Parser
}

// NewStore returns a Store on db (opened and migrated). A nil clock means
// time.Now.
func NewStore(db *gorm.DB, clock func() time.Time) (*Store, error) {
	p, err := NewParser()
	if err != nil {
		return nil, err
	}
	return &Store{db: db, clock: clock, p: p}, nil
}

// Parser is the store's schema checker.
func (s *Store) Parser() *Parser { return s.p }

func latest(tx *gorm.DB, tenantID, name string) (row, bool, error) {
	var rows []row
	if err := tx.Where("tenant_id = ? AND name = ?", tenantID, name).Order("version DESC").Limit(1).Find(&rows).Error; err != nil {
		return row{}, false, fmt.Errorf("read workflow %s: %w", name, err)
	}
	if len(rows) == 0 {
		return row{}, false, nil
	}
	return rows[0], true, nil
}

// Current returns the newest version of the tenant's workflow; a deleted
// or unknown one is errdefs.ErrNotFound.
func (s *Store) Current(ctx context.Context, tenantID, name string) (Version, error) {
	r, ok, err := latest(s.db.WithContext(ctx), tenantID, name)
	if err != nil {
		return Version{}, err
	}
	if !ok || r.Deleted {
		return Version{}, fmt.Errorf("workflow %s: %w", name, errdefs.ErrNotFound)
	}
	return r.version()
}

// Get returns one version of the tenant's workflow (a deleted one too: runs
// keep pointing at the version they ran).
func (s *Store) Get(ctx context.Context, tenantID, name string, version int) (Version, error) {
	var r row
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND name = ? AND version = ?", tenantID, name, version).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Version{}, fmt.Errorf("workflow %s version %d: %w", name, version, errdefs.ErrNotFound)
	}
	if err != nil {
		return Version{}, fmt.Errorf("read workflow %s version %d: %w", name, version, err)
	}
	return r.version()
}

// List returns the newest version of each live workflow of the tenant, by
// name.
func (s *Store) List(ctx context.Context, tenantID string) ([]Version, error) {
	var rows []row
	// The newest version per name: no newer row of the same name exists.
	err := s.db.WithContext(ctx).Raw(`SELECT w.* FROM workflows w WHERE w.tenant_id = ? AND NOT EXISTS (
		SELECT 1 FROM workflows n WHERE n.tenant_id = w.tenant_id AND n.name = w.name AND n.version > w.version)
		ORDER BY w.name`, tenantID).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("list workflows of tenant %s: %w", tenantID, err)
	}
	out := make([]Version, 0, len(rows))
	for _, r := range rows {
		if r.Deleted {
			continue
		}
		v, err := r.version()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// History returns every version of the tenant's workflow, newest first.
func (s *Store) History(ctx context.Context, tenantID, name string) ([]Version, error) {
	var rows []row
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND name = ?", tenantID, name).Order("version DESC").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list versions of workflow %s: %w", name, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("workflow %s: %w", name, errdefs.ErrNotFound)
	}
	out := make([]Version, 0, len(rows))
	for _, r := range rows {
		v, err := r.version()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Save checks source against the schema (Errors naming every failing field
// and its line; nothing is saved) and stores it as the next version of the
// workflow it names, audited workflow.saved in the same transaction. base,
// when set, is the version the edit started from: if another was saved
// since, the save is errdefs.ErrConflict. A source identical to the current
// version is refused.
func (s *Store) Save(ctx context.Context, actor audit.Actor, tenantID string, source []byte, base *int) (Version, error) {
	def, err := s.p.Parse(source)
	if err != nil {
		return Version{}, err
	}
	doc, err := json.Marshal(def)
	if err != nil {
		return Version{}, fmt.Errorf("encode workflow %s: %w", def.Name, err)
	}
	var out Version
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Take(&tenants.Tenant{}, "id = ?", tenantID).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return errdefs.ErrNotFound
			}
			return err
		}
		cur, ok, err := latest(tx, tenantID, def.Name)
		if err != nil {
			return err
		}
		curVersion := 0
		if ok {
			curVersion = cur.Version
		}
		if base != nil && *base != curVersion {
			return fmt.Errorf("%w: workflow %s was changed to version %d (by %s) since version %d was loaded; reload and edit again",
				errdefs.ErrConflict, def.Name, curVersion, cur.AuthorName, *base)
		}
		if ok && !cur.Deleted && cur.Source == string(source) {
			return errdefs.Invalid("/", "unchanged", fmt.Sprintf("the workflow is the same as version %d: nothing to save", cur.Version))
		}
		if !ok || cur.Deleted {
			n, err := s.liveCount(tx, tenantID)
			if err != nil {
				return err
			}
			if n >= MaxPerTenant {
				return fmt.Errorf("at most %d workflows per tenant: %w", MaxPerTenant, errdefs.ErrQuota)
			}
		}
		r := row{TenantID: tenantID, Name: def.Name, Version: curVersion + 1, Source: string(source), Doc: string(doc),
			AuthorID: actor.ID, AuthorName: actor.Name, AuthorKind: actor.Kind, CreatedAt: s.clock.Now()}
		if err := tx.Create(&r).Error; err != nil {
			if errors.Is(err, gorm.ErrDuplicatedKey) {
				return fmt.Errorf("%w: another change took version %d of workflow %s at the same time; reload and retry",
					errdefs.ErrConflict, r.Version, def.Name)
			}
			return fmt.Errorf("store workflow %s version %d: %w", def.Name, r.Version, err)
		}
		// Secret names only: the values are looked up when they are used.
		e := actor.Event(tenantID, audit.TypeWorkflowSaved, "workflow", def.Name, map[string]any{
			"name": def.Name, "version": r.Version, "previous": curVersion, "secrets": def.SecretNames(),
		})
		e.Time = r.CreatedAt
		if err := audit.Write(tx, e); err != nil {
			return err
		}
		out, err = r.version()
		return err
	})
	if err != nil {
		var fe *errdefs.FieldError
		if errors.As(err, &fe) || errors.Is(err, errdefs.ErrConflict) {
			return Version{}, err
		}
		return Version{}, fmt.Errorf("save workflow %s of tenant %s: %w", def.Name, tenantID, err)
	}
	return out, nil
}

func (s *Store) liveCount(tx *gorm.DB, tenantID string) (int64, error) {
	var n int64
	err := tx.Raw(`SELECT COUNT(*) FROM workflows w WHERE w.tenant_id = ? AND w.deleted = ? AND NOT EXISTS (
		SELECT 1 FROM workflows n WHERE n.tenant_id = w.tenant_id AND n.name = w.name AND n.version > w.version)`, tenantID, false).Scan(&n).Error
	if err != nil {
		return 0, fmt.Errorf("count workflows of tenant %s: %w", tenantID, err)
	}
	return n, nil
}

// Delete records the deletion of the tenant's workflow as its next version,
// audited workflow.deleted. Its history and runs stay. An unknown or
// deleted workflow is errdefs.ErrNotFound.
func (s *Store) Delete(ctx context.Context, actor audit.Actor, tenantID, name string) error {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		cur, ok, err := latest(tx, tenantID, name)
		if err != nil {
			return err
		}
		if !ok || cur.Deleted {
			return errdefs.ErrNotFound
		}
		r := row{TenantID: tenantID, Name: name, Version: cur.Version + 1, Doc: "{}", Deleted: true,
			AuthorID: actor.ID, AuthorName: actor.Name, AuthorKind: actor.Kind, CreatedAt: s.clock.Now()}
		if err := tx.Create(&r).Error; err != nil {
			if errors.Is(err, gorm.ErrDuplicatedKey) {
				return fmt.Errorf("%w: workflow %s changed at the same time; reload and retry", errdefs.ErrConflict, name)
			}
			return err
		}
		e := actor.Event(tenantID, audit.TypeWorkflowDeleted, "workflow", name, map[string]any{"name": name, "version": r.Version})
		e.Time = r.CreatedAt
		return audit.Write(tx, e)
	})
	if err != nil {
		return fmt.Errorf("delete workflow %s of tenant %s: %w", name, tenantID, err)
	}
	return nil
}

// Settings are a tenant's workflow settings.
type Settings struct {
	// GitHubSecretName names the tenant secret holding the GitHub webhook
	// secret; "" means GitHub deliveries are refused.
	GitHubSecretName string
	UpdatedBy        string
	UpdatedAt        time.Time
}

// Settings returns the tenant's workflow settings (zero when never set).
func (s *Store) Settings(ctx context.Context, tenantID string) (Settings, error) {
	var rows []settingsRow
	if err := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID).Limit(1).Find(&rows).Error; err != nil {
		return Settings{}, fmt.Errorf("read workflow settings of tenant %s: %w", tenantID, err)
	}
	if len(rows) == 0 {
		return Settings{}, nil
	}
	r := rows[0]
	return Settings{GitHubSecretName: r.GitHubSecretName, UpdatedBy: r.UpdatedBy, UpdatedAt: r.UpdatedAt.UTC()}, nil
}

// SetGitHubSecret names the tenant secret that signs the tenant's GitHub
// deliveries ("" turns GitHub deliveries off), audited
// workflow.settings_updated with the name only.
func (s *Store) SetGitHubSecret(ctx context.Context, actor audit.Actor, tenantID, secretName string) (Settings, error) {
	if secretName != "" && !secretNameRE.MatchString(secretName) {
		return Settings{}, errdefs.Invalid("github_secret_name", "secret_name", "must be a secret name: A-Z, 0-9 and _, not starting with a digit")
	}
	by := actor.Name
	if by == "" {
		by = actor.ID
	}
	r := settingsRow{TenantID: tenantID, GitHubSecretName: secretName, UpdatedBy: by, UpdatedAt: s.clock.Now()}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Take(&tenants.Tenant{}, "id = ?", tenantID).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return errdefs.ErrNotFound
			}
			return err
		}
		res := tx.Model(&settingsRow{}).Where("tenant_id = ?", tenantID).
			Updates(map[string]any{"github_secret_name": r.GitHubSecretName, "updated_by": r.UpdatedBy, "updated_at": r.UpdatedAt})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			if err := tx.Create(&r).Error; err != nil {
				return err
			}
		}
		e := actor.Event(tenantID, audit.TypeWorkflowSettingsUpdated, "tenant", tenantID, map[string]any{"github_secret_name": secretName})
		e.Time = r.UpdatedAt
		return audit.Write(tx, e)
	})
	if err != nil {
		return Settings{}, fmt.Errorf("set workflow settings of tenant %s: %w", tenantID, err)
	}
	return Settings{GitHubSecretName: r.GitHubSecretName, UpdatedBy: r.UpdatedBy, UpdatedAt: r.UpdatedAt}, nil
}
