package compliance

import "time"

// Status of a checklist item.
type Status string

// Statuses, worst last.
const (
	StatusPass Status = "pass"
	StatusWarn Status = "warn"
	StatusFail Status = "fail"
)

func (s Status) rank() int {
	switch s {
	case StatusPass:
		return 0
	case StatusWarn:
		return 1
	}
	return 2
}

// worse returns the worse of a and b.
func worse(a, b Status) Status {
	if b.rank() > a.rank() {
		return b
	}
	return a
}

// Evidence is one fact an item's status rests on. Kind says where it comes
// from (policy, platform, live, audit, probe); Link, when set, is the page
// that shows it.
type Evidence struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
	Link string `json:"link,omitempty"`
}

// Evidence kinds.
const (
	KindPolicy   = "policy"
	KindPlatform = "platform"
	KindLive     = "live"
	KindAudit    = "audit"
	KindProbe    = "probe"
)

// Item is one checklist item of a tenant as last evaluated. Since is when
// its current status began; CheckedAt when it was last evaluated.
type Item struct {
	ID        string     `json:"id"`
	Question  string     `json:"question"`
	Status    Status     `json:"status"`
	Evidence  []Evidence `json:"evidence"`
	Since     time.Time  `json:"since"`
	CheckedAt time.Time  `json:"checked_at"`
}

// Change is one status change of an item. From is "" for its first
// evaluation.
type Change struct {
	ItemID string    `json:"item_id"`
	From   Status    `json:"from"`
	To     Status    `json:"to"`
	At     time.Time `json:"at"`
}

// Probe run states.
const (
	RunRunning   = "running"
	RunCompleted = "completed"
	// RunFailed: the probe could not run to its end (no sandbox, the
	// server stopped); Output ends with why.
	RunFailed = "failed"
)

// ProbeRun is one run of the probe in a sandbox of the tenant.
type ProbeRun struct {
	ID        string       `json:"id"`
	TenantID  string       `json:"tenant_id"`
	SandboxID string       `json:"sandbox_id"`
	State     string       `json:"state"`
	StartedAt time.Time    `json:"started_at"`
	EndedAt   *time.Time   `json:"ended_at,omitempty"`
	Checks    []ProbeCheck `json:"checks"`
	Output    string       `json:"output"`
}

// Probe check outcomes.
const (
	OutcomeBlocked = "blocked" // the escape was tried and stopped
	OutcomeEscaped = "escaped" // the escape worked
	OutcomeError   = "error"   // the attempt itself could not be made
)

// ProbeCheck is the outcome of one escape the probe tried.
type ProbeCheck struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail"`
}

// Check returns the run's check called id.
func (r ProbeRun) Check(id string) (ProbeCheck, bool) {
	for _, c := range r.Checks {
		if c.ID == id {
			return c, true
		}
	}
	return ProbeCheck{}, false
}

// Checklist item ids: stable, used in URLs, exports and history.
const (
	ItemHostIsolation          = "host_isolation"
	ItemSSHKeys                = "ssh_keys"
	ItemDotenvOutsideWorkspace = "dotenv_outside_workspace"
	ItemShortLivedCredentials  = "short_lived_credentials"
	ItemEgressRestricted       = "egress_restricted"
	ItemResourceLimits         = "resource_limits"
	ItemTimeLimits             = "time_limits"
	ItemProductionAccess       = "production_access"
	ItemFilesystemPermissions  = "filesystem_permissions"
	ItemActionsLogged          = "actions_logged"
	ItemEnvironmentsDestroyed  = "environments_destroyed"
	ItemAuditPossible          = "audit_possible"
	ItemCredentialsOutside     = "credentials_outside"
	ItemIncidentResponse       = "incident_response"
)

// question pairs an item id with the question it answers.
type question struct{ id, text string }

// checklist is the checklist in the order it is shown.
func checklist() []question {
	return []question{
		{ItemHostIsolation, "Is the agent isolated from the host operating system?"},
		{ItemSSHKeys, "Can the agent access SSH keys?"},
		{ItemDotenvOutsideWorkspace, "Can it read .env files outside its workspace?"},
		{ItemShortLivedCredentials, "Are cloud credentials short-lived and scoped?"},
		{ItemEgressRestricted, "Is outbound network traffic restricted?"},
		{ItemResourceLimits, "Are CPU and memory limits enforced?"},
		{ItemTimeLimits, "Is execution time limited?"},
		{ItemProductionAccess, "Can the agent access production systems?"},
		{ItemFilesystemPermissions, "Are filesystem permissions restricted?"},
		{ItemActionsLogged, "Are agent actions logged?"},
		{ItemEnvironmentsDestroyed, "Are execution environments destroyed after use?"},
		{ItemAuditPossible, "Can security teams audit agent activity?"},
		{ItemCredentialsOutside, "Are sensitive credentials stored outside the execution environment?"},
		{ItemIncidentResponse, "Is there a defined incident-response process for compromised agents?"},
	}
}

// ItemIDs lists the checklist item ids in order.
func ItemIDs() []string {
	qs := checklist()
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = q.id
	}
	return out
}

// Question returns the question of item id ("" for an unknown id).
func Question(id string) string {
	for _, q := range checklist() {
		if q.id == id {
			return q.text
		}
	}
	return ""
}

// Probe check ids: what the probe program prints and the evaluation reads.
const (
	CheckUser               = "user"
	CheckSSHKeys            = "ssh_keys"
	CheckHostFiles          = "host_files"
	CheckDotenv             = "dotenv"
	CheckCredentials        = "credentials"
	CheckSystemWrite        = "system_write"
	CheckFilesAPI           = "files_api"
	CheckInternetProxy      = "internet_proxy"
	CheckInternetDirect     = "internet_direct"
	CheckMetadataProxy      = "metadata_proxy"
	CheckMetadataDirect     = "metadata_direct"
	CheckPrivateProxy       = "private_proxy"
	CheckPrivateDirect      = "private_direct"
	CheckControlPlaneProxy  = "control_plane_proxy"
	CheckControlPlaneDirect = "control_plane_direct"
	CheckMemory             = "memory"
	CheckCPU                = "cpu"
	CheckCommandTimeout     = "command_timeout"
	CheckLifetime           = "lifetime"
)

// CheckNames are the probe checks, each with what it tries, in order.
func CheckNames() []ProbeCheck {
	return []ProbeCheck{
		{ID: CheckUser, Name: "run as root or with capabilities"},
		{ID: CheckSSHKeys, Name: "read SSH keys (~/.ssh, /root/.ssh, host keys, private keys on disk)"},
		{ID: CheckHostFiles, Name: "read host files, devices and shared folders"},
		{ID: CheckDotenv, Name: "find .env files outside /workspace"},
		{ID: CheckCredentials, Name: "find real credentials in the environment and credential files"},
		{ID: CheckSystemWrite, Name: "write system paths (/etc, /bin, /usr, /proc/sys, /sys)"},
		{ID: CheckFilesAPI, Name: "read /etc/shadow (also through a link) or write / and /etc through the files API"},
		{ID: CheckInternetProxy, Name: "reach the internet through the egress proxy"},
		{ID: CheckInternetDirect, Name: "reach the internet directly"},
		{ID: CheckMetadataProxy, Name: "reach the cloud metadata address through the proxy"},
		{ID: CheckMetadataDirect, Name: "reach the cloud metadata address directly"},
		{ID: CheckPrivateProxy, Name: "reach private ranges through the proxy"},
		{ID: CheckPrivateDirect, Name: "reach private ranges directly"},
		{ID: CheckControlPlaneProxy, Name: "reach the control plane through the proxy"},
		{ID: CheckControlPlaneDirect, Name: "reach the control plane directly"},
		{ID: CheckMemory, Name: "allocate past the memory limit"},
		{ID: CheckCPU, Name: "use more CPU than the limit"},
		{ID: CheckCommandTimeout, Name: "run a command past its timeout"},
		{ID: CheckLifetime, Name: "outlive a short sandbox lifetime"},
	}
}

// CheckName returns the description of probe check id.
func CheckName(id string) string {
	for _, c := range CheckNames() {
		if c.ID == id {
			return c.Name
		}
	}
	return id
}
