package vmpool

import (
	"time"

	"gorm.io/gorm"
)

// State is where a VM is in its life.
type State string

const (
	StateBooting  State = "booting"  // row written, domain being defined or booted
	StateRunning  State = "running"  // agent handshake done
	StateStopping State = "stopping" // shutdown or destroy under way
	StateStopped  State = "stopped"  // ended on purpose
	StateLost     State = "lost"     // ended without us: QEMU died, domain vanished
	StateFailed   State = "failed"   // never came up (boot or handshake failed)
)

// Active reports whether the VM holds resources: it counts against the pool
// and the tenant quota.
func (s State) Active() bool {
	return s == StateBooting || s == StateRunning || s == StateStopping
}

// activeStates are the Active states, for queries.
func activeStates() []State { return []State{StateBooting, StateRunning, StateStopping} }

// Phase is the boot progress shown while a VM comes up.
type Phase string

const (
	PhaseQueued    Phase = "queued"    // waiting for a boot slot
	PhaseDefining  Phase = "defining"  // building the domain, libvirt creating it
	PhaseBooting   Phase = "booting"   // domain started, kernel and agent coming up
	PhaseHandshake Phase = "handshake" // the agent answered; protocol hello under way
	PhaseRunning   Phase = "running"
	PhaseStopping  Phase = "stopping"
	PhaseEnded     Phase = "ended"
)

// Progress is the boot progress as steps done out of BootSteps.
func (p Phase) Progress() int {
	switch p {
	case PhaseQueued:
		return 0
	case PhaseDefining:
		return 1
	case PhaseBooting:
		return 2
	case PhaseHandshake:
		return 3
	}
	return BootSteps
}

// BootSteps is the number of boot phases up to running.
const BootSteps = 4

// VM is one tenant VM as stored.
type VM struct {
	ID              string     `gorm:"column:id;primaryKey"`
	TenantID        string     `gorm:"column:tenant_id"`
	HostURI         string     `gorm:"column:host_uri"`
	State           State      `gorm:"column:state"`
	StateReason     string     `gorm:"column:state_reason"`
	Phase           Phase      `gorm:"column:phase"`
	PhaseAt         time.Time  `gorm:"column:phase_at"`
	VCPUs           int        `gorm:"column:vcpus"`
	MemoryMiB       int        `gorm:"column:memory_mib"`
	ImageVersion    string     `gorm:"column:image_version"`
	AgentVersion    string     `gorm:"column:agent_version"`
	KernelVersion   string     `gorm:"column:kernel_version"`
	DomainUUID      string     `gorm:"column:domain_uuid"`
	BootMS          int64      `gorm:"column:boot_ms"`   // Create -> agent handshake done
	BootKind        string     `gorm:"column:boot_kind"` // "restored" (snapshot.go), or "cold: <why not>"
	CreatedBy       string     `gorm:"column:created_by"`
	CreatedAt       time.Time  `gorm:"column:created_at;autoCreateTime:false"`
	StartedAt       *time.Time `gorm:"column:started_at"` // handshake done
	LastSeenAt      *time.Time `gorm:"column:last_seen_at"`
	EndedAt         *time.Time `gorm:"column:ended_at"`
	RecycleAfter    *time.Time `gorm:"column:recycle_after"`
	AcquiredAt      *time.Time `gorm:"column:acquired_at"` // nil: idle
	SandboxesServed int        `gorm:"column:sandboxes_served"`
}

// TableName is the GORM table of VM.
func (VM) TableName() string { return "vms" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (v *VM) AfterFind(*gorm.DB) error {
	v.PhaseAt, v.CreatedAt = v.PhaseAt.UTC(), v.CreatedAt.UTC()
	for _, p := range []**time.Time{&v.StartedAt, &v.LastSeenAt, &v.EndedAt, &v.RecycleAfter, &v.AcquiredAt} {
		if *p != nil {
			u := (*p).UTC()
			*p = &u
		}
	}
	return nil
}

// Idle reports whether the VM is running and not handed out.
func (v VM) Idle() bool { return v.State == StateRunning && v.AcquiredAt == nil }

// Pool is a tenant's VM pool settings.
type Pool struct {
	TenantID          string    `gorm:"column:tenant_id;primaryKey"`
	VCPUs             int       `gorm:"column:vcpus"`
	MemoryMiB         int       `gorm:"column:memory_mib"`
	MaxVMs            int       `gorm:"column:max_vms"`
	WarmVMs           int       `gorm:"column:warm_vms"`
	RecycleAfterHours int       `gorm:"column:recycle_after_hours"` // 0: never
	UpdatedAt         time.Time `gorm:"column:updated_at;autoUpdateTime:false"`
	UpdatedBy         string    `gorm:"column:updated_by"`
}

// TableName is the GORM table of Pool.
func (Pool) TableName() string { return "vm_pools" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (p *Pool) AfterFind(*gorm.DB) error {
	p.UpdatedAt = p.UpdatedAt.UTC()
	return nil
}

// DefaultPool is a tenant's pool until its settings are saved: one small VM
// at a time, none kept warm, recycled daily.
func DefaultPool(tenantID string) Pool {
	return Pool{TenantID: tenantID, VCPUs: 1, MemoryMiB: 512, MaxVMs: 2, WarmVMs: 0, RecycleAfterHours: 24}
}

// PoolSettings are the settings a tenant may change.
type PoolSettings struct {
	VCPUs             int
	MemoryMiB         int
	MaxVMs            int
	WarmVMs           int
	RecycleAfterHours int
}

// Settings returns p's changeable part.
func (p Pool) Settings() PoolSettings {
	return PoolSettings{VCPUs: p.VCPUs, MemoryMiB: p.MemoryMiB, MaxVMs: p.MaxVMs, WarmVMs: p.WarmVMs, RecycleAfterHours: p.RecycleAfterHours}
}

// Host health values.
const (
	HealthOK          = "ok"
	HealthUnavailable = "unavailable"
	HealthSlow        = "slow" // connected, its calls time out (HostSlowDownAfter)
)

// Host is a libvirt host as last seen.
type Host struct {
	URI           string     `gorm:"column:uri;primaryKey"`
	CPUs          int        `gorm:"column:cpus"`
	MemoryKiB     uint64     `gorm:"column:memory_kib"`
	FreeMemoryKiB uint64     `gorm:"column:free_memory_kib"`
	DomainType    string     `gorm:"column:domain_type"`
	Health        string     `gorm:"column:health"`
	HealthReason  string     `gorm:"column:health_reason"`
	FirstSeenAt   time.Time  `gorm:"column:first_seen_at"`
	LastSeenAt    *time.Time `gorm:"column:last_seen_at"`
	UpdatedAt     time.Time  `gorm:"column:updated_at;autoUpdateTime:false"`
	// What operators set (hosts.go): State, its reason, Labels; DownAt is
	// when the host was found not answering (nil while it answers).
	State       HostState  `gorm:"column:state"`
	StateReason string     `gorm:"column:state_reason"`
	Labels      Labels     `gorm:"column:labels"`
	DownAt      *time.Time `gorm:"column:down_at"`
	AddedBy     string     `gorm:"column:added_by"`
}

// TableName is the GORM table of Host.
func (Host) TableName() string { return "hosts" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (h *Host) AfterFind(*gorm.DB) error {
	h.FirstSeenAt, h.UpdatedAt = h.FirstSeenAt.UTC(), h.UpdatedAt.UTC()
	if h.LastSeenAt != nil {
		u := h.LastSeenAt.UTC()
		h.LastSeenAt = &u
	}
	if h.DownAt != nil {
		u := h.DownAt.UTC()
		h.DownAt = &u
	}
	return nil
}
