package agentproto

import (
	"fmt"
	"regexp"
	"time"
)

// SandboxSpec is what sandbox.create asks for. The host decides every
// value from the tenant's policy and quota; the agent only enforces them.
type SandboxSpec struct {
	// ID names the sandbox in the guest (paths, cgroup, container id):
	// ValidSandboxID. The host picks it and keeps it unique.
	ID string `json:"id"`
	// Template is the name of a template disk attached to the VM.
	Template string `json:"template"`
	// TemplateHotplugged: the host attached the template's disk just now
	// (a tenant template): the agent looks for it for up to 20 s.
	TemplateHotplugged bool   `json:"template_hotplugged,omitempty"`
	Limits             Limits `json:"limits"`
	// Env is added to every command's environment, KEY=VALUE.
	Env []string `json:"env,omitempty"`
	// Hostname inside the sandbox; empty means "sandbox".
	Hostname string `json:"hostname,omitempty"`
	// LifetimeSeconds is the wall-clock lifetime; 0 means none. When it
	// passes the agent kills the sandbox and reports reason "timeout".
	LifetimeSeconds int `json:"lifetime_seconds,omitempty"`
	// IdleSeconds stops the sandbox (reason "idle") when no command ran and
	// no file moved for that long; 0 means no idle timeout.
	IdleSeconds int `json:"idle_seconds,omitempty"`
	// InitIdleMillis is how long the sandbox idles (no command, no
	// connection of the agent but its watch of init) before its PID 1
	// becomes the agent's small stub init until the next request; 0 means
	// the agent's default (3 s), negative never.
	InitIdleMillis int `json:"init_idle_ms,omitempty"`
	// CAPEM is the tenant's CA certificate (PEM) the sandbox trusts for the
	// egress gateway's TLS interception: the agent appends it to the
	// template's system bundle in the sandbox's writable layer, writes
	// /etc/stockade/ca.pem and points SSL_CERT_FILE, NODE_EXTRA_CA_CERTS,
	// REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE at it. Empty means none.
	CAPEM string `json:"ca_pem,omitempty"`
	// Volumes are bound into the sandbox; each must be mounted in the VM
	// already (OpVolumeMount).
	Volumes []VolumeBind `json:"volumes,omitempty"`
}

// Limits are a sandbox's cgroup v2 and disk limits. Zero means the agent's
// default (see the field).
type Limits struct {
	// VCPUs caps CPU time (cpu.max); 0 means unlimited.
	VCPUs float64 `json:"vcpus,omitempty"`
	// MemoryMiB is memory.max (no swap); 0 means 256.
	MemoryMiB int `json:"memory_mib,omitempty"`
	// PidsMax is pids.max; 0 means 256.
	PidsMax int `json:"pids_max,omitempty"`
	// DiskMiB bounds the writable layer over the template; 0 means 256.
	// It lives in guest memory and counts against MemoryMiB.
	DiskMiB int `json:"disk_mib,omitempty"`
	// WorkspaceMiB bounds /workspace; 0 means 256. Guest memory too.
	WorkspaceMiB int `json:"workspace_mib,omitempty"`
	// IO throttles reads of the template disk (the only block device a
	// sandbox touches); nil means none.
	IO *IOLimits `json:"io,omitempty"`
}

// IOLimits throttle a sandbox's reads of its template disk (io.max).
type IOLimits struct {
	ReadBPS  uint64 `json:"read_bps,omitempty"`
	ReadIOPS uint64 `json:"read_iops,omitempty"`
}

// Sandbox states.
const (
	SandboxCreating = "creating"
	SandboxRunning  = "running"
	// SandboxStopped: the sandbox's processes are gone (see Reason); only its
	// record is left until sandbox.destroy.
	SandboxStopped   = "stopped"
	SandboxDestroyed = "destroyed"
)

// Reasons an exec or a sandbox ended.
const (
	ReasonExited  = "exited"
	ReasonTimeout = "timeout"
	ReasonOOM     = "oom"
	ReasonKilled  = "killed"
	ReasonIdle    = "idle"
	// ReasonDestroyed: sandbox.destroy ended it.
	ReasonDestroyed = "destroyed"
)

// SandboxInfo is a sandbox as the agent sees it.
type SandboxInfo struct {
	ID       string `json:"id"`
	Template string `json:"template"`
	State    string `json:"state"`
	// Reason says why a stopped or destroyed sandbox ended.
	Reason string `json:"reason,omitempty"`
	// Paused: a running sandbox whose cgroup is frozen (OpSandboxPause).
	Paused bool   `json:"paused,omitempty"`
	Limits Limits `json:"limits"`
	// Created is the guest's clock: informative only.
	Created time.Time `json:"created"`
	// Startup is how long create took inside the guest, by step.
	Startup Startup `json:"startup"`
	// Prestarted: the create claimed a pre-started sandbox of the pool
	// (OpSandboxPrestart) rather than starting one.
	Prestarted bool `json:"prestarted,omitempty"`
	// Final is the sandbox's last cgroup sample, read once its processes
	// were gone: set when it stopped (and in the answer to sandbox.destroy).
	Final *SandboxStats `json:"final_stats,omitempty"`
	// StoppedAgo is how long before this answer the final sample was
	// taken, on the guest's monotonic clock: the host dates the stop from it
	// (the guest's wall clock may be off, or stepped).
	StoppedAgo time.Duration `json:"stopped_ago_ns,omitempty"`
}

// Startup times the steps of sandbox.create inside the guest.
type Startup struct {
	// Mounts: scratch, overlay and workspace mounted, bundle written.
	Mounts time.Duration `json:"mounts_ns"`
	// Crun: `crun run --detach` returned.
	Crun time.Duration `json:"crun_ns"`
	// Ready: the sandbox's init answered (the whole create).
	Ready time.Duration `json:"ready_ns"`
}

// TemplateInfo is a template disk the agent found and mounted.
type TemplateInfo struct {
	Name   string `json:"name"`
	Device string `json:"device"`
	// Version is the template build's version (from its file system UUID),
	// empty when unknown.
	Version string `json:"version,omitempty"`
}

// SandboxList answers sandbox.list.
type SandboxList struct {
	Sandboxes []SandboxInfo  `json:"sandboxes"`
	Templates []TemplateInfo `json:"templates"`
}

// SandboxStats is a sandbox's cgroup and disk usage.
type SandboxStats struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// Paused: its cgroup is frozen (OpSandboxPause).
	Paused bool `json:"paused,omitempty"`

	CPUUsage  time.Duration `json:"cpu_usage_ns"`
	CPUUser   time.Duration `json:"cpu_user_ns"`
	CPUSystem time.Duration `json:"cpu_system_ns"`
	// Throttled is the time cpu.max held the sandbox back.
	Throttled time.Duration `json:"cpu_throttled_ns"`

	MemoryCurrent uint64 `json:"memory_current_bytes"`
	MemoryPeak    uint64 `json:"memory_peak_bytes"`
	MemoryMax     uint64 `json:"memory_max_bytes"`
	// OOMKills counts processes the OOM killer ended in this sandbox.
	OOMKills uint64 `json:"oom_kills"`

	Pids    uint64 `json:"pids"`
	PidsMax uint64 `json:"pids_max"`
	// PidsRefused counts forks refused at PidsMax (pids.events max).
	PidsRefused uint64 `json:"pids_refused"`

	IOReadBytes  uint64 `json:"io_read_bytes"`
	IOWriteBytes uint64 `json:"io_write_bytes"`
	IOReadOps    uint64 `json:"io_read_ops"`
	IOWriteOps   uint64 `json:"io_write_ops"`

	DiskUsed       uint64    `json:"disk_used_bytes"`
	DiskSize       uint64    `json:"disk_size_bytes"`
	WorkspaceUsed  uint64    `json:"workspace_used_bytes"`
	WorkspaceSize  uint64    `json:"workspace_size_bytes"`
	SampledAtGuest time.Time `json:"sampled_at"`
}

// ExecRequest runs a command in a sandbox (OpExec). Commands run as the
// sandbox user (uid 1000), in their own session and process group.
type ExecRequest struct {
	// ID names the exec for OpExecAttach and OpExecList: unique per agent,
	// at most 128 bytes of [A-Za-z0-9._-]. Empty means the exec cannot
	// outlive its stream (it is killed when the host session ends).
	ID      string   `json:"id,omitempty"`
	Sandbox string   `json:"sandbox"`
	Argv    []string `json:"argv"`
	// Env is added to the sandbox's environment, KEY=VALUE.
	Env []string `json:"env,omitempty"`
	// Dir is the working directory; empty means /workspace.
	Dir string `json:"dir,omitempty"`
	// Stdin false means the command's stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// TimeoutSeconds kills the command's process group (reason "timeout");
	// 0 means no timeout of its own (the sandbox's lifetime still holds).
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// TTY runs the command on a new terminal from the sandbox's own devpts:
	// its output arrives on ChannelStdout only, stdin is always open.
	TTY bool `json:"tty,omitempty"`
	// Size is the terminal's size when TTY; zero means 80x24.
	Size Winsize `json:"size,omitempty"`
	// Keep (with an ID) keeps the command until it exits, is signalled to
	// death, or its sandbox ends: neither its host session ending nor its
	// stream closing kills it, and no grace applies. Its exit and latest
	// output wait for a host to re-attach (OpExecAttach) until its sandbox
	// is destroyed. At most MaxKeptExecs per sandbox.
	Keep bool `json:"keep,omitempty"`
}

// MaxKeptExecs bounds the kept execs (ExecRequest.Keep) of one sandbox the
// agent holds, running or ended but not yet delivered.
const MaxKeptExecs = 64

// LifetimeRequest sets a running sandbox's remaining lifetime
// (OpSandboxLifetime).
type LifetimeRequest struct {
	// Seconds from now until the agent stops the sandbox (reason
	// "timeout"): 1 to MaxLifetimeSeconds.
	Seconds int `json:"seconds"`
}

// MaxLifetimeSeconds bounds LifetimeRequest.Seconds (30 days).
const MaxLifetimeSeconds = 30 * 24 * 3600

// ExecStarted answers OpExec.
type ExecStarted struct {
	// PID is the command's process id inside the sandbox.
	PID int `json:"pid"`
	// Offset is where the output that follows starts (OpExecAttach only):
	// stdout and stderr bytes together since the command started.
	Offset int64 `json:"offset,omitempty"`
}

// ExecAttachRequest re-attaches a detached exec (OpExecAttach).
type ExecAttachRequest struct {
	ID string `json:"id"`
	// Offset is how much of the output (stdout and stderr bytes together)
	// the host has already.
	Offset int64 `json:"offset"`
}

// ExecInfo is an exec the agent holds (OpExecList).
type ExecInfo struct {
	ID      string `json:"id"`
	Sandbox string `json:"sandbox"`
	PID     int    `json:"pid"`
	// Attached says a host stream serves it now.
	Attached bool `json:"attached"`
	// Exited says the command ended; Exit is how (delivered on attach).
	Exited bool        `json:"exited"`
	Exit   *ExitStatus `json:"exit,omitempty"`
	// Output is how many output bytes it wrote; Buffered how many of the
	// latest the agent still holds for a re-attach.
	Output   int64 `json:"output_bytes"`
	Buffered int64 `json:"buffered_bytes"`
	// DetachedFor is how long ago its host session ended (0 when attached).
	DetachedFor time.Duration `json:"detached_for_ns,omitempty"`
}

// DefaultExecGrace is how long a detached exec lives when the host set no
// grace in hello.
const DefaultExecGrace = 5 * time.Minute

// MaxExecIDLen bounds ExecRequest.ID.
const MaxExecIDLen = 128

// ValidExecID reports whether id is a well-formed ExecRequest.ID.
func ValidExecID(id string) bool {
	if id == "" || len(id) > MaxExecIDLen {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// ExitStatus is the data of the final ChannelExit frame.
type ExitStatus struct {
	// Code is the exit code, or 128+signal when a signal ended the command.
	Code int `json:"code"`
	// Signal names the signal that ended the command ("KILL"), if one did.
	Signal string `json:"signal,omitempty"`
	// Reason is ReasonExited, ReasonTimeout, ReasonOOM or ReasonKilled.
	Reason   string        `json:"reason"`
	Duration time.Duration `json:"duration_ns"`
}

// Winsize is a terminal size, and the data of a ChannelResize frame.
type Winsize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// FileReadRequest asks for (part of) a file in a sandbox (OpFileRead).
// Paths resolve inside the sandbox's root only: ".." and symlinks stop at it.
type FileReadRequest struct {
	Sandbox string `json:"sandbox"`
	// Path is absolute in the sandbox, or relative to /workspace.
	Path   string `json:"path"`
	Offset int64  `json:"offset,omitempty"`
	// Limit is the most bytes to send; 0 means to the end of the file. A
	// file longer than the agent's bound fails with CodeTooLarge unless a
	// Limit within the bound is given.
	Limit int64 `json:"limit,omitempty"`
}

// FileWriteRequest writes a file in a sandbox (OpFileWrite). Missing parent
// folders are made; new files and folders belong to the sandbox user.
type FileWriteRequest struct {
	Sandbox string `json:"sandbox"`
	Path    string `json:"path"`
	// Mode is the permission bits; 0 means 0644.
	Mode   uint32 `json:"mode,omitempty"`
	Append bool   `json:"append,omitempty"`
	// MaxBytes fails the write (CodeTooLarge, nothing written) when more
	// arrives; 0 means the agent's bound.
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// FileInfo describes a file read or written.
type FileInfo struct {
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"`
}

// Baseline kinds.
const (
	// BaselineRun times `crun run` of the template (read-only root, crun's
	// default spec) from spawn to its first line of output.
	BaselineRun = "run"
	// BaselineExec times `crun exec <sandbox> true` into a running sandbox.
	BaselineExec = "exec"
	// BaselineSpawn times the agent's own fork+exec of the template's
	// `true`, spawn to exit: with one channel round trip (OpPing), the
	// floor an exec through the API is measured against.
	BaselineSpawn = "spawn"
	// BaselineLoop runs the sustained task loop with raw crun (see
	// baseline_loop.go): Concurrency workers for Duration; Count unused.
	BaselineLoop = "loop"
)

// BaselineRequest asks for Count raw crun timings (OpBaseline).
type BaselineRequest struct {
	Kind     string `json:"kind"`
	Template string `json:"template,omitempty"`
	Sandbox  string `json:"sandbox,omitempty"`
	Count    int    `json:"count"`
	// NoASLR starts crun without address randomization, as sandbox.create
	// does: the like-for-like comparison under TCG.
	NoASLR bool `json:"no_aslr,omitempty"`
	// Concurrency and Duration: BaselineLoop's workers and how long they
	// start tasks.
	Concurrency int           `json:"concurrency,omitempty"`
	Duration    time.Duration `json:"duration_ns,omitempty"`
}

// BaselineResult is one duration per run, in order.
type BaselineResult struct {
	Samples []time.Duration `json:"samples_ns"`
	// Loop is BaselineLoop's result.
	Loop *LoopResult `json:"loop,omitempty"`
}

// MaxBaselineCount bounds BaselineRequest.Count.
const MaxBaselineCount = 200

var validSandboxID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidSandboxID reports whether id can name a sandbox: 1-64 of
// [A-Za-z0-9_.-], starting with a letter or digit.
func ValidSandboxID(id string) bool { return validSandboxID.MatchString(id) }

// CheckSandboxID fails with ErrBadRequest when id cannot name a sandbox.
func CheckSandboxID(id string) error {
	if !ValidSandboxID(id) {
		return fmt.Errorf("sandbox id %q: %w", id, ErrBadRequest)
	}
	return nil
}
