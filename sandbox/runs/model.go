// Package runs runs workflows: each run gets its own sandbox, runs the
// workflow's steps in it with live logs, keeps their exit codes, durations
// and bounded output, collects artifacts, and ALWAYS destroys the sandbox at
// the end, whatever happened (success, failure, cancel, timeout). The store
// keeps runs, their steps and the GitHub deliveries that made them.
package runs

import (
	"encoding/json"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/workflow"
)

// State is where a run is in its life.
type State string

// States of a run.
const (
	StateQueued    State = "queued"
	StateRunning   State = "running"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateCancelled State = "cancelled"
	StateTimedOut  State = "timed_out"
	// StateSkipped: the trigger was not trusted to run the workflow (a
	// fork pull request without allow_forks, a comment by someone not in
	// comment_authors); no sandbox was made.
	StateSkipped State = "skipped"
)

// Ended reports whether nothing can happen to the run any more.
func (s State) Ended() bool {
	switch s {
	case StateSucceeded, StateFailed, StateCancelled, StateTimedOut, StateSkipped:
		return true
	}
	return false
}

// Valid reports whether s is a known state (filters).
func (s State) Valid() bool { return s == StateQueued || s == StateRunning || s.Ended() }

// Step states.
const (
	StepPending   = "pending"
	StepRunning   = "running"
	StepSucceeded = "succeeded"
	StepFailed    = "failed"
	StepSkipped   = "skipped"
)

// Trigger kinds.
const (
	TriggerManual = "manual"
	TriggerRerun  = "rerun"
)

// Trigger summarises what started a run: the event kind (manual, rerun, or
// a GitHub event) and the repository state it names.
type Trigger struct {
	Kind       string `json:"kind"`
	DeliveryID string `json:"delivery_id,omitempty"`
	Repository string `json:"repository,omitempty"`
	Ref        string `json:"ref,omitempty"`
	SHA        string `json:"sha,omitempty"`
	PRNumber   int    `json:"pr_number,omitempty"`
	Sender     string `json:"sender,omitempty"`
	// Trust is workflow.TrustTrusted, TrustUntrusted or TrustSkipped; ""
	// (runs made before trust was recorded) ran trusted.
	Trust       string `json:"trust,omitempty"`
	TrustReason string `json:"trust_reason,omitempty"`
}

// Artifact is a file collected from the run's sandbox.
type Artifact struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	// Error says why it was not collected (missing, too large).
	Error string `json:"error,omitempty"`
}

// Run is one run of a workflow version, as stored.
type Run struct {
	ID              string `gorm:"column:id;primaryKey" json:"id"`
	TenantID        string `gorm:"column:tenant_id" json:"-"`
	Workflow        string `gorm:"column:workflow" json:"workflow"`
	WorkflowVersion int    `gorm:"column:workflow_version" json:"workflow_version"`
	Number          int    `gorm:"column:number" json:"number"`
	State           State  `gorm:"column:state" json:"state"`
	StateReason     string `gorm:"column:state_reason" json:"state_reason,omitempty"`
	TriggerKind     string `gorm:"column:trigger_kind" json:"trigger"`
	DeliveryID      string `gorm:"column:delivery_id" json:"delivery_id,omitempty"`
	Repository      string `gorm:"column:repository" json:"repository,omitempty"`
	Ref             string `gorm:"column:ref" json:"ref,omitempty"`
	SHA             string `gorm:"column:sha" json:"sha,omitempty"`
	PRNumber        int    `gorm:"column:pr_number" json:"pr_number,omitempty"`
	Sender          string `gorm:"column:sender" json:"sender,omitempty"`
	Trust           string `gorm:"column:trust" json:"trust,omitempty"`
	TrustReason     string `gorm:"column:trust_reason" json:"trust_reason,omitempty"`
	CreatedBy       string `gorm:"column:created_by" json:"created_by,omitempty"`
	RerunOf         string `gorm:"column:rerun_of" json:"rerun_of,omitempty"`
	SandboxID       string `gorm:"column:sandbox_id" json:"sandbox_id,omitempty"`
	// OwnerReplica is the replica executing the run ("" with one server).
	OwnerReplica  string     `gorm:"column:owner_replica" json:"-"`
	ArtifactsJSON string     `gorm:"column:artifacts" json:"-"`
	Cost          float64    `gorm:"column:cost" json:"cost"`
	CreatedAt     time.Time  `gorm:"column:created_at;autoCreateTime:false" json:"created_at"`
	StartedAt     *time.Time `gorm:"column:started_at" json:"started_at,omitempty"`
	EndedAt       *time.Time `gorm:"column:ended_at" json:"ended_at,omitempty"`
}

// TableName is the GORM table of Run.
func (Run) TableName() string { return "workflow_runs" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (r *Run) AfterFind(*gorm.DB) error {
	r.CreatedAt = r.CreatedAt.UTC()
	utc(&r.StartedAt, &r.EndedAt)
	return nil
}

func utc(ps ...**time.Time) {
	for _, p := range ps {
		if *p != nil {
			t := (*p).UTC()
			*p = &t
		}
	}
}

// Trigger is what started the run.
func (r Run) Trigger() Trigger {
	return Trigger{Kind: r.TriggerKind, DeliveryID: r.DeliveryID, Repository: r.Repository, Ref: r.Ref, SHA: r.SHA,
		PRNumber: r.PRNumber, Sender: r.Sender, Trust: r.Trust, TrustReason: r.TrustReason}
}

// Untrusted reports whether the run's code must get no secrets and no
// checkout token.
func (r Run) Untrusted() bool {
	return r.Trust == workflow.TrustUntrusted || r.Trust == workflow.TrustSkipped
}

// Artifacts are the files collected from its sandbox.
func (r Run) Artifacts() []Artifact {
	var out []Artifact
	_ = json.Unmarshal([]byte(r.ArtifactsJSON), &out)
	return out
}

// Duration is how long it ran (so far, for a running run).
func (r Run) Duration(now time.Time) time.Duration {
	if r.StartedAt == nil {
		return 0
	}
	end := now
	if r.EndedAt != nil {
		end = *r.EndedAt
	}
	return end.Sub(*r.StartedAt)
}

// Step is one step of a run, as stored.
type Step struct {
	RunID      string     `gorm:"column:run_id;primaryKey" json:"-"`
	TenantID   string     `gorm:"column:tenant_id" json:"-"`
	Index      int        `gorm:"column:idx;primaryKey;autoIncrement:false" json:"index"`
	Name       string     `gorm:"column:name" json:"name"`
	State      string     `gorm:"column:state" json:"state"`
	ExitCode   *int       `gorm:"column:exit_code" json:"exit_code,omitempty"`
	DurationMS int64      `gorm:"column:duration_ms" json:"duration_ms"`
	Output     string     `gorm:"column:output" json:"output"`
	Truncated  bool       `gorm:"column:truncated" json:"truncated,omitempty"`
	StartedAt  *time.Time `gorm:"column:started_at" json:"started_at,omitempty"`
	EndedAt    *time.Time `gorm:"column:ended_at" json:"ended_at,omitempty"`
}

// TableName is the GORM table of Step.
func (Step) TableName() string { return "workflow_run_steps" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (s *Step) AfterFind(*gorm.DB) error {
	utc(&s.StartedAt, &s.EndedAt)
	return nil
}

// Delivery is a GitHub delivery accepted for a tenant.
type Delivery struct {
	TenantID   string `gorm:"column:tenant_id;primaryKey"`
	DeliveryID string `gorm:"column:delivery_id;primaryKey"`
	Event      string `gorm:"column:event"`
	Action     string `gorm:"column:action"`
	Repository string `gorm:"column:repository"`
	// BodySHA256 is the hex SHA-256 of the delivery's body: a body seen
	// before is the same delivery, whatever its id.
	BodySHA256 string    `gorm:"column:body_sha256"`
	Runs       int       `gorm:"column:runs"`
	ReceivedAt time.Time `gorm:"column:received_at;autoCreateTime:false"`
}

// TableName is the GORM table of Delivery.
func (Delivery) TableName() string { return "github_deliveries" }
