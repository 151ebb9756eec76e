package api

// VM is a tenant VM.
type VM struct {
	ID              string     `json:"id"`
	State           string     `json:"state" enum:"booting,running,stopping,stopped,lost,failed"`
	StateReason     string     `json:"state_reason,omitempty"`
	Progress        VMProgress `json:"progress" doc:"where a boot is"`
	Host            string     `json:"host" doc:"libvirt URI"`
	VCPUs           int        `json:"vcpus"`
	MemoryMiB       int        `json:"memory_mib"`
	ImageVersion    string     `json:"image_version"`
	AgentVersion    string     `json:"agent_version,omitempty" doc:"set once the handshake is done"`
	KernelVersion   string     `json:"kernel_version,omitempty"`
	AgentConnected  bool       `json:"agent_connected"`
	BootMS          int64      `json:"boot_ms,omitempty"`
	BootKind        string     `json:"boot_kind,omitempty" doc:"restored (from a memory snapshot) or cold: <why it did not restore>"`
	CPUTimeMS       int64      `json:"cpu_time_ms"`
	CPUPercent      *float64   `json:"cpu_percent" doc:"null when not sampled yet"`
	UptimeSeconds   float64    `json:"uptime_seconds"`
	Acquired        bool       `json:"acquired" doc:"handed out to sandboxes"`
	SandboxesServed int        `json:"sandboxes_served"`
	Guest           *VMGuest   `json:"guest,omitempty" doc:"what the guest reports"`
	CreatedAt       string     `json:"created_at" format:"date-time"`
	StartedAt       *string    `json:"started_at,omitempty" format:"date-time"`
	EndedAt         *string    `json:"ended_at,omitempty" format:"date-time"`
	RecycleAfter    *string    `json:"recycle_after,omitempty" format:"date-time"`
}

// VMProgress is where a VM's boot is.
type VMProgress struct {
	Phase string `json:"phase"`
	Step  int    `json:"step"`
	Of    int    `json:"of"`
	Since string `json:"since" format:"date-time"`
}

// VMGuest is what a VM's guest reports of itself.
type VMGuest struct {
	UptimeSeconds     float64  `json:"uptime_seconds"`
	CPUs              int      `json:"cpus"`
	Load1             float64  `json:"load1"`
	MemTotalBytes     uint64   `json:"mem_total_bytes"`
	MemAvailableBytes uint64   `json:"mem_available_bytes"`
	CgroupControllers []string `json:"cgroup_controllers"`
	Crun              string   `json:"crun,omitempty"`
}

// VMList answers GET /api/v1/vms.
type VMList struct {
	VMs        []VM       `json:"vms" nonnull:"true"`
	Hypervisor Hypervisor `json:"hypervisor"`
}

// Hypervisor says whether a libvirt host is reachable.
type Hypervisor struct {
	Available bool   `json:"available" doc:"a libvirt host is reachable"`
	Detail    string `json:"detail,omitempty" doc:"why not"`
}

// VMRecycle answers POST /api/v1/vms/{id}/recycle.
type VMRecycle struct {
	Recycled    VM `json:"recycled" doc:"the old VM, stopping"`
	Replacement VM `json:"replacement" doc:"the new VM, booting"`
}

// Pool is a tenant's VM pool settings, with its quota.
type Pool struct {
	VCPUs             int       `json:"vcpus"`
	MemoryMiB         int       `json:"memory_mib"`
	MaxVMs            int       `json:"max_vms"`
	WarmVMs           int       `json:"warm_vms"`
	RecycleAfterHours int       `json:"recycle_after_hours"`
	UpdatedAt         *string   `json:"updated_at,omitempty" format:"date-time"`
	Quota             PoolQuota `json:"quota"`
}

// PoolQuota is the part of the tenant quota a pool is checked against.
type PoolQuota struct {
	MaxVMs       int `json:"max_vms"`
	MaxVCPUs     int `json:"max_vcpus"`
	MaxMemoryMiB int `json:"max_memory_mib"`
	MaxSandboxes int `json:"max_sandboxes"`
}

// SetPool is the body of PUT /api/v1/vm-pool: every field is required.
type SetPool struct {
	VCPUs             *int `json:"vcpus" doc:"per VM, 1-16"`
	MemoryMiB         *int `json:"memory_mib" doc:"per VM, 256-65536"`
	MaxVMs            *int `json:"max_vms" doc:"0-100"`
	WarmVMs           *int `json:"warm_vms" doc:"kept booted and idle, 0-max_vms"`
	RecycleAfterHours *int `json:"recycle_after_hours" doc:"0 never"`
}

// CreateVM is the optional body of POST /api/v1/vms: nothing, or {}.
type CreateVM struct{}

// Host is a libvirt host.
type Host struct {
	URI            string  `json:"uri"`
	Health         string  `json:"health" enum:"ok,unavailable"`
	Reason         string  `json:"reason,omitempty"`
	Configured     bool    `json:"configured"`
	DomainType     string  `json:"domain_type,omitempty" doc:"kvm or qemu"`
	CPUs           int     `json:"cpus"`
	MemoryMiB      uint64  `json:"memory_mib"`
	FreeMemoryMiB  uint64  `json:"free_memory_mib"`
	VMs            int     `json:"vms"`
	AllocVCPUs     int     `json:"allocated_vcpus"`
	AllocMemoryMiB int     `json:"allocated_memory_mib"`
	LastSeenAt     *string `json:"last_seen_at,omitempty" format:"date-time"`
	// Set by operators (hosts.go): see HostState.
	State       string            `json:"state" enum:"active,cordoned,draining,drained,down,not configured"`
	StateReason string            `json:"state_reason,omitempty"`
	Labels      map[string]string `json:"labels"`
	DownAt      *string           `json:"down_at,omitempty" format:"date-time" doc:"when it was found not answering; absent while it answers"`
}

// HostList answers GET /api/v1/hosts.
type HostList struct {
	Hosts []Host `json:"hosts"`
}
