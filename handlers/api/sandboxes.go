package api

// Sandbox is a sandbox: a container nested inside one of the tenant's VMs.
type Sandbox struct {
	ID                 string            `json:"id"`
	State              string            `json:"state" enum:"creating,running,stopped,failed,destroyed"`
	StateReason        string            `json:"state_reason,omitempty" doc:"why it is in this state: requested, started, timeout, oom, idle, killed, vanished, ..."`
	Template           string            `json:"template"`
	TemplateVersion    string            `json:"template_version,omitempty"`
	VCPUs              int               `json:"vcpus"`
	MemoryMiB          int               `json:"memory_mib"`
	TimeoutSeconds     int               `json:"timeout_seconds"`
	IdleTimeoutSeconds int               `json:"idle_timeout_seconds"`
	VMID               string            `json:"vm_id,omitempty" doc:"the VM it runs in"`
	EnvKeys            []string          `json:"env_keys" nonnull:"true" doc:"the names of its environment variables (values stay in the VM)"`
	Metadata           map[string]string `json:"metadata" doc:"labels of your own"`
	CreatedBy          string            `json:"created_by"`
	CreatedAt          string            `json:"created_at" format:"date-time"`
	StartedAt          *string           `json:"started_at,omitempty" format:"date-time"`
	ExpiresAt          string            `json:"expires_at" format:"date-time" doc:"when its lifetime ends"`
	EndedAt            *string           `json:"ended_at,omitempty" format:"date-time"`
	LastActiveAt       *string           `json:"last_active_at,omitempty" format:"date-time"`
	PausedAt           *string           `json:"paused_at,omitempty" format:"date-time" doc:"set while it is paused (state stays running): it uses no CPU and is billed memory only"`
	CreateMS           int64             `json:"create_ms,omitempty" doc:"request to running"`
	GuestReadyMS       int64             `json:"guest_ready_ms,omitempty" doc:"the agent's own create time"`
	Execs              int               `json:"execs" doc:"commands run"`
	PolicyVersion      int               `json:"policy_version" doc:"the tenant policy version it started under (0: the defaults)"`
	IdempotencyKey     string            `json:"idempotency_key,omitempty" doc:"the Idempotency-Key of the create that made it"`
	Stats              *SandboxStats     `json:"stats,omitempty" doc:"while it runs: its usage, sampled by its agent"`
	Events             []SandboxEvent    `json:"events,omitempty" doc:"its timeline (one sandbox only)"`
}

// SandboxStats is a running sandbox's usage, sampled by its agent.
type SandboxStats struct {
	CPUUsageMS         int64  `json:"cpu_usage_ms"`
	MemoryCurrentBytes uint64 `json:"memory_current_bytes"`
	MemoryPeakBytes    uint64 `json:"memory_peak_bytes"`
	MemoryMaxBytes     uint64 `json:"memory_max_bytes"`
	OOMKills           uint64 `json:"oom_kills"`
	Pids               uint64 `json:"pids"`
	PidsMax            uint64 `json:"pids_max"`
	DiskUsedBytes      uint64 `json:"disk_used_bytes"`
	DiskSizeBytes      uint64 `json:"disk_size_bytes"`
	WorkspaceUsedBytes uint64 `json:"workspace_used_bytes"`
	WorkspaceSizeBytes uint64 `json:"workspace_size_bytes"`
}

// SandboxEvent is one state change of a sandbox.
type SandboxEvent struct {
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	Actor  string `json:"actor,omitempty"`
	At     string `json:"at" format:"date-time"`
}

// SandboxList answers GET /api/v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes" nonnull:"true"`
}

// SandboxQuery filters the sandbox list.
type SandboxQuery struct {
	IdempotencyKey string `query:"idempotency_key" doc:"only the sandboxes made by creates with this Idempotency-Key"`
}

// CreateSandbox is the body of POST /api/v1/sandboxes; every field is
// optional.
type CreateSandbox struct {
	Template           string            `json:"template,omitempty" doc:"template name (see the sandboxes page); default debian, or the first built"`
	VCPUs              int               `json:"vcpus,omitempty" doc:"CPU cap in vCPUs; default 1, at most the tenant's VM size"`
	MemoryMiB          int               `json:"memory_mib,omitempty" doc:"memory limit, disk and workspace included; default the tenant policy's resources.default_memory_mib, at most the VM's memory less what the guest keeps"`
	TimeoutSeconds     int               `json:"timeout_seconds,omitempty" doc:"wall-clock lifetime; default the tenant policy's lifetime.default_timeout_seconds, at most 604800; destroyed with reason timeout when it passes"`
	IdleTimeoutSeconds int               `json:"idle_timeout_seconds,omitempty" doc:"stopped (reason idle) after this long without a command or file; 0 none"`
	Env                map[string]string `json:"env,omitempty" doc:"added to every command; values are kept in the VM only"`
	Metadata           map[string]string `json:"metadata,omitempty" doc:"up to 32 labels of your own"`
	Volumes            []VolumeMount     `json:"volumes,omitempty" doc:"the tenant's volumes to mount (at most 8): read-write for one sandbox at a time, read-only for many"`
}

// ExecRequest is the body of POST /api/v1/sandboxes/{id}/exec.
type ExecRequest struct {
	Cmd            []string          `json:"cmd" minItems:"1" doc:"program and arguments; no shell unless you run one"`
	Cwd            string            `json:"cwd,omitempty" doc:"working directory: absolute, or relative to /workspace (the default)"`
	Env            map[string]string `json:"env,omitempty"`
	Stdin          string            `json:"stdin,omitempty" doc:"sent to the command, then closed"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" doc:"kills the command's process group when it passes (reason timeout); default 600"`
}

// ExecQuery chooses the answer of an exec.
type ExecQuery struct {
	Stream string `query:"stream" enum:"0,1,true" doc:"1: answer newline-delimited JSON events (application/x-ndjson) as the command runs, instead of one answer at its end. The events, one ExecEvent per line: {\"type\":\"started\",\"exec_id\",\"pid\"}; then any number of {\"type\":\"stdout\"|\"stderr\",\"data\"} (or \"data_base64\" for output that is not UTF-8); finally {\"type\":\"exit\",\"exec_id\",\"exit_code\",\"signal\",\"reason\",\"duration_ms\"}, or {\"type\":\"error\",\"reason\",\"detail\",\"offset\"} if the command could not be followed to its end (reason \"lost\": its VM's agent session went and did not come back within the exec grace; \"timeout\": the client stopped reading for longer than the stream write timeout, and the command was killed). A command outlives a server restart: resume it with GET /api/v1/sandboxes/{id}/execs/{exec_id}/stream?offset=. A command refused before it starts (bad input, sandbox not running) gets a problem document as usual."`
}

// ExecResult answers a command run to its end.
type ExecResult struct {
	ExecID          string `json:"exec_id"`
	ExitCode        int    `json:"exit_code" doc:"or 128+signal"`
	Signal          string `json:"signal,omitempty" doc:"e.g. KILL"`
	Reason          string `json:"reason" doc:"exited, timeout, oom or killed"`
	DurationMS      int64  `json:"duration_ms"`
	Stdout          string `json:"stdout" doc:"up to 4 MiB; use stream=1 for more or for binary output"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
}

// ExecEvent is one line of a streamed exec.
type ExecEvent struct {
	Type string `json:"type" enum:"started,stdout,stderr,exit,error"`
	// Data is output as text; DataBase64 holds output that is not valid
	// UTF-8 (exactly one of them is set on stdout and stderr events).
	Data       string `json:"data,omitempty" doc:"output as text"`
	DataBase64 string `json:"data_base64,omitempty" doc:"output that is not UTF-8"`
	ExecID     string `json:"exec_id,omitempty"`
	PID        int    `json:"pid,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	Signal     string `json:"signal,omitempty"`
	Reason     string `json:"reason,omitempty"`
	DurationMS *int64 `json:"duration_ms,omitempty"`
	Status     int    `json:"status,omitempty" doc:"error: the HTTP status the error would have had"`
	Detail     string `json:"detail,omitempty"`
	// Offset, on error events, is how many output bytes (stdout and
	// stderr together, decoded) this stream delivered: where a resume
	// (GET .../execs/{exec_id}/stream?offset=) picks up.
	Offset *int64 `json:"offset,omitempty" doc:"started (resume): where the output starts; error: output bytes delivered, to resume from"`
}

// ResumeExecParams names the command resumed and where.
type ResumeExecParams struct {
	ExecID string `path:"exec_id" doc:"the exec_id of the started event"`
	Offset int64  `query:"offset" minimum:"0" doc:"output bytes (stdout and stderr together, decoded) the client has; default 0: what the agent still buffers (up to 1 MiB)"`
}

// FileQuery names a sandbox file.
type FileQuery struct {
	Path string `query:"path" required:"true" doc:"absolute in the sandbox, or relative to /workspace; '..' is refused"`
}

// WriteFileQuery names a sandbox file to write and its mode.
type WriteFileQuery struct {
	Path string `query:"path" required:"true" doc:"absolute in the sandbox, or relative to /workspace; '..' is refused"`
	Mode string `query:"mode" pattern:"^[0-7]{1,4}$" doc:"permission bits in octal, default 0644"`
}

// File is a file written.
type File struct {
	Path string `json:"path"`
	Size int64  `json:"size" doc:"bytes"`
	Mode string `json:"mode" doc:"octal permission bits"`
}
