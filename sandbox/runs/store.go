package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stockade-dev/stockade/tenants/clip"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtime"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// ErrDuplicateDelivery: the tenant already accepted a GitHub delivery with
// this id, or with this body; nothing was started again.
var ErrDuplicateDelivery = errors.New("duplicate delivery")

// Store keeps runs, their steps and GitHub deliveries. Every method takes
// the tenant: another tenant's run is errdefs.ErrNotFound.
type Store struct {
	db    *gorm.DB
	clock dbtime.Clock
	// outbox, when set, gets run.completed in the transaction ending a run
	// (outbox.go).
	outbox Outbox
}

// NewStore returns a Store on db (opened and migrated). A nil clock means
// time.Now.
func NewStore(db *gorm.DB, clock func() time.Time) *Store {
	return &Store{db: db, clock: clock}
}

// NewRun is a run to create: the workflow version it runs and what
// triggered it.
type NewRun struct {
	Version workflow.Version
	Trigger Trigger
	// RerunOf is the run this one repeats, if any.
	RerunOf string
}

// numberTries bounds the retries when two runs of a workflow race for the
// same number.
const numberTries = 5

// Create records a queued run of the tenant with its steps pending,
// audited workflow.run_created in the same transaction.
func (s *Store) Create(ctx context.Context, actor audit.Actor, tenantID string, nr NewRun) (Run, error) {
	var out Run
	err := s.retry(ctx, func(tx *gorm.DB) error {
		r, err := s.create(tx, actor, tenantID, nr)
		out = r
		return err
	})
	if err != nil {
		return Run{}, fmt.Errorf("create run of workflow %s: %w", nr.Version.Name, err)
	}
	return out, nil
}

// Deliver records a GitHub delivery of the tenant and the runs it starts,
// in one transaction: a delivery id or a body digest (d.BodySHA256) seen
// before is ErrDuplicateDelivery and creates nothing. A run whose trigger
// is TrustSkipped is recorded as ended, skipped: the caller must not start
// it.
func (s *Store) Deliver(ctx context.Context, actor audit.Actor, tenantID string, d Delivery, nrs []NewRun) ([]Run, error) {
	var out []Run
	d.TenantID, d.ReceivedAt, d.Runs = tenantID, s.clock.Now(), len(nrs)
	err := s.retry(ctx, func(tx *gorm.DB) error {
		out = out[:0]
		if err := tx.Create(&d).Error; err != nil {
			if errors.Is(err, gorm.ErrDuplicatedKey) {
				return ErrDuplicateDelivery
			}
			return err
		}
		for _, nr := range nrs {
			nr.Trigger.DeliveryID = d.DeliveryID
			r, err := s.create(tx, actor, tenantID, nr)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record delivery %s: %w", d.DeliveryID, err)
	}
	return out, nil
}

// retry runs fn in a transaction, again when a run number was taken by a
// concurrent create (the unique index refused it).
func (s *Store) retry(ctx context.Context, fn func(tx *gorm.DB) error) error {
	var err error
	for range numberTries {
		err = s.db.WithContext(ctx).Transaction(fn)
		if !errors.Is(err, errNumberTaken) {
			return err
		}
	}
	return fmt.Errorf("%w: too many runs started at once; retry", errdefs.ErrConflict)
}

var errNumberTaken = errors.New("run number taken")

func (s *Store) create(tx *gorm.DB, actor audit.Actor, tenantID string, nr NewRun) (Run, error) {
	v := nr.Version
	if v.TenantID != tenantID || v.Deleted || len(v.Def.Steps) == 0 {
		return Run{}, fmt.Errorf("workflow %s: %w", v.Name, errdefs.ErrNotFound)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Run{}, err
	}
	var next int
	if err := tx.Raw("SELECT COALESCE(MAX(number), 0) + 1 FROM workflow_runs WHERE tenant_id = ? AND workflow = ?", tenantID, v.Name).
		Scan(&next).Error; err != nil {
		return Run{}, err
	}
	t := nr.Trigger
	if t.Trust == "" {
		t.Trust = workflow.TrustTrusted
	}
	r := Run{ID: id.String(), TenantID: tenantID, Workflow: v.Name, WorkflowVersion: v.Version, Number: next, State: StateQueued,
		TriggerKind: t.Kind, DeliveryID: t.DeliveryID, Repository: t.Repository, Ref: t.Ref, SHA: t.SHA, PRNumber: t.PRNumber,
		Sender: t.Sender, Trust: t.Trust, TrustReason: truncate(t.TrustReason, 500), CreatedBy: actorName(actor), RerunOf: nr.RerunOf,
		ArtifactsJSON: "[]", CreatedAt: s.clock.Now()}
	stepState := StepPending
	if t.Trust == workflow.TrustSkipped {
		// Nothing runs: the run is there to say why.
		ended := r.CreatedAt
		r.State, r.StateReason, r.EndedAt, stepState = StateSkipped, r.TrustReason, &ended, StepSkipped
	}
	if err := tx.Create(&r).Error; err != nil {
		if errors.Is(err, gorm.ErrDuplicatedKey) {
			return Run{}, errNumberTaken
		}
		return Run{}, err
	}
	steps := make([]Step, 0, len(v.Def.Steps))
	for i, st := range v.Def.Steps {
		steps = append(steps, Step{RunID: r.ID, TenantID: tenantID, Index: i, Name: st.Name, State: stepState})
	}
	if err := tx.Create(&steps).Error; err != nil {
		return Run{}, err
	}
	e := actor.Event(tenantID, audit.TypeWorkflowRunCreated, "workflow_run", r.ID, map[string]any{
		"workflow": v.Name, "version": v.Version, "number": r.Number, "trigger": t.Kind, "delivery_id": t.DeliveryID,
		"repository": t.Repository, "ref": t.Ref, "sha": t.SHA, "rerun_of": nr.RerunOf, "trust": t.Trust, "trust_reason": r.TrustReason,
	})
	e.Time = r.CreatedAt
	if err := audit.Write(tx, e); err != nil {
		return Run{}, err
	}
	return r, nil
}

func actorName(a audit.Actor) string {
	if a.Name != "" {
		return a.Name
	}
	return a.ID
}

// Get returns the tenant's run with its steps in order.
func (s *Store) Get(ctx context.Context, tenantID, id string) (Run, []Step, error) {
	var r Run
	err := s.db.WithContext(ctx).Take(&r, "id = ? AND tenant_id = ?", id, tenantID).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Run{}, nil, fmt.Errorf("run %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return Run{}, nil, fmt.Errorf("read run %s: %w", id, err)
	}
	var steps []Step
	if err := s.db.WithContext(ctx).Where("run_id = ? AND tenant_id = ?", id, tenantID).Order("idx").Find(&steps).Error; err != nil {
		return Run{}, nil, fmt.Errorf("read steps of run %s: %w", id, err)
	}
	return r, steps, nil
}

// Filter narrows List.
type Filter struct {
	Workflow string
	State    State
	// Before pages: runs created before this run's id (uuid v7 ids sort
	// by creation).
	Before string
	Limit  int
}

// MaxList bounds one page of runs.
const MaxList = 200

// List returns the tenant's runs, newest first.
func (s *Store) List(ctx context.Context, tenantID string, f Filter) ([]Run, error) {
	if f.State != "" && !f.State.Valid() {
		return nil, errdefs.Invalid("state", "enum", "must be one of queued, running, succeeded, failed, cancelled, timed_out, skipped")
	}
	if f.Limit <= 0 || f.Limit > MaxList {
		f.Limit = MaxList
	}
	q := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID)
	if f.Workflow != "" {
		q = q.Where("workflow = ?", f.Workflow)
	}
	if f.State != "" {
		q = q.Where("state = ?", f.State)
	}
	if f.Before != "" {
		q = q.Where("id < ?", f.Before)
	}
	var out []Run
	if err := q.Order("id DESC").Limit(f.Limit).Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list runs of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// start moves a queued run to running. A run no longer queued (cancelled
// meanwhile) is errdefs.ErrConflict.
func (s *Store) start(ctx context.Context, r *Run) error {
	now := s.clock.Now()
	res := s.db.WithContext(ctx).Model(&Run{}).Where("id = ? AND tenant_id = ? AND state = ?", r.ID, r.TenantID, StateQueued).
		Updates(map[string]any{"state": StateRunning, "started_at": now, "owner_replica": r.OwnerReplica})
	if res.Error != nil {
		return fmt.Errorf("start run %s: %w", r.ID, res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("start run %s: %w: it is no longer queued", r.ID, errdefs.ErrConflict)
	}
	r.State, r.StartedAt = StateRunning, &now
	return nil
}

// setSandbox records the run's sandbox as soon as it exists.
func (s *Store) setSandbox(ctx context.Context, r *Run, sandboxID string) error {
	r.SandboxID = sandboxID
	return s.db.WithContext(ctx).Model(&Run{}).Where("id = ? AND tenant_id = ?", r.ID, r.TenantID).
		Update("sandbox_id", sandboxID).Error
}

// saveStep writes a step's progress.
func (s *Store) saveStep(ctx context.Context, st *Step) error {
	err := s.db.WithContext(ctx).Model(&Step{}).Where("run_id = ? AND idx = ? AND tenant_id = ?", st.RunID, st.Index, st.TenantID).
		Updates(map[string]any{"state": st.State, "exit_code": st.ExitCode, "duration_ms": st.DurationMS, "output": st.Output,
			"truncated": st.Truncated, "started_at": st.StartedAt, "ended_at": st.EndedAt}).Error
	if err != nil {
		return fmt.Errorf("record step %d of run %s: %w", st.Index, st.RunID, err)
	}
	return nil
}

// finish ends a run that has not ended: steps still pending or running
// become skipped. An ended run is left as it is (errdefs.ErrConflict).
func (s *Store) finish(ctx context.Context, r *Run, state State, reason string, artifacts []Artifact, cost float64) error {
	if artifacts == nil {
		artifacts = []Artifact{}
	}
	raw, err := json.Marshal(artifacts)
	if err != nil {
		return err
	}
	now := s.clock.Now()
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&Run{}).Where("id = ? AND tenant_id = ? AND state IN ?", r.ID, r.TenantID, []State{StateQueued, StateRunning}).
			Updates(map[string]any{"state": state, "state_reason": truncate(reason, 500), "artifacts": string(raw), "cost": cost, "ended_at": now})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("%w: run %s already ended", errdefs.ErrConflict, r.ID)
		}
		if err := s.completed(tx, *r, state, reason, artifacts, cost, now); err != nil {
			return err
		}
		return tx.Model(&Step{}).Where("run_id = ? AND tenant_id = ? AND state IN ?", r.ID, r.TenantID, []string{StepPending, StepRunning}).
			Update("state", StepSkipped).Error
	})
	if err != nil {
		return fmt.Errorf("finish run %s: %w", r.ID, err)
	}
	r.State, r.StateReason, r.ArtifactsJSON, r.Cost, r.EndedAt = state, truncate(reason, 500), string(raw), cost, &now
	return nil
}

// Cancel ends a queued run as cancelled, audited workflow.run_cancelled. A
// running run is the engine's to cancel (Engine.Cancel); an ended one is
// errdefs.ErrConflict.
func (s *Store) cancelQueued(ctx context.Context, actor audit.Actor, tenantID, id string) (Run, error) {
	r, _, err := s.Get(ctx, tenantID, id)
	if err != nil {
		return Run{}, err
	}
	if r.State != StateQueued {
		return Run{}, fmt.Errorf("%w: run %s is %s", errdefs.ErrConflict, id, r.State)
	}
	if err := s.finish(ctx, &r, StateCancelled, "cancelled by "+actorName(actor), nil, 0); err != nil {
		return Run{}, err
	}
	return r, s.auditCancel(ctx, actor, r)
}

func (s *Store) auditCancel(ctx context.Context, actor audit.Actor, r Run) error {
	e := actor.Event(r.TenantID, audit.TypeWorkflowRunCancelled, "workflow_run", r.ID, map[string]any{
		"workflow": r.Workflow, "number": r.Number, "state_was": string(r.State),
	})
	e.Time = s.clock.Now()
	return audit.Write(s.db.WithContext(ctx), e)
}

// Queued returns up to limit queued runs of every tenant, oldest first (the
// engine's backlog after a restart).
func (s *Store) Queued(ctx context.Context, limit int) ([]Run, error) {
	var out []Run
	if err := s.db.WithContext(ctx).Where("state = ?", StateQueued).Order("id").Limit(limit).Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list queued runs: %w", err)
	}
	return out, nil
}

// Interrupted ends every run left running by a control plane that stopped
// (its engine is gone: nothing will finish them) as failed, and returns
// them so their sandboxes can be destroyed.
func (s *Store) Interrupted(ctx context.Context) ([]Run, error) {
	return s.interruptedExcept(ctx, nil, "interrupted: the control plane restarted during the run")
}

// interruptedExcept ends failed, with reason, the running runs whose owner
// replica is not in live (a run without an owner is nobody's: always
// ended), and returns them.
func (s *Store) interruptedExcept(ctx context.Context, live map[string]bool, reason string) ([]Run, error) {
	var rs []Run
	if err := s.db.WithContext(ctx).Where("state = ?", StateRunning).Find(&rs).Error; err != nil {
		return nil, fmt.Errorf("list interrupted runs: %w", err)
	}
	out := rs[:0]
	for i := range rs {
		if rs[i].OwnerReplica != "" && live[rs[i].OwnerReplica] {
			continue
		}
		why := reason
		if rs[i].OwnerReplica != "" {
			why = fmt.Sprintf("%s (replica %s)", reason, rs[i].OwnerReplica)
		}
		if err := s.finish(ctx, &rs[i], StateFailed, why, nil, 0); err != nil {
			if errors.Is(err, errdefs.ErrConflict) {
				continue
			}
			return nil, err
		}
		out = append(out, rs[i])
	}
	return out, nil
}

// truncate bounds s for a column or a message (clip.String).
func truncate(s string, n int) string { return clip.String(s, n) }
