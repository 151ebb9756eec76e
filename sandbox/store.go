package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtime"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/usage"
)

// Store is the GORM store of sandboxes, their events and their commands.
// Every tenant-owned read takes the tenant: another tenant's sandbox is
// errdefs.ErrNotFound. State changes write their event row (and audit event,
// if any) in the same transaction.
type Store struct {
	db    *gorm.DB
	clock dbtime.Clock
	// outbox, when set, gets the lifecycle events of the changes
	// (lifecycle.go), in their transactions.
	outbox Outbox
}

// NewStore returns a Store on db (opened and migrated by tenants.Open and
// tenants.Migrate). A nil clock means time.Now.
func NewStore(db *gorm.DB, clock func() time.Time) *Store {
	return &Store{db: db, clock: clock}
}

// now is the store's time as the database keeps it.
func (s *Store) now() time.Time { return s.clock.Now() }

func (s *Store) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return s.db.WithContext(ctx).Transaction(fn)
}

func notFound(err error) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return errdefs.ErrNotFound
	}
	return err
}

func newID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

// heldBy sums the tenant's active sandboxes inside tx.
func heldBy(tx *gorm.DB, tenantID string) (tenants.Usage, error) {
	var row struct {
		N      int `gorm:"column:n"`
		VCPUs  int `gorm:"column:vcpus"`
		Memory int `gorm:"column:memory"`
	}
	err := tx.Model(&Sandbox{}).Select("COUNT(*) AS n, COALESCE(SUM(vcpus), 0) AS vcpus, COALESCE(SUM(memory_mib), 0) AS memory").
		Where("tenant_id = ? AND state IN ?", tenantID, activeStates()).Scan(&row).Error
	if err != nil {
		return tenants.Usage{}, err
	}
	return tenants.Usage{Sandboxes: row.N, VCPUs: row.VCPUs, MemoryMiB: row.Memory}, nil
}

// create records a new sandbox in state creating after checking, in the same
// transaction, the tenant quota against every active sandbox of the tenant:
// concurrent sandboxes, and their vCPUs and memory (sandbox allocations are
// checked on their own, apart from the VMs that hold them), and the CPU time
// the tenant used this month. It writes the
// first event and the audit event sandbox.created. Nothing is written when
// the check fails.
func (s *Store) create(ctx context.Context, actor audit.Actor, sb *Sandbox) error {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		q, err := tenants.LockQuota(tx, sb.TenantID, s.now())
		if err != nil {
			return err
		}
		u, err := heldBy(tx, sb.TenantID)
		if err != nil {
			return err
		}
		u.Sandboxes++
		u.VCPUs += sb.VCPUs
		u.MemoryMiB += sb.MemoryMiB
		if err := q.Check(u); err != nil {
			return err
		}
		now := s.now()
		cpu, err := usage.CPUSecondsSince(tx, sb.TenantID, usage.MonthStart(now))
		if err != nil {
			return err
		}
		if err := q.CheckCPUHours(cpu); err != nil {
			return err
		}
		sb.State, sb.StateReason, sb.CreatedAt = StateCreating, ReasonRequested, now
		sb.ExpiresAt = now.Add(time.Duration(sb.TimeoutSeconds) * time.Second)
		if err := tx.Create(sb).Error; err != nil {
			return err
		}
		if err := s.event(tx, sb, actorName(actor), now); err != nil {
			return err
		}
		if err := s.announce(tx, *sb); err != nil {
			return err
		}
		return s.audit(tx, actor.Event(sb.TenantID, audit.TypeSandboxCreated, "sandbox", sb.ID, map[string]any{
			"template": sb.Template, "template_version": sb.TemplateVersion, "vcpus": sb.VCPUs, "memory_mib": sb.MemoryMiB,
			"timeout_seconds": sb.TimeoutSeconds, "idle_timeout_seconds": sb.IdleTimeoutSeconds,
			"env_keys": sb.EnvKeys(), "metadata": sb.Metadata(), "policy_version": sb.PolicyVersion,
		}))
	})
	if err != nil {
		return fmt.Errorf("create sandbox in tenant %s: %w", sb.TenantID, err)
	}
	return nil
}

func actorName(a audit.Actor) string {
	if a.Name != "" {
		return a.Name
	}
	return a.ID
}

func (s *Store) event(tx *gorm.DB, sb *Sandbox, actor string, at time.Time) error {
	id, err := newID()
	if err != nil {
		return err
	}
	return tx.Create(&Event{ID: id, SandboxID: sb.ID, TenantID: sb.TenantID, State: sb.State, Reason: truncate(sb.StateReason, 500),
		Actor: actor, At: at}).Error
}

func (s *Store) audit(tx *gorm.DB, e audit.Event) error {
	e.Time = s.now()
	return audit.Write(tx, e)
}

// Sandbox returns the tenant's sandbox with that id.
func (s *Store) Sandbox(ctx context.Context, tenantID, id string) (Sandbox, error) {
	var sb Sandbox
	if err := s.db.WithContext(ctx).Take(&sb, "tenant_id = ? AND id = ?", tenantID, id).Error; err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: %w", id, notFound(err))
	}
	return sb, nil
}

// byID reads a sandbox whatever its tenant: for the background loops, which
// learn ids from the agents and the database and check the tenant themselves.
func (s *Store) byID(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	if err := s.db.WithContext(ctx).Take(&sb, "id = ?", id).Error; err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: %w", id, notFound(err))
	}
	return sb, nil
}

// listLimit bounds the ended sandboxes a list shows; active ones are always
// shown.
const listLimit = 200

// Sandboxes returns the tenant's active sandboxes and its most recently
// ended ones, newest first.
func (s *Store) Sandboxes(ctx context.Context, tenantID string) ([]Sandbox, error) {
	q := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID)
	var active, ended []Sandbox
	if err := q.Session(&gorm.Session{}).Where("state IN ?", activeStates()).Order("id DESC").Find(&active).Error; err != nil {
		return nil, fmt.Errorf("list sandboxes of tenant %s: %w", tenantID, err)
	}
	if err := q.Session(&gorm.Session{}).Where("state NOT IN ?", activeStates()).Order("id DESC").Limit(listLimit).Find(&ended).Error; err != nil {
		return nil, fmt.Errorf("list sandboxes of tenant %s: %w", tenantID, err)
	}
	return append(active, ended...), nil
}

// ByIdempotencyKey returns the newest sandbox of the tenant that createdBy
// made with the Idempotency-Key key.
func (s *Store) ByIdempotencyKey(ctx context.Context, tenantID, createdBy, key string) (Sandbox, error) {
	var sb Sandbox
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND created_by = ? AND idempotency_key = ?", tenantID, createdBy, key).
		Order("id DESC").Take(&sb).Error
	if err != nil {
		return Sandbox{}, fmt.Errorf("sandbox of idempotency key: %w", notFound(err))
	}
	return sb, nil
}

// WithIdempotencyKey returns the tenant's sandboxes created with the
// Idempotency-Key key, newest first.
func (s *Store) WithIdempotencyKey(ctx context.Context, tenantID, key string) ([]Sandbox, error) {
	var out []Sandbox
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND idempotency_key = ?", tenantID, key).Order("id DESC").Limit(listLimit).Find(&out).Error
	if err != nil {
		return nil, fmt.Errorf("sandboxes of idempotency key: %w", err)
	}
	return out, nil
}

// Events returns the state changes of the tenant's sandbox, oldest first.
func (s *Store) Events(ctx context.Context, tenantID, id string) ([]Event, error) {
	var out []Event
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND sandbox_id = ?", tenantID, id).Order("at, id").Find(&out).Error
	if err != nil {
		return nil, fmt.Errorf("events of sandbox %s: %w", id, err)
	}
	return out, nil
}

// execListLimit bounds the commands a sandbox page shows.
const execListLimit = 500

// Execs returns the commands run in the tenant's sandbox, newest first.
func (s *Store) Execs(ctx context.Context, tenantID, id string) ([]ExecRecord, error) {
	var out []ExecRecord
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND sandbox_id = ?", tenantID, id).
		Order("started_at DESC, id DESC").Limit(execListLimit).Find(&out).Error
	if err != nil {
		return nil, fmt.Errorf("commands of sandbox %s: %w", id, err)
	}
	return out, nil
}

// active returns every active sandbox of every tenant, for the background
// loops.
func (s *Store) active(ctx context.Context) ([]Sandbox, error) {
	var out []Sandbox
	if err := s.db.WithContext(ctx).Where("state IN ? OR state = ?", activeStates(), StateStopped).Order("id").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("active sandboxes: %w", err)
	}
	return out, nil
}

// vmLoad is what a VM holds in sandboxes.
type vmLoad struct {
	VMID      string
	Sandboxes int
	VCPUs     int
	MemoryMiB int
}

// loadByVM sums the tenant's active, placed sandboxes per VM.
func (s *Store) loadByVM(ctx context.Context, tenantID string) (map[string]vmLoad, error) {
	var rows []struct {
		VMID   string `gorm:"column:vm_id"`
		N      int    `gorm:"column:n"`
		VCPUs  int    `gorm:"column:vcpus"`
		Memory int    `gorm:"column:memory"`
	}
	err := s.db.WithContext(ctx).Model(&Sandbox{}).
		Select("vm_id, COUNT(*) AS n, COALESCE(SUM(vcpus), 0) AS vcpus, COALESCE(SUM(memory_mib), 0) AS memory").
		Where("tenant_id = ? AND state IN ? AND vm_id <> ''", tenantID, activeStates()).Group("vm_id").Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("sandboxes per vm of tenant %s: %w", tenantID, err)
	}
	out := make(map[string]vmLoad, len(rows))
	for _, r := range rows {
		out[r.VMID] = vmLoad{VMID: r.VMID, Sandboxes: r.N, VCPUs: r.VCPUs, MemoryMiB: r.Memory}
	}
	return out, nil
}

// activeSandboxes returns the tenant's active sandboxes (being created or
// running, placed or not), oldest first, in one read.
func (s *Store) activeSandboxes(ctx context.Context, tenantID string) ([]Sandbox, error) {
	var out []Sandbox
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND state IN ?", tenantID, activeStates()).Order("id").Find(&out).Error
	if err != nil {
		return nil, fmt.Errorf("active sandboxes of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// place records the VM a creating sandbox goes to.
func (s *Store) place(ctx context.Context, id, vmID string) error {
	res := s.db.WithContext(ctx).Model(&Sandbox{}).Where("id = ? AND state = ?", id, StateCreating).Update("vm_id", vmID)
	if res.Error != nil {
		return fmt.Errorf("place sandbox %s on vm %s: %w", id, vmID, res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("place sandbox %s: %w: it is no longer being created", id, errdefs.ErrConflict)
	}
	return nil
}

// change is one conditional state change.
type change struct {
	From   []State
	To     State
	Reason string
	Actor  string       // for the event row
	Audit  *audit.Event // written with the change, if not nil
	// Set are further columns to update with it.
	Set map[string]any
	// Final is the sandbox's last cgroup sample, when its agent gave one:
	// the usage meter accounts it as the sandbox ends.
	Final *agentproto.SandboxStats
	// End is when the sandbox stopped holding its allocation, when known
	// better than the moment of this change; a zero time means "when it
	// was last seen" (its VM vanished). Nil: the moment of this change.
	End *time.Time
}

// transition moves a sandbox from one of c.From to c.To, with its event row
// and audit event, only if it is still in one of c.From: of two racing
// observers of one change exactly one records it. changed says whether this
// call did.
func (s *Store) transition(ctx context.Context, id string, c change) (Sandbox, bool, error) {
	var (
		sb      Sandbox
		changed bool
	)
	err := s.tx(ctx, func(tx *gorm.DB) error {
		now := s.now()
		set := map[string]any{"state": c.To, "state_reason": truncate(c.Reason, 500)}
		if !c.To.Active() {
			set["ended_at"] = now
		}
		if c.To == StateRunning {
			set["started_at"] = now
			set["last_active_at"] = now
		}
		for k, v := range c.Set {
			set[k] = v
		}
		res := tx.Model(&Sandbox{}).Where("id = ? AND state IN ?", id, c.From).Updates(set)
		if res.Error != nil {
			return res.Error
		}
		if err := tx.Take(&sb, "id = ?", id).Error; err != nil {
			return notFound(err)
		}
		if res.RowsAffected == 0 {
			return nil
		}
		changed = true
		if err := s.event(tx, &sb, c.Actor, now); err != nil {
			return err
		}
		if err := meter(tx, sb, c, now); err != nil {
			return err
		}
		if err := s.announce(tx, sb); err != nil {
			return err
		}
		if c.Audit != nil {
			if c.Audit.Details == nil {
				c.Audit.Details = map[string]any{}
			}
			c.Audit.Details["state"] = string(c.To)
			c.Audit.Details["reason"] = c.Reason
			return s.audit(tx, *c.Audit)
		}
		return nil
	})
	if err != nil {
		return Sandbox{}, false, fmt.Errorf("sandbox %s -> %s: %w", id, c.To, err)
	}
	return sb, changed, nil
}

// meter keeps the sandbox's usage meter in step with a change: opened when
// it starts running, closed with its final sample when it stops holding
// resources. A sandbox that never ran has no meter and nothing to close.
func meter(tx *gorm.DB, sb Sandbox, c change, now time.Time) error {
	if c.To == StateRunning {
		return usage.Open(tx, meterOf(sb, now))
	}
	if c.To.Active() {
		return nil
	}
	end := now
	if c.End != nil {
		end = *c.End
	}
	_, err := usage.Observe(tx, sb.ID, sampleOf(c.Final, now), &end)
	if errors.Is(err, usage.ErrNoMeter) {
		return nil
	}
	return err
}

func meterOf(sb Sandbox, started time.Time) usage.Meter {
	return usage.Meter{SandboxID: sb.ID, TenantID: sb.TenantID, Template: sb.Template, UserID: sb.CreatedBy,
		UserName: sb.CreatedByName, VCPUs: sb.VCPUs, MemoryMiB: sb.MemoryMiB, StartedAt: started}
}

// sampleOf converts an agent's stats into a usage sample (nil for nil).
// The agent's unsigned counters are capped at math.MaxInt64 (never wrapped
// negative); usage.Observe holds them to what is possible.
func sampleOf(st *agentproto.SandboxStats, at time.Time) *usage.Sample {
	if st == nil {
		return nil
	}
	return &usage.Sample{At: at, CPUNS: max(int64(st.CPUUsage), 0), MemoryCurrentBytes: i64(st.MemoryCurrent),
		MemoryPeakBytes: i64(st.MemoryPeak), Pids: int(min(st.Pids, math.MaxInt32)), IOReadBytes: i64(st.IOReadBytes), IOWriteBytes: i64(st.IOWriteBytes)}
}

func i64(v uint64) int64 { return int64(min(v, math.MaxInt64)) }

// startExec records a command about to run (and audits it as
// sandbox.exec with its command line) in one transaction.
func (s *Store) startExec(ctx context.Context, actor audit.Actor, sb Sandbox, req ExecRequest) (ExecRecord, error) {
	id, err := newID()
	if err != nil {
		return ExecRecord{}, err
	}
	argv, err := json.Marshal(req.Cmd)
	if err != nil {
		return ExecRecord{}, err
	}
	rec := ExecRecord{ID: id, SandboxID: sb.ID, TenantID: sb.TenantID, ArgvJSON: string(argv), Cwd: req.Cwd,
		Actor: actorName(actor), StartedAt: s.now()}
	err = s.tx(ctx, func(tx *gorm.DB) error {
		if err := tx.Create(&rec).Error; err != nil {
			return err
		}
		if err := tx.Model(&Sandbox{}).Where("id = ?", sb.ID).
			Updates(map[string]any{"execs": gorm.Expr("execs + 1"), "last_active_at": rec.StartedAt}).Error; err != nil {
			return err
		}
		return s.audit(tx, actor.Event(sb.TenantID, audit.TypeSandboxExec, "sandbox", sb.ID, map[string]any{
			"exec_id": rec.ID, "cmd": req.Cmd, "cwd": req.Cwd, "env_keys": sortedKeys(req.Env),
			"timeout_seconds": req.TimeoutSeconds, "stdin_bytes": len(req.Stdin),
		}))
	})
	if err != nil {
		return ExecRecord{}, fmt.Errorf("record command in sandbox %s: %w", sb.ID, err)
	}
	return rec, nil
}

// finishExec records how a command ended.
func (s *Store) finishExec(ctx context.Context, rec *ExecRecord) error {
	now := s.now()
	rec.EndedAt = &now
	err := s.db.WithContext(ctx).Model(&ExecRecord{}).Where("id = ?", rec.ID).Updates(map[string]any{
		"ended_at": now, "exit_code": rec.ExitCode, "reason": rec.Reason, "duration_ms": rec.DurationMS,
		"stdout": rec.Stdout, "stderr": rec.Stderr, "stdout_bytes": rec.StdoutBytes, "stderr_bytes": rec.StderrBytes,
		"truncated": rec.Truncated,
	}).Error
	if err != nil {
		return fmt.Errorf("record end of command %s: %w", rec.ID, err)
	}
	return s.touch(ctx, rec.SandboxID)
}

// touch records activity in a sandbox (a command ended, a file moved).
func (s *Store) touch(ctx context.Context, id string) error {
	if err := s.db.WithContext(ctx).Model(&Sandbox{}).Where("id = ?", id).Update("last_active_at", s.now()).Error; err != nil {
		return fmt.Errorf("touch sandbox %s: %w", id, err)
	}
	return nil
}

// record writes one audit event on its own.
func (s *Store) record(ctx context.Context, e audit.Event) error {
	return s.tx(ctx, func(tx *gorm.DB) error { return s.audit(tx, e) })
}

// activeOnVM counts the active sandboxes placed on a VM.
func (s *Store) activeOnVM(ctx context.Context, vmID string) (int64, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&Sandbox{}).Where("vm_id = ? AND state IN ?", vmID, activeStates()).Count(&n).Error
	if err != nil {
		return 0, fmt.Errorf("sandboxes on vm %s: %w", vmID, err)
	}
	return n, nil
}

// openExecs returns the records of the sandboxes' commands that have no end
// yet and started before the given time.
func (s *Store) openExecs(ctx context.Context, sandboxIDs []string, before time.Time) ([]ExecRecord, error) {
	if len(sandboxIDs) == 0 {
		return nil, nil
	}
	var out []ExecRecord
	err := s.db.WithContext(ctx).Where("sandbox_id IN ? AND ended_at IS NULL AND started_at < ?", sandboxIDs, before).
		Order("started_at").Find(&out).Error
	if err != nil {
		return nil, fmt.Errorf("open commands: %w", err)
	}
	return out, nil
}

// closeExec ends a command record this process does not serve (one that
// was lost, or ended while no server watched it), unless it has an end
// already. It reports whether it did.
func (s *Store) closeExec(ctx context.Context, rec ExecRecord, exitCode *int, reason string, duration time.Duration) (bool, error) {
	now := s.now()
	if duration <= 0 {
		duration = now.Sub(rec.StartedAt)
	}
	res := s.db.WithContext(ctx).Model(&ExecRecord{}).Where("id = ? AND ended_at IS NULL", rec.ID).Updates(map[string]any{
		"ended_at": now, "exit_code": exitCode, "reason": reason, "duration_ms": duration.Milliseconds(),
	})
	if res.Error != nil {
		return false, fmt.Errorf("close command %s: %w", rec.ID, res.Error)
	}
	return res.RowsAffected == 1, nil
}

// closeExecsOfEnded ends the open command records of sandboxes that are no
// longer running (their processes died with them) with the reason, except
// those this process serves (skip).
func (s *Store) closeExecsOfEnded(ctx context.Context, reason string, skip []string) (int64, error) {
	q := s.db.WithContext(ctx).Model(&ExecRecord{}).Where("ended_at IS NULL AND sandbox_id IN (?)",
		s.db.Model(&Sandbox{}).Select("id").Where("state NOT IN ?", []State{StateCreating, StateRunning}))
	if len(skip) > 0 {
		q = q.Where("id NOT IN ?", skip)
	}
	res := q.Updates(map[string]any{"ended_at": s.now(), "reason": reason})
	if res.Error != nil {
		return 0, fmt.Errorf("close commands of ended sandboxes: %w", res.Error)
	}
	return res.RowsAffected, nil
}
