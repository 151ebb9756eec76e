package api

// Volume is a tenant's persistent volume.
type Volume struct {
	Name        string             `json:"name"`
	ID          string             `json:"id" doc:"also its disk's serial in the VM"`
	SizeGiB     int                `json:"size_gib"`
	State       string             `json:"state" enum:"ready"`
	CreatedBy   string             `json:"created_by,omitempty"`
	CreatedAt   string             `json:"created_at" format:"date-time"`
	UpdatedAt   string             `json:"updated_at" format:"date-time"`
	LastUsedAt  *string            `json:"last_used_at,omitempty" format:"date-time" doc:"last mounted into a sandbox"`
	Attachments []VolumeAttachment `json:"attachments" nonnull:"true" doc:"the VMs its disk is attached to"`
	Mounts      []VolumeUse        `json:"mounts" nonnull:"true" doc:"the live sandboxes that mount it"`
}

// VolumeAttachment is a volume's disk attached to one of the tenant's VMs.
type VolumeAttachment struct {
	VMID       string `json:"vm_id"`
	ReadOnly   bool   `json:"read_only"`
	AttachedAt string `json:"attached_at" format:"date-time"`
}

// VolumeUse is a live sandbox mounting a volume.
type VolumeUse struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path"`
	ReadOnly  bool   `json:"read_only"`
}

// VolumeList answers GET /api/v1/volumes.
type VolumeList struct {
	Volumes []Volume `json:"volumes" nonnull:"true"`
	// QuotaGiB is the tenant's volume quota, UsedGiB what its volumes hold.
	QuotaGiB int `json:"quota_gib"`
	UsedGiB  int `json:"used_gib"`
}

// CreateVolume is the body of POST /api/v1/volumes.
type CreateVolume struct {
	Name    string `json:"name" doc:"1-63 of a-z, 0-9, _ and -, unique in the tenant"`
	SizeGiB int    `json:"size_gib" doc:"1-16384, within the tenant's volume quota (max_volume_gib)"`
}

// ResizeVolume is the body of PATCH /api/v1/volumes/{name}.
type ResizeVolume struct {
	SizeGiB int `json:"size_gib" doc:"the new size: volumes only grow, and only while no VM holds them"`
}

// VolumeParams names a volume in a path.
type VolumeParams struct {
	Name string `path:"name" doc:"the volume's name"`
}

// VolumeMount is one volume a sandbox create asks for.
type VolumeMount struct {
	Name     string `json:"name" doc:"the tenant's volume"`
	Path     string `json:"path" doc:"absolute path in the sandbox, e.g. /workspace/cache; not /, nor in /proc, /sys, /dev, /etc, /usr, /bin, /lib, /run ..."`
	ReadOnly bool   `json:"read_only,omitempty" doc:"mount read-only: any number of sandboxes may; read-write is for one sandbox at a time"`
}
