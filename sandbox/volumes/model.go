// Package volumes keeps tenants' persistent volumes: sparse ext4 images on
// the host (DataDir/volumes/<installation>/<tenant>/<id>.img) that outlive
// sandboxes. A sandbox asks for volumes by name at create; the service
// hot-attaches each one's disk to the tenant VM that hosts the sandbox (its
// serial is the volume id), the VM's agent mounts it, and the sandbox gets a
// bind mount at the path it asked for.
//
// An ext4 file system must never be mounted read-write in one VM while it
// is mounted anywhere else. So a volume attached read-write is attached to
// that one VM only; read-only users of it are placed on that VM (Plan's
// Pin) or refused; with no read-write user it may be attached read-only
// (a read-only disk, mounted ro,noload) to several VMs. A read-write mount
// is for one sandbox at a time. Every decision is taken in a transaction
// that locks the tenant's quota row, which also checks that the VM is the
// tenant's: a volume is never attached to another tenant's VM.
package volumes

import (
	"time"

	"gorm.io/gorm"
)

// State of a volume.
const (
	StateReady = "ready"
)

// Volume is one tenant volume.
type Volume struct {
	ID            string     `gorm:"column:id;primaryKey"`
	TenantID      string     `gorm:"column:tenant_id"`
	Name          string     `gorm:"column:name"`
	SizeGiB       int        `gorm:"column:size_gib"`
	State         string     `gorm:"column:state"`
	CreatedBy     string     `gorm:"column:created_by"`
	CreatedByName string     `gorm:"column:created_by_name"`
	CreatedAt     time.Time  `gorm:"column:created_at;autoCreateTime:false"`
	UpdatedAt     time.Time  `gorm:"column:updated_at;autoUpdateTime:false"`
	LastUsedAt    *time.Time `gorm:"column:last_used_at"`
}

// TableName is the GORM table of Volume.
func (Volume) TableName() string { return "volumes" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (v *Volume) AfterFind(*gorm.DB) error {
	v.CreatedAt, v.UpdatedAt = v.CreatedAt.UTC(), v.UpdatedAt.UTC()
	if v.LastUsedAt != nil {
		t := v.LastUsedAt.UTC()
		v.LastUsedAt = &t
	}
	return nil
}

// Attachment is a volume's disk attached to one VM.
type Attachment struct {
	VolumeID   string    `gorm:"column:volume_id;primaryKey"`
	VMID       string    `gorm:"column:vm_id;primaryKey"`
	TenantID   string    `gorm:"column:tenant_id"`
	ReadOnly   bool      `gorm:"column:read_only"`
	AttachedAt time.Time `gorm:"column:attached_at;autoCreateTime:false"`
}

// TableName is the GORM table of Attachment.
func (Attachment) TableName() string { return "volume_attachments" }

// Mount is a volume bound into one sandbox.
type Mount struct {
	VolumeID  string    `gorm:"column:volume_id;primaryKey"`
	SandboxID string    `gorm:"column:sandbox_id;primaryKey"`
	TenantID  string    `gorm:"column:tenant_id"`
	VMID      string    `gorm:"column:vm_id"`
	Path      string    `gorm:"column:path"`
	ReadOnly  bool      `gorm:"column:read_only"`
	CreatedAt time.Time `gorm:"column:created_at;autoCreateTime:false"`
}

// TableName is the GORM table of Mount.
func (Mount) TableName() string { return "volume_mounts" }

// Status is a volume with where it is attached and who mounts it.
type Status struct {
	Volume
	Attachments []Attachment
	Mounts      []Mount
}

// Request is a volume a sandbox asks for at create.
type Request struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}
