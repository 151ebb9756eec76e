// Package policy keeps each tenant's policy: one JSON document, checked
// against a JSON Schema, stored as append-only versions with their author
// and reason, which can be diffed and rolled back. A tenant that never saved
// one runs under Defaults, reported as version 0.
package policy

// Doc is a tenant's policy. Every section is required in a saved document:
// a partial one is refused rather than quietly completed.
type Doc struct {
	Resources        Resources        `json:"resources"`
	Lifetime         Lifetime         `json:"lifetime"`
	Network          Network          `json:"network"`
	Filesystem       Filesystem       `json:"filesystem"`
	Credentials      Credentials      `json:"credentials"`
	Process          Process          `json:"process"`
	Cleanup          Cleanup          `json:"cleanup"`
	Audit            Audit            `json:"audit"`
	IncidentResponse IncidentResponse `json:"incident_response"`
	VMPool           VMPool           `json:"vm_pool"`
}

// Resources bound what one sandbox may ask for.
type Resources struct {
	MaxVCPUs         int `json:"max_vcpus"`
	MaxMemoryMiB     int `json:"max_memory_mib"`
	DefaultMemoryMiB int `json:"default_memory_mib"`
	MaxPids          int `json:"max_pids"`
	MaxDiskMiB       int `json:"max_disk_mib"`
}

// Lifetime bounds how long one sandbox lives.
type Lifetime struct {
	MaxTimeoutSeconds     int `json:"max_timeout_seconds"`
	DefaultTimeoutSeconds int `json:"default_timeout_seconds"`
	// MaxIdleTimeoutSeconds bounds a sandbox's idle timeout; 0 allows none
	// longer than its lifetime.
	MaxIdleTimeoutSeconds int `json:"max_idle_timeout_seconds"`
}

// Network is what sandboxes may reach.
type Network struct {
	Egress Egress `json:"egress"`
}

// Egress rules, decided by the host gateway per connection.
type Egress struct {
	// Default is "deny" or "allow": what happens to a host no rule names.
	Default string `json:"default"`
	Allow   []Rule `json:"allow"`
	Deny    []Rule `json:"deny"`
}

// Egress defaults.
const (
	EgressDeny  = "deny"
	EgressAllow = "allow"
)

// Rule names a host ("api.github.com") or a wildcard ("*.example.com", any
// subdomain, not the apex) and the ports it covers (none: every port).
type Rule struct {
	Domain string `json:"domain"`
	Ports  []int  `json:"ports"`
}

// Filesystem of a sandbox.
type Filesystem struct {
	ReadOnlyRoot bool `json:"read_only_root"`
	WorkspaceMiB int  `json:"workspace_mib"`
	MaxFileBytes int  `json:"max_file_bytes"`
}

// Credentials the sandboxes of the tenant get as placeholders.
type Credentials struct {
	// Secrets names the tenant secrets exposed to every sandbox as an
	// environment variable of the same name holding a placeholder.
	Secrets []string `json:"secrets"`
}

// Process limits inside a sandbox.
type Process struct {
	AllowRoot       bool   `json:"allow_root"`
	NoNewPrivileges bool   `json:"no_new_privileges"`
	Seccomp         string `json:"seccomp"` // "default" or "strict"
}

// Cleanup of what sandboxes leave.
type Cleanup struct {
	DestroyStoppedAfterSeconds int `json:"destroy_stopped_after_seconds"`
	RecordingRetentionDays     int `json:"recording_retention_days"`
}

// Audit of what runs in sandboxes.
type Audit struct {
	RecordCommands      bool `json:"record_commands"`
	RecordTerminalInput bool `json:"record_terminal_input"`
	RetentionDays       int  `json:"retention_days"`
}

// IncidentResponse is what happens when a sandbox trips a rule.
type IncidentResponse struct {
	// OnEgressDenied is "log" or "stop_sandbox".
	OnEgressDenied string   `json:"on_egress_denied"`
	NotifyEmails   []string `json:"notify_emails"`
	// RunbookURL is the tenant's runbook for a compromised agent (http or
	// https; "" none), shown on the compliance page with the contacts.
	RunbookURL string `json:"runbook_url"`
}

// VMPool is how the tenant's VMs hold sandboxes.
type VMPool struct {
	SandboxesPerVM        int `json:"sandboxes_per_vm"`
	WarmVMs               int `json:"warm_vms"`
	RecycleAfterSandboxes int `json:"recycle_after_sandboxes"`
	RecycleAfterHours     int `json:"recycle_after_hours"`
}

// Defaults is the policy of a tenant that never saved one: strict. No
// egress at all, no credentials, small sandboxes that live an hour.
func Defaults() Doc {
	return Doc{
		Resources: Resources{MaxVCPUs: 1, MaxMemoryMiB: 512, DefaultMemoryMiB: 128, MaxPids: 256, MaxDiskMiB: 1024},
		Lifetime:  Lifetime{MaxTimeoutSeconds: 4 * 3600, DefaultTimeoutSeconds: 3600, MaxIdleTimeoutSeconds: 3600},
		Network:   Network{Egress: Egress{Default: EgressDeny, Allow: []Rule{}, Deny: []Rule{}}},
		Filesystem: Filesystem{ReadOnlyRoot: true, WorkspaceMiB: 1024,
			MaxFileBytes: 64 << 20},
		Credentials:      Credentials{Secrets: []string{}},
		Process:          Process{AllowRoot: false, NoNewPrivileges: true, Seccomp: "default"},
		Cleanup:          Cleanup{DestroyStoppedAfterSeconds: 600, RecordingRetentionDays: 30},
		Audit:            Audit{RecordCommands: true, RecordTerminalInput: false, RetentionDays: 365},
		IncidentResponse: IncidentResponse{OnEgressDenied: "log", NotifyEmails: []string{}},
		VMPool:           VMPool{SandboxesPerVM: 8, WarmVMs: 0, RecycleAfterSandboxes: 100, RecycleAfterHours: 24},
	}
}

// normalize makes nil lists empty so that stored documents, diffs and the
// JSON the API answers never mix null and [].
func (d *Doc) normalize() {
	fix := func(rs []Rule) []Rule {
		if rs == nil {
			return []Rule{}
		}
		for i := range rs {
			if rs[i].Ports == nil {
				rs[i].Ports = []int{}
			}
		}
		return rs
	}
	d.Network.Egress.Allow = fix(d.Network.Egress.Allow)
	d.Network.Egress.Deny = fix(d.Network.Egress.Deny)
	if d.Credentials.Secrets == nil {
		d.Credentials.Secrets = []string{}
	}
	if d.IncidentResponse.NotifyEmails == nil {
		d.IncidentResponse.NotifyEmails = []string{}
	}
}
