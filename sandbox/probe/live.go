package probe

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/compliance"
)

// Live reads what the checklist needs from the sandbox, terminal, VM and
// egress records. It implements compliance.Live.
type Live struct {
	db    *gorm.DB
	store *sandbox.Store
	clock func() time.Time
}

// NewLiveOn returns a Live reading sandboxes from store and the terminal,
// VM and egress records from db. A nil clock means time.Now.
func NewLiveOn(db *gorm.DB, store *sandbox.Store, clock func() time.Time) *Live {
	if clock == nil {
		clock = time.Now
	}
	return &Live{db: db, store: store, clock: clock}
}

// NewLive returns a Live on db, building its own sandbox store.
//
// Deprecated: kept for tests; the composition root passes its sandbox
// store to NewLiveOn.
func NewLive(db *gorm.DB, clock func() time.Time) *Live {
	if clock == nil {
		clock = time.Now
	}
	return NewLiveOn(db, sandbox.NewStore(db, clock), clock)
}

// maxRefs bounds the sandboxes listed as overdue or lingering.
const maxRefs = 20

func ref(sb sandbox.Sandbox) compliance.SandboxRef {
	return compliance.SandboxRef{ID: sb.ID, State: string(sb.State), Reason: sb.StateReason, ExpiresAt: sb.ExpiresAt, EndedAt: sb.EndedAt}
}

// Facts counts the tenant's sandboxes, commands, terminal sessions, VMs
// and egress denials since since, and lists sandboxes running past their
// lifetime, or left stopped, by more than grace.
func (l *Live) Facts(ctx context.Context, tenantID string, since time.Time, grace time.Duration) (compliance.Facts, error) {
	now := l.clock().UTC()
	f := compliance.Facts{Since: since.UTC()}
	db := l.db.WithContext(ctx)
	count := func(model any, where string, args ...any) (int, error) {
		var n int64
		err := db.Model(model).Where("tenant_id = ?", tenantID).Where(where, args...).Count(&n).Error
		return int(n), err
	}
	var err error
	fail := func(what string, err error) (compliance.Facts, error) {
		return compliance.Facts{}, fmt.Errorf("compliance facts of tenant %s: %s: %w", tenantID, what, err)
	}
	if f.Active, err = count(&sandbox.Sandbox{}, "state IN ?", []string{string(sandbox.StateCreating), string(sandbox.StateRunning)}); err != nil {
		return fail("active sandboxes", err)
	}
	var rows []sandbox.Sandbox
	if err := db.Where("tenant_id = ? AND state = ? AND expires_at < ?", tenantID, sandbox.StateRunning, now.Add(-grace)).
		Order("expires_at").Limit(maxRefs).Find(&rows).Error; err != nil {
		return fail("overdue sandboxes", err)
	}
	for _, sb := range rows {
		f.Overdue = append(f.Overdue, ref(sb))
	}
	rows = nil
	stoppedBefore := db.Model(&sandbox.Event{}).Select("sandbox_id").Where("tenant_id = ? AND state = ? AND at < ?", tenantID, sandbox.StateStopped, now.Add(-grace))
	if err := db.Where("tenant_id = ? AND state = ? AND id IN (?)", tenantID, sandbox.StateStopped, stoppedBefore).
		Limit(maxRefs).Find(&rows).Error; err != nil {
		return fail("stopped sandboxes", err)
	}
	for _, sb := range rows {
		f.Lingering = append(f.Lingering, ref(sb))
	}
	if f.Ended, err = count(&sandbox.Sandbox{}, "state IN ? AND ended_at >= ?", []string{string(sandbox.StateDestroyed), string(sandbox.StateFailed)}, since); err != nil {
		return fail("ended sandboxes", err)
	}
	if f.Destroyed, err = count(&sandbox.Sandbox{}, "state = ? AND ended_at >= ?", sandbox.StateDestroyed, since); err != nil {
		return fail("destroyed sandboxes", err)
	}
	if f.Execs, err = count(&sandbox.ExecRecord{}, "started_at >= ?", since); err != nil {
		return fail("commands", err)
	}
	if f.Sessions, err = count(&terminal.Session{}, "started_at >= ?", since); err != nil {
		return fail("terminal sessions", err)
	}
	if f.Recorded, err = count(&terminal.Session{}, "started_at >= ? AND recording <> ''", since); err != nil {
		return fail("terminal recordings", err)
	}
	if f.Unrecorded, err = count(&terminal.Session{}, "started_at >= ? AND recording = '' AND purged_at IS NULL", since); err != nil {
		return fail("terminal recordings", err)
	}
	var last []terminal.Session
	if err := db.Where("tenant_id = ? AND recording <> ''", tenantID).Order("started_at DESC").Limit(1).Find(&last).Error; err != nil {
		return fail("newest recording", err)
	}
	if len(last) == 1 {
		f.LastRecording = last[0].ID
	}
	if f.RunningVMs, err = count(&vmpool.VM{}, "state = ?", vmpool.StateRunning); err != nil {
		return fail("vms", err)
	}
	if f.EgressDenied, err = count(&egress.Event{}, "decision = ? AND started_at >= ?", egress.DecisionDeny, since); err != nil {
		return fail("egress denials", err)
	}
	return f, nil
}

// Sandbox is one sandbox of the tenant; another tenant's is
// errdefs.ErrNotFound.
func (l *Live) Sandbox(ctx context.Context, tenantID, id string) (compliance.SandboxRef, error) {
	sb, err := l.store.Sandbox(ctx, tenantID, id)
	if err != nil {
		return compliance.SandboxRef{}, err
	}
	return ref(sb), nil
}
