package api

// Tenant is a tenant (platform operators).
type Tenant struct {
	ID        string `json:"id"`
	Slug      string `json:"slug"`
	Name      string `json:"name"`
	Members   *int   `json:"members,omitempty"`
	CreatedAt string `json:"created_at" format:"date-time"`
	// FrozenAt is set while an operator has frozen the tenant.
	FrozenAt *string `json:"frozen_at,omitempty" format:"date-time" doc:"set while an operator has frozen the tenant"`
}

// TenantList answers GET /api/v1/tenants.
type TenantList struct {
	Tenants []Tenant `json:"tenants" nonnull:"true"`
}

// CreateTenant is the body of POST /api/v1/tenants.
type CreateTenant struct {
	Slug       string `json:"slug" doc:"3-40 of a-z, 0-9 and -"`
	Name       string `json:"name,omitempty" doc:"display name"`
	AdminEmail string `json:"admin_email,omitempty" doc:"first admin, invited"`
}

// TenantQuota is a tenant's quota.
type TenantQuota struct {
	TenantID           string `json:"tenant_id"`
	MaxVMs             int    `json:"max_vms"`
	MaxVCPUs           int    `json:"max_vcpus"`
	MaxMemoryMiB       int    `json:"max_memory_mib"`
	MaxSandboxes       int    `json:"max_sandboxes"`
	MaxCPUHoursMonthly int    `json:"max_cpu_hours_monthly" doc:"per UTC calendar month, measured"`
	MaxTemplateMiB     int    `json:"max_template_mib" doc:"storage of the tenant's own templates"`
	MaxVolumeGiB       int    `json:"max_volume_gib" doc:"the sizes of the tenant's volumes, in all"`
	UpdatedAt          string `json:"updated_at,omitempty" format:"date-time"`
	UpdatedBy          string `json:"updated_by,omitempty"`
}

// SetTenantQuota is the body of PUT /api/v1/tenants/{id}/quota: every limit
// is required.
type SetTenantQuota struct {
	MaxVMs             *int `json:"max_vms" doc:"VMs at once, 0-1000"`
	MaxVCPUs           *int `json:"max_vcpus" doc:"vCPUs held at once, 0-4096"`
	MaxMemoryMiB       *int `json:"max_memory_mib" doc:"memory held at once, 0-4194304"`
	MaxSandboxes       *int `json:"max_sandboxes" doc:"sandboxes running at once, 0-10000"`
	MaxCPUHoursMonthly *int `json:"max_cpu_hours_monthly" doc:"CPU-hours measured per UTC calendar month, 0-10000000"`
	MaxTemplateMiB     *int `json:"max_template_mib,omitempty" doc:"storage of the tenant's own templates in MiB, 0-67108864; omitted: unchanged"`
	MaxVolumeGiB       *int `json:"max_volume_gib,omitempty" doc:"GiB of volumes in all, 0-1048576; omitted: unchanged"`
}

// PriceVersion is a version of a price book.
type PriceVersion struct {
	ID             string  `json:"id" doc:"default: the built-in list price, never set"`
	TenantID       string  `json:"tenant_id,omitempty" doc:"set on a tenant's override"`
	Currency       string  `json:"currency" doc:"ISO 4217"`
	VCPUSecond     float64 `json:"vcpu_second"`
	GiBSecond      float64 `json:"gib_second"`
	CPUSecond      float64 `json:"cpu_second"`
	EgressGB       float64 `json:"egress_gb"`
	VolumeGiBMonth float64 `json:"volume_gib_month" doc:"per GiB of volume provisioned for a UTC calendar month"`
	EffectiveFrom  string  `json:"effective_from" format:"date-time" doc:"in force from, until a later version of the same book"`
	CreatedBy      string  `json:"created_by,omitempty"`
	CreatedAt      string  `json:"created_at,omitempty" format:"date-time"`
}

// TenantPrice is what one tenant pays now.
type TenantPrice struct {
	TenantID string       `json:"tenant_id"`
	Slug     string       `json:"slug"`
	Override bool         `json:"override" doc:"the tenant's own version, not the platform's"`
	Price    PriceVersion `json:"price"`
}

// PriceBook answers GET /api/v1/prices.
type PriceBook struct {
	Platform        PriceVersion   `json:"platform"`
	PlatformHistory []PriceVersion `json:"platform_history" nonnull:"true"`
	Tenants         []TenantPrice  `json:"tenants" nonnull:"true"`
}

// SetPrice is the body of POST /api/v1/prices.
type SetPrice struct {
	TenantID       string   `json:"tenant_id,omitempty" doc:"a tenant's override; absent: the platform list price"`
	Currency       *string  `json:"currency" doc:"ISO 4217, e.g. USD"`
	VCPUSecond     *float64 `json:"vcpu_second" doc:"per vCPU held for a second, 0-1000"`
	GiBSecond      *float64 `json:"gib_second" doc:"per GiB of memory held for a second, 0-1000"`
	CPUSecond      *float64 `json:"cpu_second" doc:"per CPU-second measured, 0-1000"`
	EgressGB       *float64 `json:"egress_gb" doc:"per 10^9 bytes through the egress gateway, 0-1000"`
	VolumeGiBMonth *float64 `json:"volume_gib_month,omitempty" doc:"per GiB of volume provisioned for a UTC calendar month (prorated), 0-1000; omitted: the book's price in force now"`
	EffectiveFrom  string   `json:"effective_from,omitempty" format:"date-time" doc:"RFC 3339; default now"`
}

// Freeze is a tenant's freeze (incident response).
type Freeze struct {
	TenantID string  `json:"tenant_id"`
	Frozen   bool    `json:"frozen"`
	FrozenAt *string `json:"frozen_at" format:"date-time"`
	Reason   string  `json:"reason,omitempty"`
	// SandboxesDestroyed counts the sandboxes the freeze destroyed.
	SandboxesDestroyed int `json:"sandboxes_destroyed" doc:"sandboxes the freeze destroyed (reason frozen)"`
	// Error says which sandboxes could not be destroyed yet (their VM out
	// of reach); the freeze holds regardless and refuses new ones.
	Error string `json:"error,omitempty" doc:"sandboxes that could not be destroyed yet; the freeze holds regardless"`
}

// FreezeRequest is the body of POST /api/v1/tenants/{id}/freeze.
type FreezeRequest struct {
	Reason string `json:"reason,omitempty" maxLength:"500" doc:"why; audited"`
}
