package tenants

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Quota names, as they appear in errors, the API and the audit log.
const (
	QuotaMaxVMs       = "max_vms"
	QuotaMaxVCPUs     = "max_vcpus"
	QuotaMaxMemoryMiB = "max_memory_mib"
	QuotaMaxSandboxes = "max_sandboxes"
	// QuotaMaxCPUHoursMonthly bounds the CPU time a tenant's sandboxes may
	// use in a calendar month (UTC), as their cgroups measure it.
	QuotaMaxCPUHoursMonthly = "max_cpu_hours_monthly"
	// QuotaMaxTemplateMiB bounds the storage of the tenant's own sandbox
	// templates (every live version's image, and each build's estimate
	// while it runs: sandbox/templates).
	QuotaMaxTemplateMiB = "max_template_mib"
	// QuotaMaxVolumeGiB bounds the sizes of a tenant's volumes, in all.
	QuotaMaxVolumeGiB = "max_volume_gib"
)

// Quota is a tenant's platform limits, set by operators. Every tenant has
// one: a row is made with DefaultQuota the first time it is read.
type Quota struct {
	TenantID     string `gorm:"column:tenant_id;primaryKey"`
	MaxVMs       int    `gorm:"column:max_vms"`
	MaxVCPUs     int    `gorm:"column:max_vcpus"`
	MaxMemoryMiB int    `gorm:"column:max_memory_mib"`
	MaxSandboxes int    `gorm:"column:max_sandboxes"` // running at once
	// MaxCPUHoursMonthly: once the month's measured CPU-hours reach it, no
	// new sandbox starts until the next month (running ones go on).
	MaxCPUHoursMonthly int       `gorm:"column:max_cpu_hours_monthly"`
	MaxTemplateMiB     int       `gorm:"column:max_template_mib"`
	MaxVolumeGiB       int       `gorm:"column:max_volume_gib"` // volumes' sizes in all
	UpdatedAt          time.Time `gorm:"column:updated_at;autoUpdateTime:false"`
	UpdatedBy          string    `gorm:"column:updated_by"`
}

// TableName is the GORM table of Quota.
func (Quota) TableName() string { return "tenant_quotas" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (q *Quota) AfterFind(*gorm.DB) error {
	q.UpdatedAt = q.UpdatedAt.UTC()
	return nil
}

// DefaultQuota is what a tenant gets until an operator says otherwise:
// enough for a small team on one modest host.
func DefaultQuota() Quota {
	return Quota{MaxVMs: 4, MaxVCPUs: 8, MaxMemoryMiB: 8192, MaxSandboxes: 16, MaxCPUHoursMonthly: 1000, MaxTemplateMiB: 10240, MaxVolumeGiB: 20}
}

// Upper bounds an operator may set, so a typo cannot hand out a data centre.
const (
	maxQuotaVMs       = 1000
	maxQuotaVCPUs     = 4096
	maxQuotaMemoryMiB = 4 << 20 // 4 TiB
	maxQuotaSandboxes = 10000
	maxQuotaCPUHours  = 10_000_000
	maxQuotaTemplates = 64 << 20 // 64 TiB
	maxQuotaVolumeGiB = 1 << 20  // 1 PiB
)

// Usage is what a tenant holds, or would hold after a request.
type Usage struct {
	VMs       int
	VCPUs     int
	MemoryMiB int
	Sandboxes int
}

// Check returns a *errdefs.QuotaError naming the first quota u exceeds, or nil.
func (q Quota) Check(u Usage) error {
	for _, c := range []struct {
		name        string
		want, limit int
	}{
		{QuotaMaxVMs, u.VMs, q.MaxVMs},
		{QuotaMaxVCPUs, u.VCPUs, q.MaxVCPUs},
		{QuotaMaxMemoryMiB, u.MemoryMiB, q.MaxMemoryMiB},
		{QuotaMaxSandboxes, u.Sandboxes, q.MaxSandboxes},
	} {
		if c.want > c.limit {
			return &errdefs.QuotaError{Quota: c.name, Limit: c.limit, Want: c.want}
		}
	}
	return nil
}

// CheckCPUHours returns a *errdefs.QuotaError when cpuSeconds, the CPU time the
// tenant used this month, has reached the monthly CPU-hours quota.
func (q Quota) CheckCPUHours(cpuSeconds float64) error {
	if cpuSeconds < float64(q.MaxCPUHoursMonthly)*3600 {
		return nil
	}
	return &errdefs.QuotaError{Quota: QuotaMaxCPUHoursMonthly, Limit: q.MaxCPUHoursMonthly, Want: int(cpuSeconds / 3600),
		Detail: fmt.Sprintf("the tenant used %.2f CPU-hours this month, the limit is %d; new sandboxes start again next month or when a platform operator raises the quota",
			cpuSeconds/3600, q.MaxCPUHoursMonthly)}
}

func (q Quota) validate() error {
	for _, c := range []struct {
		name       string
		value, max int
	}{
		{QuotaMaxVMs, q.MaxVMs, maxQuotaVMs},
		{QuotaMaxVCPUs, q.MaxVCPUs, maxQuotaVCPUs},
		{QuotaMaxMemoryMiB, q.MaxMemoryMiB, maxQuotaMemoryMiB},
		{QuotaMaxSandboxes, q.MaxSandboxes, maxQuotaSandboxes},
		{QuotaMaxCPUHoursMonthly, q.MaxCPUHoursMonthly, maxQuotaCPUHours},
		{QuotaMaxTemplateMiB, q.MaxTemplateMiB, maxQuotaTemplates},
		{QuotaMaxVolumeGiB, q.MaxVolumeGiB, maxQuotaVolumeGiB},
	} {
		if c.value < 0 || c.value > c.max {
			return errdefs.Invalid(c.name, "range", fmt.Sprintf("must be between 0 and %d", c.max))
		}
	}
	return nil
}

// LockQuota returns the tenant's quota inside tx, locking the tenant row
// (FOR UPDATE on PostgreSQL; SQLite transactions are serialized) so that a
// check against the quota and the write it allows cannot race with another.
// It creates the default row when the tenant has none. A missing tenant is
// errdefs.ErrNotFound. Other packages call it at the start of their own transaction.
func LockQuota(tx *gorm.DB, tenantID string, now time.Time) (Quota, error) {
	if _, err := lockTenant(tx, tenantID); err != nil {
		return Quota{}, err
	}
	var q Quota
	err := tx.Take(&q, "tenant_id = ?", tenantID).Error
	if err == nil {
		return q, nil
	}
	if !errors.Is(err, gorm.ErrRecordNotFound) {
		return Quota{}, err
	}
	q = DefaultQuota()
	q.TenantID, q.UpdatedAt = tenantID, now.UTC().Truncate(time.Microsecond)
	// DO NOTHING: a concurrent first reader may have made the row already.
	if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&q).Error; err != nil {
		return Quota{}, err
	}
	if err := tx.Take(&q, "tenant_id = ?", tenantID).Error; err != nil {
		return Quota{}, err
	}
	return q, nil
}

// Quota returns the tenant's quota (the defaults, now stored, if none was set).
func (s *Store) Quota(ctx context.Context, tenantID string) (Quota, error) {
	var q Quota
	if err := s.db.WithContext(ctx).Take(&q, "tenant_id = ?", tenantID).Error; err == nil {
		return q, nil
	}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var err error
		q, err = LockQuota(tx, tenantID, s.now())
		return err
	})
	if err != nil {
		return Quota{}, fmt.Errorf("quota of tenant %s: %w", tenantID, err)
	}
	return q, nil
}

// SetQuota replaces the tenant's quota (platform operators). Each limit is
// 0 or more, up to a sanity bound; lowering a quota below what the tenant
// holds stops new allocations but takes nothing away.
func (s *Store) SetQuota(ctx context.Context, actor audit.Actor, tenantID string, in Quota) (Quota, error) {
	if err := in.validate(); err != nil {
		return Quota{}, err
	}
	var out Quota
	err := s.tx(ctx, func(tx *gorm.DB) error {
		old, err := LockQuota(tx, tenantID, s.now())
		if err != nil {
			return err
		}
		out = Quota{TenantID: tenantID, MaxVMs: in.MaxVMs, MaxVCPUs: in.MaxVCPUs, MaxMemoryMiB: in.MaxMemoryMiB,
			MaxSandboxes: in.MaxSandboxes, MaxCPUHoursMonthly: in.MaxCPUHoursMonthly, MaxTemplateMiB: in.MaxTemplateMiB, MaxVolumeGiB: in.MaxVolumeGiB,
			UpdatedAt: s.now(), UpdatedBy: actor.ID}
		if err := tx.Save(&out).Error; err != nil {
			return err
		}
		return s.write(tx, actor.Event(tenantID, audit.TypeQuotaUpdated, "tenant", tenantID, map[string]any{
			"old": quotaDetails(old), "new": quotaDetails(out),
		}))
	})
	if err != nil {
		return Quota{}, fmt.Errorf("set quota of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

func quotaDetails(q Quota) map[string]any {
	return map[string]any{QuotaMaxVMs: q.MaxVMs, QuotaMaxVCPUs: q.MaxVCPUs,
		QuotaMaxMemoryMiB: q.MaxMemoryMiB, QuotaMaxSandboxes: q.MaxSandboxes, QuotaMaxCPUHoursMonthly: q.MaxCPUHoursMonthly, QuotaMaxTemplateMiB: q.MaxTemplateMiB,
		QuotaMaxVolumeGiB: q.MaxVolumeGiB}
}
