package views

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// SandboxesView is the tenant's sandboxes page: the create form, the
// sandbox table (polled for live state) and, when sandboxes cannot be
// started, why.
type SandboxesView struct {
	Table   SandboxTable
	CanEdit bool // create and destroy
	// Unavailable says why sandboxes cannot be started now; empty when they can.
	Unavailable string
	Form        SandboxForm
	Templates   []Choice
	// VMVCPUs, MaxMemoryMiB and MaxTimeoutMinutes bound one sandbox: the
	// tenant policy's limits within the size of the tenant's VMs (less what
	// the guest keeps).
	VMVCPUs, MaxMemoryMiB int
	MaxTimeoutMinutes     int
	// DefaultMemoryMiB and DefaultTimeout are what a field left empty
	// gets: the tenant policy's defaults.
	DefaultMemoryMiB int
	DefaultTimeout   time.Duration
	Quota            SandboxQuotaView
	// QuotaLines are the tenant's quota lines; those at 80 % or more show
	// as warnings above the create form.
	QuotaLines []QuotaLineView
}

// SandboxForm is the create form: values as typed, and field errors.
type SandboxForm struct {
	Template       string
	VCPUs          string
	MemoryMiB      string
	TimeoutMinutes string
	Errors         map[string]string // keyed by field name or FormError
}

// memoryHint says the memory field's bounds and default.
func (v SandboxesView) memoryHint() string {
	return fmt.Sprintf("16 to %d; empty: the default, %d; its disk and workspace live in it", v.MaxMemoryMiB, v.DefaultMemoryMiB)
}

// lifetimeHint says the lifetime field's bound and default.
func (v SandboxesView) lifetimeHint() string {
	return fmt.Sprintf("1 to %d; empty: the default, %s; destroyed when it passes", v.maxMinutes(), showDuration(v.DefaultTimeout))
}

// maxMinutes is the lifetime field's bound: a week when nothing lower
// bounds it.
func (v SandboxesView) maxMinutes() int {
	if v.MaxTimeoutMinutes <= 0 {
		return 7 * 24 * 60
	}
	return v.MaxTimeoutMinutes
}

// SandboxQuotaView is the tenant's quota next to what its active sandboxes use.
type SandboxQuotaView struct {
	MaxSandboxes, UsedSandboxes int
	MaxVCPUs, UsedVCPUs         int
	MaxMemoryMiB, UsedMemoryMiB int
}

// SandboxTable is the sandbox list, rendered alone as the polled fragment.
type SandboxTable struct {
	Rows    []SandboxRow
	CanEdit bool
	CSRF    string
	PollURL string // fetched every 2 s to replace the table; "" disables it
	Now     time.Time
}

// SandboxRow is one sandbox.
type SandboxRow struct {
	ID          string
	State       string // creating, running, stopped, failed, destroyed
	StateReason string
	Template    string
	VCPUs       int
	MemoryMiB   int
	VMID        string
	CreatedBy   string
	CreatedAt   time.Time
	ExpiresAt   time.Time
	EndedAt     *time.Time
	Execs       int
}

// Active reports whether the sandbox holds resources.
func (r SandboxRow) Active() bool { return r.State == "creating" || r.State == "running" }

func (r SandboxRow) shortID() string { return shortOf(r.ID) }

func shortOf(id string) string {
	if len(id) > 13 {
		return id[len(id)-12:]
	}
	return id
}

// SandboxView is one sandbox's page.
type SandboxView struct {
	Row                SandboxRow
	TemplateVersion    string
	TimeoutSeconds     int
	IdleTimeoutSeconds int
	// PolicyVersion is the tenant policy version it started under.
	PolicyVersion int
	EnvKeys       []string
	Metadata      map[string]string
	StartedAt     *time.Time
	LastActiveAt  *time.Time
	CreateMS      int64
	GuestReadyMS  int64
	Stats         *SandboxStatsView // nil: not running, or the agent did not answer
	Events        []SandboxEventRow
	Execs         []ExecRow
	Terminals     SandboxTerminals // its terminal sessions (views/terminals.templ)
	Processes     SandboxProcesses // its processes (views/processes.templ)
	CanEdit       bool
	CanSeeVMs     bool
	CanSeeUsage   bool // usage.read: link the sandbox's usage and cost
	CSRF          string
	PollURL       string // the live fragment, while the sandbox is active
	Now           time.Time
}

// SandboxStatsView is a running sandbox's usage.
type SandboxStatsView struct {
	CPUTime                      time.Duration
	MemoryCurrent, MemoryMax     uint64
	MemoryPeak                   uint64
	Pids, PidsMax                uint64
	DiskUsed, DiskSize           uint64
	WorkspaceUsed, WorkspaceSize uint64
	OOMKills                     uint64
}

// SandboxEventRow is one state change.
type SandboxEventRow struct {
	State  string
	Reason string
	Actor  string
	At     time.Time
}

// ExecRow is one command run in a sandbox.
type ExecRow struct {
	ID          string
	Argv        []string
	Cwd         string
	Actor       string
	StartedAt   time.Time
	Running     bool
	ExitCode    string // "" while running or when it never started
	Reason      string
	Duration    time.Duration
	Stdout      string
	Stderr      string
	StdoutBytes int64
	StderrBytes int64
	Truncated   bool
}

// commandLine shows argv the way a shell would take it back.
func commandLine(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
			parts[i] = a
			continue
		}
		parts[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(parts, " ")
}

func sandboxPill(state string) string {
	switch state {
	case "running":
		return "pill pill-good"
	case "creating", "stopped":
		return "pill pill-warn"
	case "failed":
		return "pill pill-bad"
	}
	return "pill"
}

func exitPill(r ExecRow) string {
	switch {
	case r.Running:
		return "pill pill-warn"
	case r.ExitCode == "0":
		return "pill pill-good"
	}
	return "pill pill-bad"
}

func exitLabel(r ExecRow) string {
	switch {
	case r.Running:
		return "running"
	case r.ExitCode == "":
		return "did not run"
	case r.Reason != "" && r.Reason != "exited":
		return "exit " + r.ExitCode + " (" + r.Reason + ")"
	}
	return "exit " + r.ExitCode
}

// remaining is the time left until t, or "—" once it passed.
func remaining(t, now time.Time) string { return showDuration(t.Sub(now)) }

func showBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func ofBytes(used, size uint64) string {
	if size == 0 || size >= 1<<62 {
		return showBytes(used)
	}
	return showBytes(used) + " of " + showBytes(size)
}

func showMS(ms int64) string {
	if ms <= 0 {
		return "—"
	}
	if ms < 10000 {
		return fmt.Sprintf("%d ms", ms)
	}
	return showDuration(time.Duration(ms) * time.Millisecond)
}

func outputNote(r ExecRow) string {
	if !r.Truncated {
		return ""
	}
	return fmt.Sprintf("Output cut: %s of stdout and %s of stderr in all; the start of each is kept.",
		showBytes(uint64(r.StdoutBytes)), showBytes(uint64(r.StderrBytes)))
}

func metadataText(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}

func timeSeconds(s int) time.Duration { return time.Duration(s) * time.Second }
