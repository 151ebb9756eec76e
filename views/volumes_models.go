package views

import "time"

// NavVolumes marks the volumes page.
const NavVolumes = "volumes"

// VolumesView is the tenant's volumes page.
type VolumesView struct {
	CanEdit  bool
	Rows     []VolumeRow
	UsedGiB  int
	QuotaGiB int
	Form     VolumeForm
	// Resize is the volume whose resize form failed (open again), with
	// its errors.
	Resize       string
	ResizeErrors map[string]string
}

// VolumeRow is one volume.
type VolumeRow struct {
	Name, ID   string
	SizeGiB    int
	CreatedAt  time.Time
	CreatedBy  string
	LastUsedAt *time.Time
	// Attached lists the VMs holding its disk ("vm-id (read-only)"),
	// MountedBy the live sandboxes using it ("id at /path").
	Attached, MountedBy []string
}

// VolumeForm is the create form.
type VolumeForm struct {
	Name, SizeGiB string
	Errors        map[string]string
}
