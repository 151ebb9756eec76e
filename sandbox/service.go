// Package sandbox runs sandboxes: crun containers nested inside a tenant's
// VMs. The Service places each one on the tenant's VM pool (a running VM
// with room, else a warm one, else one it boots within the quota), checks
// the tenant quota in the transaction that records it, starts it through the
// VM's agent, runs commands and moves files, records every state change
// with its reason, audits create, exec and destroy, destroys sandboxes whose
// lifetime passed, and at startup reconciles the database with the agents so
// that nothing is orphaned.
package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/shutdown"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/sandbox/volumes"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/usage"
)

// VMs is what the service needs of the tenant VM pools. *vmpool.Service
// implements it.
type VMs interface {
	Pool(ctx context.Context, tenantID string) (vmpool.Pool, error)
	List(ctx context.Context, tenantID string) ([]vmpool.Status, error)
	ListAll(ctx context.Context) ([]vmpool.Status, error)
	VM(ctx context.Context, tenantID, id string) (vmpool.VM, error)
	Acquire(ctx context.Context, tenantID string) (vmpool.VM, error)
	Release(ctx context.Context, tenantID, id string) error
	Create(ctx context.Context, actor audit.Actor, tenantID string) (vmpool.VM, error)
	Agent(ctx context.Context, tenantID, vmID string) (*agentproto.Client, error)
	// CPUTime is libvirt's CPU time of the running VM so far.
	CPUTime(ctx context.Context, tenantID, vmID string) (time.Duration, error)
	Quota(ctx context.Context, tenantID string) (tenants.Quota, error)
	// ClosedHosts are the hosts whose VMs take no new sandbox (cordoned,
	// draining, removed, down).
	ClosedHosts(ctx context.Context) (map[string]bool, error)
	// Started is nil once the pools run; else an error wrapping
	// vmpool.ErrUnavailable (a server without libvirt).
	Started() error
}

// Config configures a Service. Zero values take the defaults noted.
type Config struct {
	// DataDir holds the built image whose templates sandboxes start from.
	DataDir string
	Logger  *slog.Logger
	Clock   clockwork.Clock // the loops' tickers and the stamps; default the real clock
	// TenantTemplates resolves tenants' own templates (sandbox/templates);
	// nil: built-ins only.
	TenantTemplates TenantTemplates
	// DefaultTemplate is used when a spec names none; default "debian",
	// or the first template built when that one is not.
	DefaultTemplate string
	// DefaultMemoryMiB is a sandbox's memory when the spec gives none;
	// default 128 (less if the tenant's VMs are smaller).
	DefaultMemoryMiB int
	// DefaultTimeoutSeconds is a sandbox's lifetime when the spec gives
	// none; default 3600.
	DefaultTimeoutSeconds int
	// DefaultExecTimeoutSeconds bounds a command that names no timeout;
	// default 600.
	DefaultExecTimeoutSeconds int
	// GuestReserveMiB is the memory of each VM kept for its kernel and
	// agent: sandboxes of a VM share the rest; default 128.
	GuestReserveMiB int
	// MaxPerVM bounds the sandboxes placed on one VM below what its memory
	// takes (agentproto.SandboxCapacity, the agent's own cap); 0: that
	// alone.
	MaxPerVM int
	// MemoryOvercommit lets the sandboxes of one VM together have memory
	// limits up to this many times the VM's memory after GuestReserveMiB:
	// a limit is a ceiling, and an idle sandbox uses a few MiB of it (the
	// guest's OOM killer ends the largest when they all use it). Default
	// 1: no overcommit.
	MemoryOvercommit float64
	// MaxFileBytes bounds a file read or written through the API
	// (STOCKADE_MAX_FILE_BYTES); default 64 MiB. A tenant policy's
	// filesystem.max_file_bytes may lower it for its tenant (FileLimit).
	MaxFileBytes int64
	// MaxStdinBytes bounds a command's stdin; default 1 MiB.
	MaxStdinBytes int64
	// ExecRecordBytes is how much of each output stream of a command is
	// stored with its record; default 16 KiB.
	ExecRecordBytes int
	// MaxProcesses bounds the processes running at once in one sandbox
	// (the process API); default DefaultMaxProcesses. ProcessOutputBytes is
	// the output kept per process for readers; default
	// DefaultProcessOutputBytes.
	MaxProcesses       int
	ProcessOutputBytes int
	// ExecGrace is how long a command or terminal whose agent session was
	// lost waits for the VM's next session to re-attach it; default 5 min
	// (the agent keeps it as long: vmpool.Config.ExecGrace).
	ExecGrace time.Duration
	// CreateTimeout bounds a create from its record to running, a VM boot
	// included; default 4 min.
	CreateTimeout time.Duration
	// Replicated: other replicas share the database (PostgreSQL), so a
	// create this process did not start may be under way in another one:
	// at startup too it is failed only once older than CreateTimeout.
	Replicated bool
	// SyncInterval is how often sandboxes are checked against their agents
	// and their lifetimes; default 2 s.
	SyncInterval time.Duration
	// VMSyncTimeout bounds one VM's part of a sync pass (listing its
	// sandboxes, recording and cleaning up what changed); default 30 s. A
	// guest that does not answer holds up its own VM only.
	VMSyncTimeout time.Duration
	// SampleInterval is how often each running sandbox's cgroup is sampled
	// into the usage ledger; default 5 s. Its end is always sampled too.
	SampleInterval time.Duration
	// SampleRetention is how long raw usage samples are kept (the ledger
	// keeps the totals for good); default 14 days.
	SampleRetention time.Duration
	// Policies gives each tenant's policy: its resource and lifetime
	// limits bound a create, and the sandbox records its version. Nil:
	// only the bounds above apply (version 0 is recorded).
	Policies Policies
	// Credentials gives sandboxes placeholders for the tenant's secrets and
	// the CA the egress gateway terminates TLS with. Nil: neither.
	Credentials Credentials
	// Freezes refuses creates for a frozen tenant (incident response).
	// Nil: no tenant is ever frozen.
	Freezes Freezes
	// Outbox gets sandbox.created and sandbox.destroyed for the tenant's
	// outgoing webhooks, in the transactions of those changes. Nil: none.
	Outbox Outbox
	// Volumes attaches the tenant volumes a spec asks for
	// (*volumes.Service). Nil: a spec with volumes is refused.
	Volumes Volumes
}

// Volumes is what the service needs of the volume service
// (*volumes.Service).
type Volumes interface {
	Plan(ctx context.Context, tenantID string, reqs []volumes.Request) (volumes.Plan, error)
	Attach(ctx context.Context, actor audit.Actor, tenantID, sandboxID, vmID string, reqs []volumes.Request, g volumes.Guest) ([]agentproto.VolumeBind, error)
	Release(ctx context.Context, tenantID, sandboxID string, guest func(vmID string) (volumes.Guest, error))
}

func (c *Config) checkAndSetDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.DefaultTemplate == "" {
		c.DefaultTemplate = image.TemplateDebian
	}
	defInt := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	defInt(&c.DefaultMemoryMiB, 128)
	defInt(&c.DefaultTimeoutSeconds, 3600)
	defInt(&c.DefaultExecTimeoutSeconds, 600)
	defInt(&c.GuestReserveMiB, 128)
	if c.MemoryOvercommit < 1 {
		c.MemoryOvercommit = 1
	}
	defInt(&c.ExecRecordBytes, 16<<10)
	defInt(&c.MaxProcesses, DefaultMaxProcesses)
	defInt(&c.ProcessOutputBytes, DefaultProcessOutputBytes)
	if c.ExecGrace <= 0 {
		c.ExecGrace = agentproto.DefaultExecGrace
	}
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = 64 << 20
	}
	if c.MaxStdinBytes <= 0 {
		c.MaxStdinBytes = 1 << 20
	}
	if c.CreateTimeout <= 0 {
		c.CreateTimeout = 4 * time.Minute
	}
	if c.SyncInterval <= 0 {
		c.SyncInterval = 2 * time.Second
	}
	if c.VMSyncTimeout <= 0 {
		c.VMSyncTimeout = 30 * time.Second
	}
	if c.SampleInterval <= 0 {
		c.SampleInterval = 5 * time.Second
	}
	if c.SampleRetention <= 0 {
		c.SampleRetention = 14 * 24 * time.Hour
	}
}

// Service runs the sandboxes of every tenant.
type Service struct {
	cfg   Config
	store *Store
	vms   VMs // not started: sandboxes can be read, not created or changed
	log   *slog.Logger

	// stop is closed by Close; it bounds creates and the background loops.
	stop *shutdown.Signal
	wg   sync.WaitGroup

	mu       sync.Mutex
	inflight map[string]int            // sandboxes whose create or destroy this process runs
	execs    map[string]bool           // command records this process serves (Exec)
	missing  map[string]bool           // sandboxes the last sync found missing from their agent
	syncing  map[vmKey]bool            // VMs whose sync is running
	orphans  map[vmKey]map[string]bool // orphans each VM's agent destroyed
	// guestLog bounds what a guest can make the service write about
	// itself: orphan audit rows and warnings, per VM.
	guestLog *audit.Limiter
	ended    endObservers
	ending   endObservers           // told before a destroy kills what runs
	tunnels  map[string]int         // open port tunnels per sandbox (ports.go)
	tenantMu map[string]*sync.Mutex // placement and release decisions
	pauseMu  map[string]*sync.Mutex // pause, resume and their sync, per tenant (pause.go)
	admitMu  map[string]*sync.Mutex // a create's capacity check and its record
	bootMu   map[string]*sync.Mutex // one VM boot for sandboxes at a time
	started  bool
	once     sync.Once

	usage *usage.Store // the meters the sampler moves
	procs *processes   // the process API's registry (process.go)

	// templates are the image's, loaded once at New; templatesErr says
	// why they could not be (a broken manifest), nil when none is built.
	templates    []image.Template
	templatesErr error
}

// NewService returns a Service keeping sandboxes in store and their meters
// in use, placing them on vms; the composition root builds each store once
// and passes it in. While vms is not started the service only reads what
// is stored: every change answers vmpool.ErrUnavailable. Start it to run
// the background loop.
func NewService(store *Store, use *usage.Store, vms VMs, cfg Config) (*Service, error) {
	if store == nil || use == nil || vms == nil {
		return nil, errors.New("sandbox service: a store, a usage store and the VM pools are required")
	}
	cfg.checkAndSetDefaults()
	s := &Service{
		cfg: cfg, store: store, vms: vms, usage: use, log: cfg.Logger.With("component", "sandbox"),
		inflight: map[string]int{}, execs: map[string]bool{}, missing: map[string]bool{}, syncing: map[vmKey]bool{}, orphans: map[vmKey]map[string]bool{},
		guestLog: audit.NewLimiter(time.Hour, guestLogBurst), tenantMu: map[string]*sync.Mutex{}, pauseMu: map[string]*sync.Mutex{}, admitMu: map[string]*sync.Mutex{}, bootMu: map[string]*sync.Mutex{},
	}
	s.store.outbox = cfg.Outbox
	s.stop = shutdown.New()
	s.procs = newProcesses()
	s.OnEnd(s.processesEnded)
	s.OnEnd(s.volumesEnded)
	if s.templates, s.templatesErr = loadTemplates(cfg.DataDir); s.templatesErr != nil {
		s.log.Error("sandboxes cannot be created", "err", s.templatesErr)
	}
	return s, nil
}

// New returns a Service on db (opened and migrated) placing sandboxes on
// vms, building its own stores; it panics without vms.
//
// Deprecated: kept for callers that hold only a *gorm.DB (tests); the
// composition root builds the stores once and calls NewService.
func New(db *gorm.DB, vms VMs, cfg Config) *Service {
	var now func() time.Time
	if cfg.Clock != nil {
		now = cfg.Clock.Now
	}
	s, err := NewService(NewStore(db, now), usage.NewStore(db, now), vms, cfg)
	if err != nil {
		panic(err)
	}
	return s
}

// Store is the service's store.
func (s *Service) Store() *Store { return s.store }

// Config is the service's configuration with its defaults filled in.
func (s *Service) Config() Config { return s.cfg }

// Start reconciles the stored sandboxes with the agents of their VMs (start
// the VM pools first: they adopt the running VMs), then checks them in the
// background every SyncInterval until Close. Sandboxes found running are
// adopted; ones whose create was cut short are adopted if their agent
// finished it and otherwise failed with the reason; vanished ones are failed;
// ones an agent holds that no active record accounts for are destroyed.
func (s *Service) Start(ctx context.Context) error {
	if err := s.vms.Started(); err != nil {
		return fmt.Errorf("sandbox service: start the VM pools first: %w", err)
	}
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("sandbox service: already started")
	}
	s.started = true
	s.mu.Unlock()
	wait, err := s.sync(ctx, true)
	if err != nil {
		s.log.Warn("reconcile sandboxes at startup", "err", err)
	}
	wait()
	s.wg.Add(3)
	go s.loop()
	go s.meterLoop()
	go s.processLoop()
	return nil
}

// Close stops the background loop and any create under way (the next Start
// reconciles what they left). Sandboxes keep running in their VMs.
func (s *Service) Close() error {
	s.once.Do(func() {
		s.stop.Close()
		s.wg.Wait()
	})
	return nil
}

func (s *Service) unavailable(op string) error {
	if err := s.vms.Started(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

func (s *Service) track(id string) {
	s.mu.Lock()
	s.inflight[id]++
	s.mu.Unlock()
}

func (s *Service) untrack(id string) {
	s.mu.Lock()
	if s.inflight[id]--; s.inflight[id] <= 0 {
		delete(s.inflight, id)
	}
	s.mu.Unlock()
}

func (s *Service) isInflight(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight[id] > 0
}

func lockOf(mu *sync.Mutex, m map[string]*sync.Mutex, key string) *sync.Mutex {
	mu.Lock()
	defer mu.Unlock()
	l := m[key]
	if l == nil {
		l = &sync.Mutex{}
		m[key] = l
	}
	return l
}

func (s *Service) tenantLock(tenantID string) *sync.Mutex { return lockOf(&s.mu, s.tenantMu, tenantID) }
func (s *Service) bootLock(tenantID string) *sync.Mutex   { return lockOf(&s.mu, s.bootMu, tenantID) }

// Create validates spec (a *errdefs.FieldError naming the field), records
// the sandbox after checking the tenant quota in the same transaction (a
// *errdefs.QuotaError naming the quota; nothing is written), places it on
// the tenant's VM pool and starts it through the VM's agent. It returns once
// the sandbox runs. A sandbox that was recorded but could not start is
// failed, with the reason, and the error says why.
func (s *Service) Create(ctx context.Context, actor audit.Actor, tenantID string, spec Spec) (Sandbox, error) {
	// A frozen tenant is refused first, whatever else holds: the answer
	// names the freeze.
	if err := s.checkNotFrozen(ctx, tenantID); err != nil {
		return Sandbox{}, err
	}
	if err := s.unavailable("create sandbox"); err != nil {
		return Sandbox{}, err
	}
	if s.templatesErr != nil {
		return Sandbox{}, fmt.Errorf("create sandbox: %w", s.templatesErr)
	}
	begin := time.Now()
	// The same figures as CreateOptions: what the form offers is what a
	// create gets.
	b, err := s.basis(ctx, tenantID)
	if err != nil {
		return Sandbox{}, fmt.Errorf("create sandbox: %w", err)
	}
	pool, pol := b.pool, b.pol
	tv, tpls, err := s.tenantTemplate(ctx, tenantID, &spec) // tenant_templates.go
	if err != nil {
		return Sandbox{}, err
	}
	lim, err := spec.resolve(b.cfg, tpls, pool)
	if err != nil {
		return Sandbox{}, err
	}
	if b.hasPolicy {
		if err := lim.checkPolicy(pol); err != nil {
			return Sandbox{}, err
		}
	}
	plan, err := s.planVolumes(ctx, tenantID, spec.Volumes)
	if err != nil {
		return Sandbox{}, err
	}
	id, err := newID()
	if err != nil {
		return Sandbox{}, fmt.Errorf("create sandbox: %w", err)
	}
	granted := grantedSecrets(s.cfg.Policies != nil, pol)
	if spec.NoSecrets {
		granted = []string{}
	}
	credEnv, caPEM, err := s.credentials(ctx, tenantID, id, lim.Env, granted)
	if err != nil {
		return Sandbox{}, err
	}
	envKeys, _ := json.Marshal(withCredentialKeys(sortedKeys(lim.Env), credEnv))
	meta := lim.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	metaJSON, _ := json.Marshal(meta)
	sb := Sandbox{
		ID: id, TenantID: tenantID, Template: lim.Template, TemplateVersion: lim.TemplateVersion,
		VCPUs: lim.VCPUs, MemoryMiB: lim.MemoryMiB, TimeoutSeconds: lim.TimeoutSeconds, IdleTimeoutSeconds: lim.IdleTimeoutSeconds,
		EnvKeysJSON: string(envKeys), MetadataJSON: string(metaJSON), CreatedBy: actor.ID, CreatedByName: actorName(actor),
		PolicyVersion: pol.Version, IdempotencyKey: spec.IdempotencyKey,
	}
	agentTemplate, hotplugged := sb.Template, false
	if tv != nil {
		sb.TemplateWorkdir, sb.TemplateUser, agentTemplate = tv.Defaults.Workdir, tv.Defaults.User, tv.InVMName
	}
	// Tracked before it is written: the background loop never takes a
	// create of this process for an abandoned one.
	s.track(id)
	defer s.untrack(id)
	amu := lockOf(&s.mu, s.admitMu, tenantID)
	amu.Lock()
	err = s.admit(ctx, pool, sb)
	if err == nil {
		err = s.store.create(ctx, actor, &sb)
	}
	amu.Unlock()
	if err != nil {
		return Sandbox{}, err
	}
	// From here on the sandbox exists: it ends running or failed even if
	// the caller goes away. Only Close cuts it short, and the next Start
	// reconciles it.
	cctx, cancel := s.stop.WithTimeout(context.Background(), s.cfg.CreateTimeout)
	defer cancel()

	vm, client, err := s.place(cctx, actor, sb, plan)
	if err != nil {
		return s.createFailed(sb, "placement: "+err.Error(), err)
	}
	sb.VMID = vm.ID
	if tv != nil {
		if hotplugged, err = s.attachTemplate(cctx, tenantID, vm.ID, tv); err != nil {
			return s.createFailed(sb, "attach its template: "+err.Error(), fmt.Errorf("%w: attach template %s: %w", vmpool.ErrUnavailable, tv.Name, err))
		}
	}
	binds, err := s.attachVolumes(cctx, actor, sb, spec.Volumes, client)
	if err != nil {
		return s.createFailed(sb, "volumes: "+err.Error(), err)
	}
	info, err := client.CreateSandbox(cctx, agentproto.SandboxSpec{
		ID: sb.ID, Template: agentTemplate, TemplateHotplugged: hotplugged, Env: append(envList(lim.Env), credEnv...), Hostname: "sandbox", CAPEM: caPEM,
		Limits: agentproto.Limits{VCPUs: float64(sb.VCPUs), MemoryMiB: sb.MemoryMiB, PidsMax: pol.Doc.Resources.MaxPids, // 0 (no policy): the agent's default
			// On the VM's scratch disk, not in memory: the policy's sizes (0: the agent's default).
			DiskMiB: pol.Doc.Resources.MaxDiskMiB, WorkspaceMiB: pol.Doc.Filesystem.WorkspaceMiB},
		LifetimeSeconds: sb.TimeoutSeconds, IdleSeconds: sb.IdleTimeoutSeconds, Volumes: binds,
	})
	if err != nil {
		if s.stop.Err() != nil {
			return Sandbox{}, fmt.Errorf("create sandbox %s: the server is shutting down: %w", sb.ID, err)
		}
		// A create the agent finished after we gave up must not stay behind.
		s.removeFromAgent(client, sb.ID)
		// Whatever the agent said (its guest full, a template missing from
		// an older VM), the VM could not take it: unavailable, not the
		// caller's fault.
		return s.createFailed(sb, "the agent could not start it: "+err.Error(),
			fmt.Errorf("%w: the vm's agent could not start it: %w", vmpool.ErrUnavailable, err))
	}
	// A freeze that came while it started wins: it never runs.
	if err := s.checkNotFrozen(context.WithoutCancel(ctx), tenantID); err != nil {
		s.removeFromAgent(client, sb.ID)
		return s.createFailed(sb, ReasonFrozen, err)
	}
	out, changed, err := s.store.transition(context.WithoutCancel(ctx), sb.ID, change{
		From: []State{StateCreating}, To: StateRunning, Reason: ReasonStarted, Actor: "system", Audit: claimedEvent(sb, info),
		Set: map[string]any{"create_ms": time.Since(begin).Milliseconds(), "guest_ready_ms": info.Startup.Ready.Milliseconds()},
	})
	if err != nil {
		return Sandbox{}, err
	}
	if !changed && out.State == StateRunning {
		return out, nil // adopted meanwhile by a reconcile that saw it run
	}
	if !changed {
		// It ended meanwhile (its VM was lost, say): its end is recorded.
		s.removeFromAgent(client, sb.ID)
		return out, fmt.Errorf("create sandbox %s: %w: it is %s (%s)", sb.ID, errdefs.ErrConflict, out.State, out.StateReason)
	}
	s.log.Info("sandbox running", "sandbox", sb.ID, "tenant", tenantID, "vm", vm.ID, "template", sb.Template,
		"took", time.Since(begin).Round(time.Millisecond), "guest_ready", info.Startup.Ready.Round(time.Millisecond),
		"prestarted", info.Prestarted)
	return out, nil
}

// createFailed records a create that cannot finish and returns cause.
func (s *Service) createFailed(sb Sandbox, reason string, cause error) (Sandbox, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s.stop.Err() != nil {
		// Closing: the next Start reconciles it.
		return Sandbox{}, fmt.Errorf("create sandbox %s: %w", sb.ID, cause)
	}
	if _, _, err := s.fail(ctx, sb, reason); err != nil {
		s.log.Error("record failed sandbox", "sandbox", sb.ID, "err", err)
	}
	return Sandbox{}, fmt.Errorf("create sandbox %s: %w", sb.ID, cause)
}

// fail records that a sandbox will never run (again), audited
// sandbox.failed, and frees its place on its VM.
func (s *Service) fail(ctx context.Context, sb Sandbox, reason string) (Sandbox, bool, error) {
	ev := SystemActor().Event(sb.TenantID, audit.TypeSandboxFailed, "sandbox", sb.ID, map[string]any{"vm": sb.VMID})
	out, changed, err := s.store.transition(ctx, sb.ID, change{
		From: []State{StateCreating, StateRunning, StateStopped}, To: StateFailed, Reason: reason, Actor: "system", Audit: &ev,
		End: &time.Time{}, // billed up to when it was last seen alive
	})
	if err != nil {
		return Sandbox{}, false, err
	}
	if changed {
		s.log.Warn("sandbox failed", "sandbox", sb.ID, "tenant", sb.TenantID, "vm", sb.VMID, "reason", reason)
		s.releaseIfEmpty(ctx, sb.TenantID, sb.VMID)
		s.ended.notify(sb.TenantID, sb.ID, "the sandbox failed ("+reason+")")
	}
	return out, changed, nil
}

// removeFromAgent destroys a sandbox in the guest, if it is there.
func (s *Service) removeFromAgent(c *agentproto.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.DestroySandbox(ctx, id); err != nil && !errors.Is(err, agentproto.ErrNotFound) {
		s.log.Warn("remove sandbox from its agent", "sandbox", id, "err", err)
	}
}

// guestLogBurst is how many orphan audit rows (and warnings of each kind)
// one VM's guest can cause per hour; the next admitted row counts the rest.
const guestLogBurst = 20

// SystemActorID is the audit actor id of the service's own decisions.
const SystemActorID = "sandboxes"

// SystemActor is who the service's own decisions (timeouts, failures,
// reconcile) are recorded as.
func SystemActor() audit.Actor {
	return audit.Actor{Kind: audit.ActorSystem, ID: SystemActorID, Name: "sandbox service"}
}

// Status is a sandbox with live numbers from its agent.
type Status struct {
	Sandbox
	// Stats is the sandbox's cgroup and disk usage (Get only, when the
	// agent answered; nil otherwise).
	Stats *agentproto.SandboxStats
}

// Get returns the tenant's sandbox; a running one with its agent's numbers
// when they come within 2 s.
func (s *Service) Get(ctx context.Context, tenantID, id string) (Status, error) {
	sb, err := s.store.Sandbox(ctx, tenantID, id)
	if err != nil {
		return Status{}, err
	}
	st := Status{Sandbox: sb}
	if sb.State != StateRunning || s.vms.Started() != nil {
		return st, nil
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if c, err := s.vms.Agent(sctx, tenantID, sb.VMID); err == nil {
		if stats, err := c.SandboxStats(sctx, sb.ID); err == nil {
			st.Stats = &stats
		}
	}
	return st, nil
}

// List returns the tenant's active sandboxes and its most recently ended
// ones, newest first.
func (s *Service) List(ctx context.Context, tenantID string) ([]Sandbox, error) {
	return s.store.Sandboxes(ctx, tenantID)
}

// Events returns the state changes of the tenant's sandbox, oldest first.
func (s *Service) Events(ctx context.Context, tenantID, id string) ([]Event, error) {
	if _, err := s.store.Sandbox(ctx, tenantID, id); err != nil {
		return nil, err
	}
	return s.store.Events(ctx, tenantID, id)
}

// Execs returns the commands run in the tenant's sandbox, newest first.
func (s *Service) Execs(ctx context.Context, tenantID, id string) ([]ExecRecord, error) {
	if _, err := s.store.Sandbox(ctx, tenantID, id); err != nil {
		return nil, err
	}
	return s.store.Execs(ctx, tenantID, id)
}

// Destroy ends the tenant's sandbox and removes everything it had; it is
// audited sandbox.destroyed. Another tenant's sandbox is ErrNotFound; one
// already ended, or still being created, ErrConflict; with its agent out of
// reach vmpool.ErrUnavailable, and nothing changes.
func (s *Service) Destroy(ctx context.Context, actor audit.Actor, tenantID, id string) (Sandbox, error) {
	sb, err := s.store.Sandbox(ctx, tenantID, id)
	if err != nil {
		return Sandbox{}, err
	}
	switch {
	case sb.State.Ended():
		return Sandbox{}, fmt.Errorf("destroy sandbox %s: %w: it is already %s", id, errdefs.ErrConflict, sb.State)
	case sb.State == StateCreating:
		return Sandbox{}, fmt.Errorf("destroy sandbox %s: %w: it is still being created; destroy it once it runs", id, errdefs.ErrConflict)
	}
	if err := s.unavailable("destroy sandbox"); err != nil {
		return Sandbox{}, err
	}
	return s.destroy(ctx, sb, actor, ReasonRequested)
}

// destroy removes a running or stopped sandbox from its agent and records
// it destroyed with reason, audited as actor's.
func (s *Service) destroy(ctx context.Context, sb Sandbox, actor audit.Actor, reason string) (Sandbox, error) {
	// Between the agent's destroy and the record's, the background loop
	// must not take the sandbox for one that vanished.
	s.track(sb.ID)
	defer s.untrack(sb.ID)
	var (
		final *agentproto.SandboxStats
		end   *time.Time
	)
	if sb.VMID != "" {
		c, err := s.vms.Agent(ctx, sb.TenantID, sb.VMID)
		switch {
		case err == nil:
			// Terminals learn why before their processes are killed, so
			// they end saying so (not "agent closed the stream").
			s.ending.notify(sb.TenantID, sb.ID, EndText(reason))
			info, err := c.DestroySandbox(ctx, sb.ID)
			if err != nil && !errors.Is(err, agentproto.ErrNotFound) {
				s.ending.notify(sb.TenantID, sb.ID, "") // it still runs
				return Sandbox{}, agentErr("destroy sandbox "+sb.ID, err)
			}
			final = info.Final
		case errors.Is(err, errdefs.ErrConflict), errors.Is(err, errdefs.ErrNotFound):
			// Its VM no longer runs: nothing of the sandbox is left anywhere,
			// and it is billed up to when it was last seen.
			reason += " (its vm had ended)"
			end = &time.Time{}
		default:
			return Sandbox{}, fmt.Errorf("destroy sandbox %s: %w", sb.ID, err)
		}
	}
	ev := actor.Event(sb.TenantID, audit.TypeSandboxDestroyed, "sandbox", sb.ID, map[string]any{"vm": sb.VMID})
	out, changed, err := s.store.transition(context.WithoutCancel(ctx), sb.ID, change{
		From: []State{StateRunning, StateStopped}, To: StateDestroyed, Reason: reason, Actor: actorName(actor), Audit: &ev,
		Final: final, End: end,
	})
	if err != nil {
		return Sandbox{}, err
	}
	s.releaseIfEmpty(context.WithoutCancel(ctx), sb.TenantID, sb.VMID)
	if !changed && out.State != StateDestroyed {
		return out, fmt.Errorf("destroy sandbox %s: %w: it is %s (%s)", sb.ID, errdefs.ErrConflict, out.State, out.StateReason)
	}
	if changed {
		s.log.Info("sandbox destroyed", "sandbox", sb.ID, "tenant", sb.TenantID, "reason", reason)
		s.ended.notify(sb.TenantID, sb.ID, EndText(reason))
	}
	return out, nil
}

// runningAgent returns the tenant's running sandbox and its VM's agent.
func (s *Service) runningAgent(ctx context.Context, tenantID, id string) (Sandbox, *agentproto.Client, error) {
	sb, err := s.store.Sandbox(ctx, tenantID, id)
	if err != nil {
		return Sandbox{}, nil, err
	}
	if err := s.unavailable("sandbox " + id); err != nil {
		return Sandbox{}, nil, err
	}
	if sb.State != StateRunning {
		why := string(sb.State)
		if sb.StateReason != "" {
			why += " (" + sb.StateReason + ")"
		}
		return Sandbox{}, nil, fmt.Errorf("sandbox %s: %w: it is %s", id, errdefs.ErrConflict, why)
	}
	if sb.Paused() {
		return Sandbox{}, nil, fmt.Errorf("sandbox %s: %w: %s", id, errdefs.ErrConflict, msgPaused)
	}
	c, err := s.vms.Agent(ctx, tenantID, sb.VMID)
	if err != nil {
		return Sandbox{}, nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return sb, c, nil
}
