package vmpool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtime"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// QuotaPoolMaxVMs names the pool's own VM limit in a *errdefs.QuotaError.
const QuotaPoolMaxVMs = "pool.max_vms"

// Ranges of the pool settings.
const (
	MinVCPUs, MaxVCPUs         = 1, 16
	MinMemoryMiB, MaxMemoryMiB = 256, 65536
	MaxPoolVMs                 = 100
	MaxRecycleAfterHours       = 8760 // a year
)

// SystemActorID is the audit actor id of the pool's own decisions.
const SystemActorID = "vmpool"

// SystemActor is who the pool's own decisions (warm boots, recycling, lost
// VMs) are recorded as.
func SystemActor() audit.Actor {
	return audit.Actor{Kind: audit.ActorSystem, ID: SystemActorID, Name: "VM pool"}
}

// Store is the GORM store of pools, VMs and hosts. Every tenant-owned read
// and change takes the tenant: another tenant's VM is errdefs.ErrNotFound.
// Changes write their audit event in the same transaction.
type Store struct {
	db     *gorm.DB
	clock  dbtime.Clock
	leases Leases // claims new VMs in their create transaction (lease.go)
}

// NewStore returns a Store on db (opened and migrated by tenants.Open and
// tenants.Migrate). A nil clock means time.Now.
func NewStore(db *gorm.DB, clock func() time.Time) *Store {
	return &Store{db: db, clock: clock}
}

func (s *Store) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return s.db.WithContext(ctx).Transaction(fn)
}

func (s *Store) write(tx *gorm.DB, e audit.Event) error {
	e.Time = s.clock.Now()
	return audit.Write(tx, e)
}

func notFound(err error) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return errdefs.ErrNotFound
	}
	return err
}

// InstallationID is this deployment's id: it scopes every domain we touch.
func (s *Store) InstallationID(ctx context.Context) (string, error) {
	return tenants.NewStore(s.db, s.clock).InstallationID(ctx)
}

// Pool returns the tenant's pool settings, DefaultPool when none are saved.
func (s *Store) Pool(ctx context.Context, tenantID string) (Pool, error) {
	p, err := poolOf(s.db.WithContext(ctx), tenantID)
	if err != nil {
		return Pool{}, fmt.Errorf("pool of tenant %s: %w", tenantID, err)
	}
	return p, nil
}

func poolOf(tx *gorm.DB, tenantID string) (Pool, error) {
	var p Pool
	err := tx.Take(&p, "tenant_id = ?", tenantID).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return DefaultPool(tenantID), nil
	}
	return p, err
}

// Pools returns every saved pool.
func (s *Store) Pools(ctx context.Context) ([]Pool, error) {
	var out []Pool
	if err := s.db.WithContext(ctx).Order("tenant_id").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return out, nil
}

// Validate checks each setting's range: every field out of range, as
// joined *errdefs.FieldError in the settings' order.
func (in PoolSettings) Validate() error {
	var errs []error
	if in.VCPUs < MinVCPUs || in.VCPUs > MaxVCPUs {
		errs = append(errs, errdefs.Invalid("vcpus", "range", fmt.Sprintf("must be between %d and %d", MinVCPUs, MaxVCPUs)))
	}
	if in.MemoryMiB < MinMemoryMiB || in.MemoryMiB > MaxMemoryMiB {
		errs = append(errs, errdefs.Invalid("memory_mib", "range", fmt.Sprintf("must be between %d and %d MiB", MinMemoryMiB, MaxMemoryMiB)))
	}
	maxOK := in.MaxVMs >= 0 && in.MaxVMs <= MaxPoolVMs
	if !maxOK {
		errs = append(errs, errdefs.Invalid("max_vms", "range", fmt.Sprintf("must be between 0 and %d", MaxPoolVMs)))
	}
	if in.WarmVMs < 0 || (maxOK && in.WarmVMs > in.MaxVMs) || in.WarmVMs > MaxPoolVMs {
		errs = append(errs, errdefs.Invalid("warm_vms", "range", fmt.Sprintf("must be between 0 and max_vms (%d)", in.MaxVMs)))
	}
	if in.RecycleAfterHours < 0 || in.RecycleAfterHours > MaxRecycleAfterHours {
		errs = append(errs, errdefs.Invalid("recycle_after_hours", "range", fmt.Sprintf("must be between 0 (never) and %d", MaxRecycleAfterHours)))
	}
	return errors.Join(errs...)
}

// SetPool saves the tenant's pool settings. They are checked for range
// (*errdefs.FieldError) and, in the same transaction that writes them,
// against the tenant quota: a pool grown to max_vms must fit in it
// (*errdefs.QuotaError). VMs already running keep their size.
func (s *Store) SetPool(ctx context.Context, actor audit.Actor, tenantID string, in PoolSettings) (Pool, error) {
	if err := in.Validate(); err != nil {
		return Pool{}, err
	}
	var out Pool
	err := s.tx(ctx, func(tx *gorm.DB) error {
		q, err := tenants.LockQuota(tx, tenantID, s.clock.Now())
		if err != nil {
			return err
		}
		if err := q.Check(tenants.Usage{VMs: in.MaxVMs, VCPUs: in.MaxVMs * in.VCPUs, MemoryMiB: in.MaxVMs * in.MemoryMiB}); err != nil {
			return err
		}
		old, err := poolOf(tx, tenantID)
		if err != nil {
			return err
		}
		out = Pool{TenantID: tenantID, VCPUs: in.VCPUs, MemoryMiB: in.MemoryMiB, MaxVMs: in.MaxVMs, WarmVMs: in.WarmVMs,
			RecycleAfterHours: in.RecycleAfterHours, UpdatedAt: s.clock.Now(), UpdatedBy: actor.ID}
		if err := tx.Save(&out).Error; err != nil {
			return err
		}
		return s.write(tx, actor.Event(tenantID, audit.TypeVMPoolUpdated, "vm_pool", tenantID,
			map[string]any{"old": poolDetails(old.Settings()), "new": poolDetails(in)}))
	})
	if err != nil {
		return Pool{}, fmt.Errorf("set vm pool of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

func poolDetails(p PoolSettings) map[string]any {
	return map[string]any{"vcpus": p.VCPUs, "memory_mib": p.MemoryMiB, "max_vms": p.MaxVMs,
		"warm_vms": p.WarmVMs, "recycle_after_hours": p.RecycleAfterHours}
}

// NewVM says where a VM is to boot.
type NewVM struct {
	HostURI string
	// Live, when HostURI is "", are the hosts this process reaches: the
	// host is picked among them in the transaction (placeTx).
	Live         []string
	ImageVersion string
	// Replaces, when set, is a running VM of the same tenant that this one
	// recycles: it is moved to stopping in the same transaction and no longer
	// counts against the pool or the quota.
	Replaces string
}

// CreateVM records a new VM of the tenant's pool in state booting, after
// checking, in the same transaction, the pool's max_vms and the tenant quota
// against every active VM of the tenant. It writes vm.created (and
// vm.recycled for a replaced VM). Nothing is written when a check fails.
func (s *Store) CreateVM(ctx context.Context, actor audit.Actor, tenantID string, n NewVM) (VM, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return VM{}, fmt.Errorf("create vm: %w", err)
	}
	var vm VM
	err = s.tx(ctx, func(tx *gorm.DB) error {
		q, err := tenants.LockQuota(tx, tenantID, s.clock.Now())
		if err != nil {
			return err
		}
		pool, err := poolOf(tx, tenantID)
		if err != nil {
			return err
		}
		var active []VM
		if err := tx.Where("tenant_id = ? AND state IN ?", tenantID, activeStates()).Find(&active).Error; err != nil {
			return err
		}
		u := tenants.Usage{VMs: 1, VCPUs: pool.VCPUs, MemoryMiB: pool.MemoryMiB}
		replaced := false
		for _, a := range active {
			if a.ID == n.Replaces {
				if a.State != StateRunning {
					return fmt.Errorf("%w: vm %s is %s, only a running vm can be recycled", errdefs.ErrConflict, a.ID, a.State)
				}
				replaced = true
				continue
			}
			u.VMs++
			u.VCPUs += a.VCPUs
			u.MemoryMiB += a.MemoryMiB
		}
		if n.Replaces != "" && !replaced {
			return fmt.Errorf("vm %s: %w", n.Replaces, errdefs.ErrNotFound)
		}
		if u.VMs > pool.MaxVMs {
			return &errdefs.QuotaError{Quota: QuotaPoolMaxVMs, Limit: pool.MaxVMs, Want: u.VMs}
		}
		if err := q.Check(u); err != nil {
			return err
		}
		if n.HostURI == "" {
			if n.HostURI, err = placeTx(tx, tenantID, pool.MemoryMiB, n.Live); err != nil {
				return err
			}
		}
		now := s.clock.Now()
		if n.Replaces != "" {
			if _, _, err := s.transition(tx, n.Replaces, []State{StateRunning}, StateStopping, PhaseStopping, "recycled",
				eventPtr(actor.Event(tenantID, audit.TypeVMRecycled, "vm", n.Replaces,
					map[string]any{"replacement": id.String()}))); err != nil {
				return err
			}
		}
		vm = VM{ID: id.String(), TenantID: tenantID, HostURI: n.HostURI, State: StateBooting, Phase: PhaseQueued, PhaseAt: now,
			VCPUs: pool.VCPUs, MemoryMiB: pool.MemoryMiB, ImageVersion: n.ImageVersion, CreatedBy: actor.ID, CreatedAt: now}
		if pool.RecycleAfterHours > 0 {
			at := now.Add(time.Duration(pool.RecycleAfterHours) * time.Hour)
			vm.RecycleAfter = &at
		}
		if err := tx.Create(&vm).Error; err != nil {
			return err
		}
		if s.leases != nil {
			if err := s.leases.ClaimNew(tx, vm.ID); err != nil {
				return err
			}
		}
		details := map[string]any{"vcpus": vm.VCPUs, "memory_mib": vm.MemoryMiB, "host": vm.HostURI, "image_version": vm.ImageVersion}
		if n.Replaces != "" {
			details["replaces"] = n.Replaces
		}
		return s.write(tx, actor.Event(tenantID, audit.TypeVMCreated, "vm", vm.ID, details))
	})
	if err != nil {
		return VM{}, fmt.Errorf("create vm in tenant %s: %w", tenantID, err)
	}
	if s.leases != nil {
		s.leases.Claimed(vm.ID)
	}
	return vm, nil
}

func eventPtr(e audit.Event) *audit.Event { return &e }

// VM returns the tenant's VM with that id.
func (s *Store) VM(ctx context.Context, tenantID, id string) (VM, error) {
	var vm VM
	if err := s.db.WithContext(ctx).Take(&vm, "tenant_id = ? AND id = ?", tenantID, id).Error; err != nil {
		return VM{}, fmt.Errorf("vm %s: %w", id, notFound(err))
	}
	return vm, nil
}

// listLimit bounds the ended VMs a list shows; active ones are always shown.
const listLimit = 200

// VMs returns the tenant's active VMs and its most recently ended ones,
// newest first.
func (s *Store) VMs(ctx context.Context, tenantID string) ([]VM, error) {
	out, err := s.list(ctx, s.db.WithContext(ctx).Where("tenant_id = ?", tenantID))
	if err != nil {
		return nil, fmt.Errorf("list vms of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// AllVMs is VMs across every tenant, for platform operators.
func (s *Store) AllVMs(ctx context.Context) ([]VM, error) {
	out, err := s.list(ctx, s.db.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("list all vms: %w", err)
	}
	return out, nil
}

func (s *Store) list(ctx context.Context, q *gorm.DB) ([]VM, error) {
	var active, ended []VM
	if err := q.Session(&gorm.Session{}).Where("state IN ?", activeStates()).Order("id DESC").Find(&active).Error; err != nil {
		return nil, err
	}
	if err := q.Session(&gorm.Session{}).Where("state NOT IN ?", activeStates()).Order("id DESC").Limit(listLimit).Find(&ended).Error; err != nil {
		return nil, err
	}
	return append(active, ended...), nil
}

// vmByID reads a VM whatever its tenant: for events and reconcile, which
// learn the id from libvirt and check the tenant themselves.
func (s *Store) vmByID(ctx context.Context, id string) (VM, error) {
	var vm VM
	if err := s.db.WithContext(ctx).Take(&vm, "id = ?", id).Error; err != nil {
		return VM{}, fmt.Errorf("vm %s: %w", id, notFound(err))
	}
	return vm, nil
}

// activeOnHost returns the active VMs placed on a host.
func (s *Store) activeOnHost(ctx context.Context, uri string) ([]VM, error) {
	var out []VM
	if err := s.db.WithContext(ctx).Where("host_uri = ? AND state IN ?", uri, activeStates()).Find(&out).Error; err != nil {
		return nil, fmt.Errorf("active vms on %s: %w", uri, err)
	}
	return out, nil
}

// activeOf returns the tenant's active VMs.
func (s *Store) activeOf(ctx context.Context, tenantID string) ([]VM, error) {
	var out []VM
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND state IN ?", tenantID, activeStates()).Order("id").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("active vms of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// tenantsWithActiveVMs lists tenants that hold VMs, for the reconcile loop.
func (s *Store) tenantsWithActiveVMs(ctx context.Context) ([]string, error) {
	var out []string
	err := s.db.WithContext(ctx).Model(&VM{}).Where("state IN ?", activeStates()).Distinct().Pluck("tenant_id", &out).Error
	if err != nil {
		return nil, fmt.Errorf("tenants with vms: %w", err)
	}
	return out, nil
}

// setPhase records boot progress while the VM is still booting.
func (s *Store) setPhase(ctx context.Context, id string, p Phase) error {
	err := s.db.WithContext(ctx).Model(&VM{}).Where("id = ? AND state = ?", id, StateBooting).
		Updates(map[string]any{"phase": p, "phase_at": s.clock.Now()}).Error
	if err != nil {
		return fmt.Errorf("vm %s phase %s: %w", id, p, err)
	}
	return nil
}

// ready is what the agent handshake told about a VM.
type ready struct {
	AgentVersion, KernelVersion, DomainUUID string
	Boot                                    time.Duration
	BootKind                                string // restored, or cold with the reason
}

// markRunning moves a booting VM to running. ok is false when the VM was no
// longer booting (being destroyed, or lost, meanwhile).
func (s *Store) markRunning(ctx context.Context, id string, r ready) (bool, error) {
	now := s.clock.Now()
	res := s.db.WithContext(ctx).Model(&VM{}).Where("id = ? AND state = ?", id, StateBooting).Updates(map[string]any{
		"state": StateRunning, "phase": PhaseRunning, "phase_at": now, "agent_version": r.AgentVersion,
		"kernel_version": r.KernelVersion, "domain_uuid": r.DomainUUID, "boot_ms": r.Boot.Milliseconds(),
		"boot_kind": r.BootKind, "started_at": now, "last_seen_at": now, "state_reason": "",
	})
	if res.Error != nil {
		return false, fmt.Errorf("vm %s running: %w", id, res.Error)
	}
	return res.RowsAffected == 1, nil
}

// adopted records a fresh handshake with a VM found running at startup.
func (s *Store) adopted(ctx context.Context, id string, r ready) error {
	now := s.clock.Now()
	err := s.db.WithContext(ctx).Model(&VM{}).Where("id = ? AND state = ?", id, StateRunning).Updates(map[string]any{
		"agent_version": r.AgentVersion, "kernel_version": r.KernelVersion, "domain_uuid": r.DomainUUID, "last_seen_at": now,
	}).Error
	if err != nil {
		return fmt.Errorf("vm %s adopted: %w", id, err)
	}
	return nil
}

// BeginStop moves the tenant's booting or running VM to stopping, with the
// audit event typ (if not "") by actor. A VM of another tenant is
// ErrNotFound; one that is not booting or running is ErrConflict.
func (s *Store) beginStop(ctx context.Context, actor audit.Actor, tenantID, id, reason, typ string) (VM, error) {
	var vm VM
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := tx.Take(&vm, "tenant_id = ? AND id = ?", tenantID, id).Error; err != nil {
			return notFound(err)
		}
		if vm.State != StateBooting && vm.State != StateRunning {
			return fmt.Errorf("%w: vm %s is already %s", errdefs.ErrConflict, id, vm.State)
		}
		var ev *audit.Event
		if typ != "" {
			ev = eventPtr(actor.Event(tenantID, typ, "vm", id, map[string]any{"reason": reason}))
		}
		var changed bool
		var err error
		vm, changed, err = s.transition(tx, id, []State{StateBooting, StateRunning}, StateStopping, PhaseStopping, reason, ev)
		if err == nil && !changed {
			err = fmt.Errorf("%w: vm %s changed state meanwhile", errdefs.ErrConflict, id)
		}
		return err
	})
	if err != nil {
		return VM{}, fmt.Errorf("stop vm %s: %w", id, err)
	}
	return vm, nil
}

// end moves a VM from one of the states in from to an ended state, writing
// ev (if not nil) only when the row changed: of two racing observers of one
// VM's end exactly one records it.
func (s *Store) end(ctx context.Context, id string, from []State, to State, reason string, ev *audit.Event) (VM, bool, error) {
	var (
		vm      VM
		changed bool
	)
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var err error
		vm, changed, err = s.transition(tx, id, from, to, PhaseEnded, reason, ev)
		return err
	})
	if err != nil {
		return VM{}, false, fmt.Errorf("vm %s -> %s: %w", id, to, err)
	}
	return vm, changed, nil
}

// transition is the conditional state change inside tx.
func (s *Store) transition(tx *gorm.DB, id string, from []State, to State, phase Phase, reason string, ev *audit.Event) (VM, bool, error) {
	now := s.clock.Now()
	set := map[string]any{"state": to, "state_reason": reason, "phase": phase, "phase_at": now}
	if !to.Active() {
		set["ended_at"] = now
		set["acquired_at"] = nil
	}
	res := tx.Model(&VM{}).Where("id = ? AND state IN ?", id, from).Updates(set)
	if res.Error != nil {
		return VM{}, false, res.Error
	}
	var vm VM
	if err := tx.Take(&vm, "id = ?", id).Error; err != nil {
		return VM{}, false, notFound(err)
	}
	if res.RowsAffected == 0 {
		return vm, false, nil
	}
	if ev != nil {
		if ev.Details == nil {
			ev.Details = map[string]any{}
		}
		ev.Details["state"] = string(to)
		if err := s.write(tx, *ev); err != nil {
			return VM{}, false, err
		}
	}
	return vm, true, nil
}

// acquire hands out the tenant's longest-idle running VM: it is marked
// acquired (no longer warm) and its sandboxes_served count goes up. Two
// callers never get the same VM. ErrNoIdleVM when none is idle.
func (s *Store) acquire(ctx context.Context, tenantID string) (VM, error) {
	for attempt := 0; attempt < 5; attempt++ {
		var vm VM
		q := s.db.WithContext(ctx).Where("tenant_id = ? AND state = ? AND acquired_at IS NULL", tenantID, StateRunning).
			Where("host_uri NOT IN (?)", s.db.Model(&Host{}).Select("uri").
				Where("state IN ? OR down_at IS NOT NULL", []HostState{HostCordoned, HostDraining, HostRemoved}))
		if s.leases != nil { // replicas: only a VM whose channel this one owns
			q = q.Where("id IN (SELECT vm_id FROM vm_leases WHERE owner = ? AND expires_at > ?)", s.leases.ID(), s.clock.Now().UTC())
		}
		err := q.Order("started_at, id").Take(&vm).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return VM{}, ErrNoIdleVM
		}
		if err != nil {
			return VM{}, fmt.Errorf("acquire vm: %w", err)
		}
		now := s.clock.Now()
		res := s.db.WithContext(ctx).Model(&VM{}).
			Where("id = ? AND state = ? AND acquired_at IS NULL", vm.ID, StateRunning).
			Updates(map[string]any{"acquired_at": now, "sandboxes_served": gorm.Expr("sandboxes_served + 1")})
		if res.Error != nil {
			return VM{}, fmt.Errorf("acquire vm %s: %w", vm.ID, res.Error)
		}
		if res.RowsAffected == 1 {
			vm.AcquiredAt = &now
			vm.SandboxesServed++
			return vm, nil
		}
		// Someone else took it first: try the next one.
	}
	return VM{}, fmt.Errorf("acquire vm: %w: contention", ErrNoIdleVM)
}

// release returns an acquired VM of the tenant to the idle pool.
func (s *Store) release(ctx context.Context, tenantID, id string) error {
	res := s.db.WithContext(ctx).Model(&VM{}).Where("tenant_id = ? AND id = ? AND acquired_at IS NOT NULL", tenantID, id).
		Update("acquired_at", nil)
	if res.Error != nil {
		return fmt.Errorf("release vm %s: %w", id, res.Error)
	}
	if res.RowsAffected == 0 {
		if _, err := s.VM(ctx, tenantID, id); err != nil {
			return fmt.Errorf("release vm %s: %w", id, err)
		}
		return fmt.Errorf("release vm %s: %w: not acquired", id, errdefs.ErrConflict)
	}
	return nil
}

// recycleDue lists idle running VMs whose recycle time has come.
func (s *Store) recycleDue(ctx context.Context) ([]VM, error) {
	var out []VM
	err := s.db.WithContext(ctx).Where("state = ? AND acquired_at IS NULL AND recycle_after IS NOT NULL AND recycle_after <= ?",
		StateRunning, s.clock.Now()).Order("id").Find(&out).Error
	if err != nil {
		return nil, fmt.Errorf("vms due for recycling: %w", err)
	}
	return out, nil
}

// touch records that the VMs were seen alive.
func (s *Store) touch(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	err := s.db.WithContext(ctx).Model(&VM{}).Where("id IN ? AND state IN ?", ids, activeStates()).
		Update("last_seen_at", s.clock.Now()).Error
	if err != nil {
		return fmt.Errorf("touch vms: %w", err)
	}
	return nil
}

// upsertHost records what was learnt about a host. A host that could not be
// reached keeps its last known capacity.
func (s *Store) upsertHost(ctx context.Context, h Host) error {
	now := s.clock.Now()
	h.UpdatedAt = now
	if h.FirstSeenAt.IsZero() {
		h.FirstSeenAt = now
	}
	if h.State == "" {
		h.State = HostActive // a new row only: state is not among the updates
	}
	cols := []string{"health", "health_reason", "updated_at"}
	if h.Health == HealthOK {
		h.LastSeenAt = &now
		cols = append(cols, "cpus", "memory_kib", "free_memory_kib", "domain_type", "last_seen_at")
	}
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "uri"}},
		DoUpdates: clause.AssignmentColumns(cols),
	}).Create(&h).Error
	if err != nil {
		return fmt.Errorf("record host %s: %w", h.URI, err)
	}
	return nil
}

// Hosts returns every host ever configured, by URI.
func (s *Store) Hosts(ctx context.Context) ([]Host, error) {
	var out []Host
	if err := s.db.WithContext(ctx).Order("uri").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	return out, nil
}
