package recipe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtime"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Build states.
const (
	StateRunning   = "running"
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
)

// Steps of a build, in order (Build.Step).
const (
	StepBase = 1 + iota
	StepPackages
	StepFiles
	StepSetup
	StepPack
	Steps = StepPack
)

// StepName says what step n does.
func StepName(n int) string {
	switch n {
	case StepBase:
		return "base tree"
	case StepPackages:
		return "packages"
	case StepFiles:
		return "files"
	case StepSetup:
		return "setup commands"
	case StepPack:
		return "pack"
	}
	return "queued"
}

// Build is one recipe build of a tenant's template.
type Build struct {
	ID           string     `gorm:"primaryKey" json:"id"`
	TenantID     string     `gorm:"column:tenant_id" json:"tenant_id"`
	TemplateName string     `gorm:"column:template_name" json:"template_name"`
	VersionID    string     `gorm:"column:version_id" json:"version_id"`
	RecipeDigest string     `gorm:"column:recipe_digest" json:"recipe_digest"`
	Recipe       string     `gorm:"column:recipe" json:"-"`
	State        string     `gorm:"column:state" json:"state"`
	Step         int        `gorm:"column:step" json:"step"`
	Error        string     `gorm:"column:error" json:"error,omitempty"`
	LogBytes     int64      `gorm:"column:log_bytes" json:"log_bytes"`
	CreatedBy    string     `gorm:"column:created_by" json:"created_by"`
	StartedAt    time.Time  `gorm:"column:started_at" json:"started_at"`
	EndedAt      *time.Time `gorm:"column:ended_at" json:"ended_at,omitempty"`
}

// TableName is the builds table.
func (Build) TableName() string { return "template_builds" }

// AfterFind keeps times in UTC.
func (b *Build) AfterFind(*gorm.DB) error {
	b.StartedAt = b.StartedAt.UTC()
	if b.EndedAt != nil {
		t := b.EndedAt.UTC()
		b.EndedAt = &t
	}
	return nil
}

// Ended reports whether the build is over.
func (b Build) Ended() bool { return b.State != StateRunning }

// Store keeps builds. Every method takes the tenant: another tenant's build
// is errdefs.ErrNotFound.
type Store struct {
	db    *gorm.DB
	clock dbtime.Clock
}

// NewStore returns a Store on db (opened and migrated). A nil clock means
// time.Now.
func NewStore(db *gorm.DB, clock func() time.Time) *Store {
	return &Store{db: db, clock: clock}
}

func (s *Store) create(ctx context.Context, actor audit.Actor, b Build) (Build, error) {
	b.StartedAt, b.State = s.clock.Now(), StateRunning
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&b).Error; err != nil {
			return err
		}
		return audit.Write(tx, actor.Event(b.TenantID, audit.TypeTemplateBuildStarted, "template", b.TemplateName,
			map[string]any{"build_id": b.ID, "recipe_digest": b.RecipeDigest, "version_id": b.VersionID}))
	})
	if err != nil {
		return Build{}, fmt.Errorf("record build of template %s: %w", b.TemplateName, err)
	}
	return b, nil
}

// setStep records the step a running build reached.
func (s *Store) setStep(ctx context.Context, tenant, id string, step int, logBytes int64) error {
	err := s.db.WithContext(ctx).Model(&Build{}).Where("tenant_id = ? AND id = ? AND state = ?", tenant, id, StateRunning).
		Updates(map[string]any{"step": step, "log_bytes": logBytes}).Error
	if err != nil {
		return fmt.Errorf("record build %s step %d: %w", id, step, err)
	}
	return nil
}

// end closes a running build as succeeded or failed (reason), audited in
// the same transaction. A build already ended stays as it was.
func (s *Store) end(ctx context.Context, actor audit.Actor, b Build, reason error, logBytes int64) (Build, error) {
	now := s.clock.Now()
	state, typ, details := StateSucceeded, audit.TypeTemplateBuildSucceeded,
		map[string]any{"build_id": b.ID, "recipe_digest": b.RecipeDigest, "version_id": b.VersionID}
	msg := ""
	if reason != nil {
		state, typ, msg = StateFailed, audit.TypeTemplateBuildFailed, clipText(reason.Error(), 2000)
		details["error"] = msg
	}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&Build{}).Where("tenant_id = ? AND id = ? AND state = ?", b.TenantID, b.ID, StateRunning).
			Updates(map[string]any{"state": state, "error": msg, "ended_at": now, "log_bytes": logBytes})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return nil
		}
		return audit.Write(tx, actor.Event(b.TenantID, typ, "template", b.TemplateName, details))
	})
	if err != nil {
		return Build{}, fmt.Errorf("end build %s: %w", b.ID, err)
	}
	return s.Get(ctx, b.TenantID, b.TemplateName, b.ID)
}

// Get is the tenant's build id of template name.
func (s *Store) Get(ctx context.Context, tenant, name, id string) (Build, error) {
	var b Build
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND template_name = ? AND id = ?", tenant, name, id).Take(&b).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Build{}, fmt.Errorf("build %s of template %s: %w", id, name, errdefs.ErrNotFound)
	}
	if err != nil {
		return Build{}, fmt.Errorf("get build %s: %w", id, err)
	}
	return b, nil
}

// maxListed bounds a build listing.
const maxListed = 100

// List is the tenant's builds of template name, newest first (at most
// 100). A name the tenant never built is errdefs.ErrNotFound (another
// tenant's template included).
func (s *Store) List(ctx context.Context, tenant, name string) ([]Build, error) {
	var bs []Build
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND template_name = ?", tenant, name).
		Order("started_at DESC, id DESC").Limit(maxListed).Find(&bs).Error
	if err != nil {
		return nil, fmt.Errorf("list builds of template %s: %w", name, err)
	}
	if len(bs) == 0 {
		return nil, fmt.Errorf("builds of template %s: %w", name, errdefs.ErrNotFound)
	}
	return bs, nil
}

// succeeded is the tenant's newest succeeded build of name from the recipe
// with digest, if any.
func (s *Store) succeeded(ctx context.Context, tenant, name, digest string) (Build, bool, error) {
	var bs []Build
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND template_name = ? AND recipe_digest = ? AND state = ?",
		tenant, name, digest, StateSucceeded).Order("started_at DESC").Limit(1).Find(&bs).Error
	if err != nil {
		return Build{}, false, fmt.Errorf("find builds of recipe %s: %w", digest, err)
	}
	if len(bs) == 0 {
		return Build{}, false, nil
	}
	return bs[0], true, nil
}

// running lists every tenant's running builds (for Recover; tenant-free,
// the control plane's own sweep).
func (s *Store) running(ctx context.Context) ([]Build, error) {
	var bs []Build
	if err := s.db.WithContext(ctx).Where("state = ?", StateRunning).Find(&bs).Error; err != nil {
		return nil, fmt.Errorf("list running builds: %w", err)
	}
	return bs, nil
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
