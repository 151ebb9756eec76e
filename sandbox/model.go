package sandbox

import (
	"encoding/json"
	"time"

	"gorm.io/gorm"
)

// State is where a sandbox is in its life.
type State string

const (
	// StateCreating: recorded and counted against the quota; being placed
	// on a VM and started by its agent.
	StateCreating State = "creating"
	// StateRunning: its init answered; commands can run.
	StateRunning State = "running"
	// StateStopped: its processes ended without a destroy (lifetime, idle
	// timeout, out of memory, killed); the agent's record is being removed.
	StateStopped State = "stopped"
	// StateFailed: it never ran, or it vanished (its VM died, the agent lost
	// it). Nothing of it is left in the guest.
	StateFailed State = "failed"
	// StateDestroyed: everything it had is gone.
	StateDestroyed State = "destroyed"
)

// Active reports whether the sandbox holds resources: it counts against the
// tenant quota and the room of its VM.
func (s State) Active() bool { return s == StateCreating || s == StateRunning }

// Ended reports whether nothing can happen to the sandbox any more.
func (s State) Ended() bool { return s == StateFailed || s == StateDestroyed }

func activeStates() []State { return []State{StateCreating, StateRunning} }

// Reasons recorded with state changes (besides the agent's own: exited,
// timeout, oom, killed, idle, destroyed).
const (
	ReasonRequested = "requested"
	ReasonTimeout   = "timeout"
	ReasonStarted   = "started"
)

// Sandbox is one sandbox as stored.
type Sandbox struct {
	ID              string `gorm:"column:id;primaryKey"`
	TenantID        string `gorm:"column:tenant_id"`
	VMID            string `gorm:"column:vm_id"`
	State           State  `gorm:"column:state"`
	StateReason     string `gorm:"column:state_reason"`
	Template        string `gorm:"column:template"`
	TemplateVersion string `gorm:"column:template_version"`
	// TemplateWorkdir and TemplateUser are a tenant template's defaults
	// (sandbox/templates): the commands' default directory, and the user
	// its image named (recorded; commands run as the sandbox user).
	TemplateWorkdir    string     `gorm:"column:template_workdir"`
	TemplateUser       string     `gorm:"column:template_user"`
	VCPUs              int        `gorm:"column:vcpus"`
	MemoryMiB          int        `gorm:"column:memory_mib"`
	TimeoutSeconds     int        `gorm:"column:timeout_seconds"`
	IdleTimeoutSeconds int        `gorm:"column:idle_timeout_seconds"`
	EnvKeysJSON        string     `gorm:"column:env_keys"`
	MetadataJSON       string     `gorm:"column:metadata"`
	CreatedBy          string     `gorm:"column:created_by"`
	CreatedByName      string     `gorm:"column:created_by_name"`
	CreatedAt          time.Time  `gorm:"column:created_at;autoCreateTime:false"`
	StartedAt          *time.Time `gorm:"column:started_at"`
	ExpiresAt          time.Time  `gorm:"column:expires_at"`
	EndedAt            *time.Time `gorm:"column:ended_at"`
	LastActiveAt       *time.Time `gorm:"column:last_active_at"`
	PausedAt           *time.Time `gorm:"column:paused_at"`      // set while paused (pause.go)
	CreateMS           int64      `gorm:"column:create_ms"`      // request -> running, on the control plane
	GuestReadyMS       int64      `gorm:"column:guest_ready_ms"` // the agent's own create time
	Execs              int        `gorm:"column:execs"`
	// PolicyVersion is the tenant policy version it started under (0: the
	// defaults, or a service without policies).
	PolicyVersion int `gorm:"column:policy_version"`
	// IdempotencyKey is the Idempotency-Key of the create that made it ("":
	// none).
	IdempotencyKey string `gorm:"column:idempotency_key"`
}

// TableName is the GORM table of Sandbox.
func (Sandbox) TableName() string { return "sandboxes" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (s *Sandbox) AfterFind(*gorm.DB) error {
	s.CreatedAt, s.ExpiresAt = s.CreatedAt.UTC(), s.ExpiresAt.UTC()
	utcPtr(&s.StartedAt, &s.EndedAt, &s.LastActiveAt, &s.PausedAt)
	return nil
}

func utcPtr(ps ...**time.Time) {
	for _, p := range ps {
		if *p != nil {
			u := (*p).UTC()
			*p = &u
		}
	}
}

// EnvKeys are the names of the environment variables it was created with.
func (s Sandbox) EnvKeys() []string {
	var out []string
	_ = json.Unmarshal([]byte(s.EnvKeysJSON), &out)
	return out
}

// Metadata is what the creator attached to it.
func (s Sandbox) Metadata() map[string]string {
	out := map[string]string{}
	_ = json.Unmarshal([]byte(s.MetadataJSON), &out)
	return out
}

// Event is one state change of a sandbox.
type Event struct {
	ID        string    `gorm:"column:id;primaryKey"`
	SandboxID string    `gorm:"column:sandbox_id"`
	TenantID  string    `gorm:"column:tenant_id"`
	State     State     `gorm:"column:state"`
	Reason    string    `gorm:"column:reason"`
	Actor     string    `gorm:"column:actor"` // who caused it: a user's email, a token, or "system"
	At        time.Time `gorm:"column:at"`
}

// TableName is the GORM table of Event.
func (Event) TableName() string { return "sandbox_events" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (e *Event) AfterFind(*gorm.DB) error {
	e.At = e.At.UTC()
	return nil
}

// ExecRecord is one command run in a sandbox.
type ExecRecord struct {
	ID          string     `gorm:"column:id;primaryKey"`
	SandboxID   string     `gorm:"column:sandbox_id"`
	TenantID    string     `gorm:"column:tenant_id"`
	ArgvJSON    string     `gorm:"column:argv"`
	Cwd         string     `gorm:"column:cwd"`
	Actor       string     `gorm:"column:actor"`
	StartedAt   time.Time  `gorm:"column:started_at"`
	EndedAt     *time.Time `gorm:"column:ended_at"`
	ExitCode    *int       `gorm:"column:exit_code"`
	Reason      string     `gorm:"column:reason"`
	DurationMS  int64      `gorm:"column:duration_ms"`
	Stdout      string     `gorm:"column:stdout"`
	Stderr      string     `gorm:"column:stderr"`
	StdoutBytes int64      `gorm:"column:stdout_bytes"`
	StderrBytes int64      `gorm:"column:stderr_bytes"`
	Truncated   bool       `gorm:"column:truncated"`
}

// TableName is the GORM table of ExecRecord.
func (ExecRecord) TableName() string { return "sandbox_execs" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (e *ExecRecord) AfterFind(*gorm.DB) error {
	e.StartedAt = e.StartedAt.UTC()
	utcPtr(&e.EndedAt)
	return nil
}

// Argv is the command line.
func (e ExecRecord) Argv() []string {
	var out []string
	_ = json.Unmarshal([]byte(e.ArgvJSON), &out)
	return out
}
