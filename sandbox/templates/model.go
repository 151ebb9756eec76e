// Package templates is the registry of tenants' own sandbox templates
// (issue 18): a template per tenant and name, versions of it built from a
// recipe (sandbox/templates/recipe) or imported from an OCI image
// (sandbox/templates/oci), each a read-only ext4 image under DataDir packed
// by hypervisor/image.PackTemplate. The platform's built-ins stay in the
// image manifest; listings merge both.
//
// A builder calls Begin (name checks, quota on the estimate, a "building"
// row), fills Staging's directory, then Finish (pack, digest, quota on the
// real size, "ready") or Fail ("failed", files removed). Every read and
// write is scoped to the tenant: another tenant's template is not found.
package templates

import (
	"encoding/json"
	"regexp"
	"time"

	"gorm.io/gorm"
)

// Sources of a tenant template.
const (
	SourceRecipe = "recipe"
	SourceOCI    = "oci"
	// SourceBuiltin marks the platform's templates in listings.
	SourceBuiltin = "builtin"
)

// State is where a version is.
type State string

// Version states.
const (
	StateBuilding State = "building"
	StateReady    State = "ready"
	StateFailed   State = "failed"
)

// NameRE is what a template name must match (the built-ins' rule too).
var NameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// Defaults are what a template gives every sandbox started from it: Env
// under the sandbox's own, Workdir as the commands' default directory, and
// User as recorded (sandboxes always run as the non-root sandbox user).
type Defaults struct {
	Env     map[string]string `json:"env,omitempty"`
	User    string            `json:"user,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
}

// Template is one of a tenant's templates.
type Template struct {
	ID        string     `gorm:"primaryKey" json:"id"`
	TenantID  string     `gorm:"column:tenant_id" json:"tenant_id"`
	Name      string     `gorm:"column:name" json:"name"`
	Source    string     `gorm:"column:source" json:"source"`
	CreatedBy string     `gorm:"column:created_by" json:"created_by"`
	CreatedAt time.Time  `gorm:"column:created_at" json:"created_at"`
	DeletedAt *time.Time `gorm:"column:deleted_at" json:"deleted_at,omitempty"`
}

// TableName is the template table.
func (Template) TableName() string { return "templates" }

// AfterFind keeps times in UTC.
func (t *Template) AfterFind(*gorm.DB) error {
	t.CreatedAt = t.CreatedAt.UTC()
	t.DeletedAt = utcPtr(t.DeletedAt)
	return nil
}

// Version is one build or import of a template.
type Version struct {
	ID         string `gorm:"primaryKey" json:"id"`
	TemplateID string `gorm:"column:template_id" json:"template_id"`
	TenantID   string `gorm:"column:tenant_id" json:"tenant_id"`
	Name       string `gorm:"column:name" json:"name"`
	// Seq numbers the template's versions from 1.
	Seq int `gorm:"column:seq" json:"seq"`
	// InVMName is the name the guest agent mounts this version by.
	InVMName  string `gorm:"column:in_vm_name" json:"in_vm_name"`
	Source    string `gorm:"column:source" json:"source"`
	SourceRef string `gorm:"column:source_ref" json:"source_ref"`
	// Digest is "sha256:<hex>" of the image file once ready.
	Digest        string     `gorm:"column:digest" json:"digest"`
	SizeBytes     int64      `gorm:"column:size_bytes" json:"size_bytes"`
	EstimateBytes int64      `gorm:"column:estimate_bytes" json:"estimate_bytes"`
	State         State      `gorm:"column:state" json:"state"`
	Reason        string     `gorm:"column:reason" json:"reason,omitempty"`
	DefaultsJSON  string     `gorm:"column:defaults" json:"-"`
	Defaults      Defaults   `gorm:"-" json:"defaults"`
	Path          string     `gorm:"column:path" json:"-"`
	CreatedBy     string     `gorm:"column:created_by" json:"created_by"`
	CreatedAt     time.Time  `gorm:"column:created_at" json:"created_at"`
	ReadyAt       *time.Time `gorm:"column:ready_at" json:"ready_at,omitempty"`
	DeletedAt     *time.Time `gorm:"column:deleted_at" json:"deleted_at,omitempty"`
}

// TableName is the version table.
func (Version) TableName() string { return "template_versions" }

// AfterFind keeps times in UTC and decodes the defaults.
func (v *Version) AfterFind(*gorm.DB) error {
	v.CreatedAt = v.CreatedAt.UTC()
	v.ReadyAt, v.DeletedAt = utcPtr(v.ReadyAt), utcPtr(v.DeletedAt)
	v.Defaults = Defaults{}
	if v.DefaultsJSON != "" {
		_ = json.Unmarshal([]byte(v.DefaultsJSON), &v.Defaults)
	}
	return nil
}

// Charged is what the version counts against the storage quota: its image
// once ready, its estimate while building, nothing once failed or deleted.
func (v Version) Charged() int64 {
	if v.DeletedAt != nil {
		return 0
	}
	switch v.State {
	case StateReady:
		return v.SizeBytes
	case StateBuilding:
		return v.EstimateBytes
	}
	return 0
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// Entry is one template a tenant can see: a built-in (Builtin, no
// versions of the tenant's) or its own with its versions, newest first.
type Entry struct {
	Name      string
	Source    string
	Builtin   bool
	Current   Version // the newest ready version (built-ins: Name, InVMName, Digest, SizeBytes, Seq 0)
	HasReady  bool
	Versions  []Version
	CreatedAt time.Time
	CreatedBy string
	// InUse counts the tenant's sandboxes that have not ended and run one
	// of its versions (tenant templates only).
	InUse int
}
