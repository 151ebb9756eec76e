package runs

import (
	"time"

	"gorm.io/gorm"
)

// Outbox records an event for the tenant's outgoing webhooks inside the
// transaction that ends the run (*integrations.Store).
type Outbox interface {
	Add(tx *gorm.DB, tenantID, eventType string, data any) error
}

// EventCompleted is the type of the event sent when a run ends, whatever
// its outcome (integrations.EventRunCompleted).
const EventCompleted = "run.completed"

// CompletedEvent is the data of run.completed.
type CompletedEvent struct {
	RunID           string     `json:"run_id"`
	Workflow        string     `json:"workflow"`
	WorkflowVersion int        `json:"workflow_version"`
	Number          int        `json:"number"`
	State           State      `json:"state"`
	Reason          string     `json:"reason,omitempty"`
	Trigger         Trigger    `json:"trigger"`
	SandboxID       string     `json:"sandbox_id,omitempty"`
	Artifacts       []Artifact `json:"artifacts"`
	Cost            float64    `json:"cost"`
	CreatedAt       time.Time  `json:"created_at"`
	StartedAt       *time.Time `json:"started_at,omitempty"`
	EndedAt         time.Time  `json:"ended_at"`
	DurationSeconds float64    `json:"duration_seconds"`
}

// completed writes run.completed for r, ending now in state, inside tx.
func (s *Store) completed(tx *gorm.DB, r Run, state State, reason string, arts []Artifact, cost float64, now time.Time) error {
	if s.outbox == nil {
		return nil
	}
	r.EndedAt = &now
	return s.outbox.Add(tx, r.TenantID, EventCompleted, CompletedEvent{RunID: r.ID, Workflow: r.Workflow, WorkflowVersion: r.WorkflowVersion,
		Number: r.Number, State: state, Reason: truncate(reason, 500), Trigger: r.Trigger(), SandboxID: r.SandboxID, Artifacts: arts,
		Cost: cost, CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, EndedAt: now, DurationSeconds: r.Duration(now).Seconds()})
}
