package compliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/stockade-dev/stockade/tenants/clip"

	"github.com/jonboulle/clockwork"
	"github.com/stockade-dev/stockade/tenants/dbtime"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

// ErrUnavailable: the server runs without sandboxes, so the probe cannot
// run.
var ErrUnavailable = errors.New("compliance probe unavailable")

// Policies gives a tenant's policy in force. *policy.Store implements it.
type Policies interface {
	Current(ctx context.Context, tenantID string) (policy.Version, error)
}

// Secrets lists a tenant's secrets (never their values). *secrets.Store
// implements it.
type Secrets interface {
	List(ctx context.Context, tenantID string) ([]secrets.Secret, error)
}

// Tenants lists the tenants the cycle evaluates. *tenants.Store implements it.
type Tenants interface {
	ListTenants(ctx context.Context) ([]tenants.TenantSummary, error)
}

// Prober runs the probe program in a fresh sandbox of the tenant, created
// as actor, and destroys that sandbox afterwards whatever happens. started
// is called with the sandbox's id once it exists. On error the result holds
// whatever the probe got to. sandbox/probe.Runner implements it.
type Prober interface {
	Probe(ctx context.Context, actor audit.Actor, tenantID string, started func(sandboxID string)) (ProbeResult, error)
}

// ProbeResult is what one probe run found.
type ProbeResult struct {
	SandboxID string
	Checks    []ProbeCheck
	Output    string
}

// SandboxRef is a sandbox as the checklist sees it.
type SandboxRef struct {
	ID        string
	State     string // creating, running, stopped, failed, destroyed
	Reason    string
	ExpiresAt time.Time
	EndedAt   *time.Time
}

// Facts are live data of a tenant's sandboxes, terminals, VMs and egress.
type Facts struct {
	// Since is where the counts below start.
	Since time.Time
	// Active counts the sandboxes being created or running now.
	Active int
	// Overdue are running sandboxes past their lifetime by more than the
	// grace; Lingering stopped ones not destroyed within the grace.
	Overdue, Lingering []SandboxRef
	// Ended counts sandboxes ended since Since; Destroyed those of them
	// destroyed (the rest failed).
	Ended, Destroyed int
	// Execs counts commands run since Since.
	Execs int
	// Sessions counts terminal sessions opened since Since, Recorded those
	// whose recording is kept, Unrecorded those with no recording that
	// retention did not remove; LastRecording is the newest recorded one.
	Sessions, Recorded, Unrecorded int
	LastRecording                  string
	// RunningVMs counts the tenant's running VMs.
	RunningVMs int
	// EgressDenied counts connections the gateway refused since Since.
	EgressDenied int
}

// Live reads live data of a tenant. sandbox/probe.Live implements it.
type Live interface {
	Facts(ctx context.Context, tenantID string, since time.Time, grace time.Duration) (Facts, error)
	// Sandbox is one sandbox of the tenant; another tenant's is
	// errdefs.ErrNotFound.
	Sandbox(ctx context.Context, tenantID, id string) (SandboxRef, error)
}

// Platform is the deployment's configuration as the checklist reads it.
type Platform struct {
	// DomainType is the VMs' libvirt domain type: "kvm", "qemu" or ""
	// (detected per host).
	DomainType string
	// HostMounts reports VMs that share host folders, devices or memory
	// with the guest (this platform never builds such domains).
	HostMounts bool
	// NetworkDevices reports VMs with a network device, which egress
	// could take around the gateway (this platform never builds such
	// domains).
	NetworkDevices bool
	// Gateway reports that the egress gateway serves every VM's agent.
	Gateway bool
	// AllowCIDRs are operator ranges exempt from the gateway's
	// private-address block (STOCKADE_EGRESS_ALLOW_CIDRS).
	AllowCIDRs []string
	// SecretsEncrypted reports that a secret store seals secrets at rest.
	SecretsEncrypted bool
	// OperatorContacts are the platform operators. Signing in as one does
	// not make them the incident contacts: IncidentContacts names those.
	OperatorContacts []string
	// IncidentContacts respond to a tenant's incident when its policy names
	// none (STOCKADE_INCIDENT_CONTACTS).
	IncidentContacts []string
	// IncidentRunbookURL is the platform's runbook for a compromised agent,
	// for tenants whose policy links none (STOCKADE_INCIDENT_RUNBOOK_URL).
	IncidentRunbookURL string
	// ControlPlane is the control plane's public URL.
	ControlPlane string
}

// Config configures a Service. Zero durations take the defaults noted.
type Config struct {
	Policies Policies // required
	Secrets  Secrets
	Tenants  Tenants // required by Start
	Live     Live
	Prober   Prober
	Platform Platform
	// Interval is how often every tenant is re-evaluated; default 5 min.
	Interval time.Duration
	// ProbeInterval is how often each tenant is probed; default 24 h;
	// negative: only on demand.
	ProbeInterval time.Duration
	// FirstProbeAfter is how long after Start a tenant never probed is
	// probed; default 10 min.
	FirstProbeAfter time.Duration
	// ProbeStaleAfter warns on evidence from an older probe run; default
	// twice ProbeInterval (or 48 h).
	ProbeStaleAfter time.Duration
	// Window is how far back live data and audit coverage look; default
	// 7 days.
	Window time.Duration
	// Grace is how long past its lifetime a sandbox may run (the sandbox
	// service's check interval and a destroy); default 1 min.
	Grace time.Duration
	// MaxLifetime: a policy letting sandboxes live longer warns; default 24 h.
	MaxLifetime time.Duration
	// MaxCredentialTTL: a granted secret living longer warns; default 90 days.
	MaxCredentialTTL time.Duration
	// MinAuditRetentionDays: keeping audit events less long warns; default 90.
	MinAuditRetentionDays int
	// MaxOutputBytes bounds the probe output kept per run; default 64 KiB.
	MaxOutputBytes int
	// Clock drives the evaluation and probe timers and stamps the results.
	Clock  clockwork.Clock
	Logger *slog.Logger
}

func (c *Config) checkAndSetDefaults() error {
	if c.Policies == nil {
		return errors.New("compliance: Policies is required")
	}
	def := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	def(&c.Interval, 5*time.Minute)
	def(&c.ProbeInterval, 24*time.Hour)
	def(&c.FirstProbeAfter, 10*time.Minute)
	if c.ProbeStaleAfter == 0 {
		c.ProbeStaleAfter = 48 * time.Hour
		if c.ProbeInterval > 0 {
			c.ProbeStaleAfter = 2 * c.ProbeInterval
		}
	}
	def(&c.Window, 7*24*time.Hour)
	def(&c.Grace, time.Minute)
	def(&c.MaxLifetime, 24*time.Hour)
	def(&c.MaxCredentialTTL, 90*24*time.Hour)
	if c.MinAuditRetentionDays <= 0 {
		c.MinAuditRetentionDays = 90
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = 64 << 10
	}
	if c.Interval < 0 {
		return errors.New("compliance: Interval must be positive")
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Service evaluates the checklist, keeps its results and history, and runs
// the probe.
type Service struct {
	db  *gorm.DB
	cfg Config
	log *slog.Logger

	cancel  context.CancelFunc // ends the cycle's context (set by Start, under mu)
	wg      sync.WaitGroup
	startAt time.Time

	mu      sync.Mutex
	evalMu  map[string]*sync.Mutex
	probing map[string]string // tenant -> run id under way
	started bool
	closed  bool
	once    sync.Once
}

// New returns a Service on db (opened and migrated).
func New(db *gorm.DB, cfg Config) (*Service, error) {
	if err := cfg.checkAndSetDefaults(); err != nil {
		return nil, err
	}
	s := &Service{db: db, cfg: cfg, log: cfg.Logger.With("component", "compliance"),
		evalMu: map[string]*sync.Mutex{}, probing: map[string]string{}}
	return s, nil
}

// Config is the service's configuration with its defaults filled in.
func (s *Service) Config() Config { return s.cfg }

// SystemActor is who the cycle's evaluations and probes are recorded as.
func SystemActor() audit.Actor {
	return audit.Actor{Kind: audit.ActorSystem, ID: "compliance", Name: "compliance checks"}
}

func (s *Service) now() time.Time { return dbtime.Of(s.cfg.Clock.Now()) }

func (s *Service) tenantLock(tenantID string) *sync.Mutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.evalMu[tenantID]
	if l == nil {
		l = &sync.Mutex{}
		s.evalMu[tenantID] = l
	}
	return l
}

// Items returns the tenant's latest evaluation, evaluating it first when
// it has none.
func (s *Service) Items(ctx context.Context, tenantID string) ([]Item, error) {
	items, err := s.results(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	if len(items) == len(checklist()) {
		return items, nil
	}
	return s.Evaluate(ctx, tenantID)
}

// Evaluate answers the tenant's checklist now from the evidence, stores
// the result and records (and audits) every status change.
func (s *Service) Evaluate(ctx context.Context, tenantID string) ([]Item, error) {
	l := s.tenantLock(tenantID)
	l.Lock()
	defer l.Unlock()
	in, err := s.gather(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	items := evaluate(in)
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var rows []resultRow
		if err := tx.Where("tenant_id = ?", tenantID).Find(&rows).Error; err != nil {
			return err
		}
		old := make(map[string]resultRow, len(rows))
		for _, r := range rows {
			old[r.ItemID] = r
		}
		for i := range items {
			it := &items[i]
			prev, had := old[it.ID]
			if had && Status(prev.Status) == it.Status {
				it.Since = prev.Since.UTC()
			} else {
				id, err := newID()
				if err != nil {
					return err
				}
				if err := tx.Create(&changeRow{ID: id, TenantID: tenantID, ItemID: it.ID, FromStatus: prev.Status,
					ToStatus: string(it.Status), ChangedAt: in.now}).Error; err != nil {
					return fmt.Errorf("record status change of %s: %w", it.ID, err)
				}
				if had {
					e := SystemActor().Event(tenantID, audit.TypeComplianceStatusChanged, "compliance_item", it.ID,
						map[string]any{"item": it.ID, "from": prev.Status, "to": string(it.Status)})
					e.Time = in.now
					if err := audit.Write(tx, e); err != nil {
						return err
					}
					s.log.Info("compliance status changed", "tenant", tenantID, "item", it.ID, "from", prev.Status, "to", it.Status)
				}
			}
			ev, err := encode(it.Evidence)
			if err != nil {
				return err
			}
			row := resultRow{TenantID: tenantID, ItemID: it.ID, Status: string(it.Status), Evidence: ev, Since: it.Since, CheckedAt: in.now}
			if err := tx.Clauses(clause.OnConflict{
				Columns:   []clause.Column{{Name: "tenant_id"}, {Name: "item_id"}},
				DoUpdates: clause.AssignmentColumns([]string{"status", "evidence", "since", "checked_at"}),
			}).Create(&row).Error; err != nil {
				return fmt.Errorf("store result of %s: %w", it.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("evaluate compliance of tenant %s: %w", tenantID, err)
	}
	return items, nil
}

// gather reads the evidence of one evaluation.
func (s *Service) gather(ctx context.Context, tenantID string) (inputs, error) {
	in := inputs{now: s.now(), cfg: s.cfg, platform: s.cfg.Platform}
	var err error
	if in.pol, err = s.cfg.Policies.Current(ctx, tenantID); err != nil {
		return inputs{}, fmt.Errorf("evaluate compliance: %w", err)
	}
	since := in.now.Add(-s.cfg.Window)
	// Audit events older than the retention are gone: coverage is only
	// measured where they can still be.
	var kept time.Time
	if days := in.pol.Doc.Audit.RetentionDays; days > 0 {
		kept = in.now.Add(-time.Duration(days) * 24 * time.Hour)
		if kept.After(since) {
			since = kept
		}
	}
	if s.cfg.Live == nil {
		in.liveErr = "this server runs without sandboxes"
	} else if f, err := s.cfg.Live.Facts(ctx, tenantID, since, s.cfg.Grace); err != nil {
		in.liveErr = err.Error()
	} else {
		in.live = &f
	}
	if in.run, err = s.latestRun(ctx, tenantID); err != nil {
		return inputs{}, err
	}
	if in.run != nil && in.run.SandboxID != "" && s.cfg.Live != nil {
		if sb, err := s.cfg.Live.Sandbox(ctx, tenantID, in.run.SandboxID); err == nil {
			in.runSandbox = &sb
		}
	}
	if s.cfg.Secrets != nil {
		if in.secrets, err = s.cfg.Secrets.List(ctx, tenantID); err != nil {
			return inputs{}, fmt.Errorf("evaluate compliance: %w", err)
		}
		if in.secrets == nil {
			in.secrets = []secrets.Secret{}
		}
	}
	count := func(q *gorm.DB) (int64, error) {
		var n int64
		err := q.Count(&n).Error
		return n, err
	}
	events := func() *gorm.DB { return s.db.WithContext(ctx).Model(&audit.Event{}).Where("tenant_id = ?", tenantID) }
	// A minute of slack: an exec's record and its audit event are written
	// together, but their times may straddle the window's start.
	if in.auditExecs, err = count(events().Where("type = ? AND occurred_at >= ?", audit.TypeSandboxExec, since.Add(-time.Minute))); err != nil {
		return inputs{}, fmt.Errorf("count audit events: %w", err)
	}
	in.auditProbeExecs = -1 // unknown: its events may be past the retention
	if in.run != nil && in.run.SandboxID != "" && in.run.StartedAt.After(kept) {
		if in.auditProbeExecs, err = count(events().Where("type = ? AND target_id = ?", audit.TypeSandboxExec, in.run.SandboxID)); err != nil {
			return inputs{}, fmt.Errorf("count audit events: %w", err)
		}
	}
	if in.auditProbeRuns, err = count(events().Where("type = ? AND occurred_at >= ?", audit.TypeComplianceProbeRun, since)); err != nil {
		return inputs{}, fmt.Errorf("count audit events: %w", err)
	}
	return in, nil
}

// RunProbe runs the probe in a new sandbox of the tenant as actor and
// blocks until it is done and its sandbox destroyed; the run is stored,
// audited (compliance.probe_run) and the tenant re-evaluated with it. A
// probe that could not finish is a run in state failed, not an error. A
// probe already running for the tenant is errdefs.ErrConflict.
func (s *Service) RunProbe(ctx context.Context, actor audit.Actor, tenantID string) (ProbeRun, error) {
	if s.cfg.Prober == nil {
		return ProbeRun{}, fmt.Errorf("run probe: %w: this server runs without sandboxes", ErrUnavailable)
	}
	id, err := newID()
	if err != nil {
		return ProbeRun{}, err
	}
	s.mu.Lock()
	if other, busy := s.probing[tenantID]; busy {
		s.mu.Unlock()
		return ProbeRun{}, fmt.Errorf("run probe: %w: probe run %s is under way", errdefs.ErrConflict, other)
	}
	s.probing[tenantID] = id
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.probing, tenantID)
		s.mu.Unlock()
	}()

	row := runRow{ID: id, TenantID: tenantID, State: RunRunning, ActorKind: actor.Kind, ActorID: actor.ID, ActorName: actor.Name,
		StartedAt: s.now(), Checks: "[]"}
	if err := s.db.WithContext(ctx).Create(&row).Error; err != nil {
		return ProbeRun{}, fmt.Errorf("record probe run: %w", err)
	}
	// From here on the run is recorded whatever happens to the caller.
	wctx := context.WithoutCancel(ctx)
	res, perr := s.cfg.Prober.Probe(ctx, actor, tenantID, func(sandboxID string) {
		if err := s.db.WithContext(wctx).Model(&runRow{}).Where("id = ?", id).Update("sandbox_id", sandboxID).Error; err != nil {
			s.log.Warn("record probe sandbox", "run", id, "err", err)
		}
	})
	end := s.now()
	row.EndedAt, row.State = &end, RunCompleted
	if res.SandboxID != "" {
		row.SandboxID = res.SandboxID
	}
	out := res.Output
	if perr != nil {
		row.State = RunFailed
		out += "\nprobe failed: " + perr.Error() + "\n"
		row.Error = perr.Error()
	}
	row.Output = bound(out, s.cfg.MaxOutputBytes)
	if res.Checks == nil {
		res.Checks = []ProbeCheck{}
	}
	if row.Checks, err = encode(res.Checks); err != nil {
		return ProbeRun{}, err
	}
	var escaped, failed []string
	blocked := 0
	for _, c := range res.Checks {
		switch c.Outcome {
		case OutcomeBlocked:
			blocked++
		case OutcomeEscaped:
			escaped = append(escaped, c.ID)
		default:
			failed = append(failed, c.ID)
		}
	}
	err = s.db.WithContext(wctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&runRow{}).Where("id = ?", id).Updates(map[string]any{
			"sandbox_id": row.SandboxID, "state": row.State, "ended_at": end, "checks": row.Checks, "output": row.Output, "error": row.Error,
		}).Error; err != nil {
			return fmt.Errorf("record probe run %s: %w", id, err)
		}
		e := actor.Event(tenantID, audit.TypeComplianceProbeRun, "probe_run", id, map[string]any{
			"sandbox": row.SandboxID, "state": row.State, "blocked": blocked, "escaped": nonNil(escaped), "errors": nonNil(failed)})
		if row.State == RunFailed {
			e.Outcome = audit.OutcomeFailure
			e.Details["error"] = truncate(row.Error, 500)
		}
		e.Time = end
		return audit.Write(tx, e)
	})
	if err != nil {
		return ProbeRun{}, err
	}
	s.log.Info("probe run ended", "tenant", tenantID, "run", id, "sandbox", row.SandboxID, "state", row.State,
		"blocked", blocked, "escaped", escaped, "errors", failed, "took", end.Sub(row.StartedAt).Round(time.Millisecond))
	if _, err := s.Evaluate(wctx, tenantID); err != nil {
		s.log.Warn("evaluate after probe", "tenant", tenantID, "err", err)
	}
	return row.run(), nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// bound keeps at most n bytes of s (the end, where a failure says why),
// as valid text without NUL.
func bound(s string, n int) string {
	s = stringsToValid(s)
	if len(s) <= n {
		return s
	}
	cut := len(s) - n
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return "…(output cut)\n" + s[cut:]
}

// truncate bounds s for a column or a message (clip.String).
func truncate(s string, n int) string { return clip.String(s, n) }

// Start evaluates every tenant every Interval and probes each on its
// schedule, until Close.
func (s *Service) Start(ctx context.Context) error {
	if s.cfg.Tenants == nil {
		return errors.New("compliance: Tenants is required to run the cycle")
	}
	s.mu.Lock()
	if s.started || s.closed {
		s.mu.Unlock()
		return errors.New("compliance: already started or closed")
	}
	s.started, s.startAt = true, s.now()
	// The cycle's own context: it outlives Start's and ends at Close.
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.mu.Unlock()
	s.wg.Add(1)
	go s.evalLoop(bg)
	if s.cfg.Prober != nil && s.cfg.ProbeInterval > 0 {
		s.wg.Add(1)
		go s.probeLoop(bg)
	}
	return nil
}

// Run runs the cycle as Start does but under ctx: it returns once ctx
// ends (or Close), and may run again afterwards, one at a time: a
// replica runs it for each of its leader terms.
func (s *Service) Run(ctx context.Context) {
	if s.cfg.Tenants == nil {
		s.log.Error("compliance: Tenants is required to run the cycle")
		return
	}
	s.mu.Lock()
	if s.started || s.closed || s.cancel != nil {
		s.mu.Unlock()
		return
	}
	if s.startAt.IsZero() {
		s.startAt = s.now()
	}
	bg, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	loops := []func(context.Context){s.evalLoop}
	if s.cfg.Prober != nil && s.cfg.ProbeInterval > 0 {
		loops = append(loops, s.probeLoop)
	}
	s.wg.Add(len(loops)) // each loop's own Done
	s.mu.Unlock()
	var term sync.WaitGroup
	for _, loop := range loops {
		term.Add(1)
		go func() {
			defer term.Done()
			loop(bg)
		}()
	}
	<-bg.Done()
	term.Wait()
	s.mu.Lock()
	s.cancel = nil
	s.mu.Unlock()
	cancel()
}

// Close stops the cycle; a probe under way is cut short (its sandbox is
// still destroyed and the run recorded failed).
func (s *Service) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		cancel := s.cancel
		s.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		s.wg.Wait()
	})
	return nil
}

func (s *Service) evalLoop(bg context.Context) {
	defer s.wg.Done()
	t := s.cfg.Clock.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.evaluateAll(bg)
		select {
		case <-bg.Done():
			return
		case <-t.Chan():
		}
	}
}

func (s *Service) evaluateAll(bg context.Context) {
	// A real-time bound on one cycle's database work (clockwork's fake
	// contexts block in Err until they end).
	ctx, cancel := context.WithTimeout(bg, max(s.cfg.Interval, time.Minute))
	defer cancel()
	if err := s.failInterrupted(ctx); err != nil && bg.Err() == nil {
		s.log.Warn("close interrupted probe runs", "err", err)
	}
	ts, err := s.cfg.Tenants.ListTenants(ctx)
	if err != nil {
		if bg.Err() == nil {
			s.log.Warn("list tenants", "err", err)
		}
		return
	}
	for _, t := range ts {
		if ctx.Err() != nil {
			return
		}
		if _, err := s.Evaluate(ctx, t.ID); err != nil && bg.Err() == nil {
			s.log.Warn("evaluate compliance", "tenant", t.ID, "err", err)
		}
	}
}

// interruptedAfter is how long a probe run may stay "running": a run that
// old was cut short by a server that stopped (the probe sandbox's own
// lifetime ends what it left).
const interruptedAfter = time.Hour

// failInterrupted records runs left "running" by a server that stopped as
// failed.
func (s *Service) failInterrupted(ctx context.Context) error {
	now := s.now()
	s.mu.Lock()
	mine := make([]string, 0, len(s.probing))
	for _, id := range s.probing {
		mine = append(mine, id)
	}
	s.mu.Unlock()
	q := s.db.WithContext(ctx).Model(&runRow{}).Where("state = ? AND started_at < ?", RunRunning, now.Add(-interruptedAfter))
	if len(mine) > 0 {
		q = q.Where("id NOT IN ?", mine)
	}
	return q.Updates(map[string]any{"state": RunFailed, "ended_at": now,
		"error": "interrupted: the server running it stopped", "output": gorm.Expr("output || ?", "\nprobe failed: interrupted: the server running it stopped\n")}).Error
}

func (s *Service) probeLoop(ctx context.Context) {
	defer s.wg.Done()
	t := s.cfg.Clock.NewTicker(min(s.cfg.Interval, s.cfg.ProbeInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		s.probeDue(ctx)
	}
}

// probeDue probes, one at a time, every tenant whose last probe started
// ProbeInterval ago (or, never probed, FirstProbeAfter after Start).
func (s *Service) probeDue(ctx context.Context) {
	ts, err := s.cfg.Tenants.ListTenants(ctx)
	if err != nil {
		return
	}
	for _, t := range ts {
		if ctx.Err() != nil {
			return
		}
		last, err := s.lastProbeStart(ctx, t.ID)
		if err != nil {
			continue
		}
		due := last.Add(s.cfg.ProbeInterval)
		if last.IsZero() {
			due = s.startAt.Add(s.cfg.FirstProbeAfter)
		}
		if s.now().Before(due) {
			continue
		}
		if _, err := s.RunProbe(ctx, SystemActor(), t.ID); err != nil && !errors.Is(err, errdefs.ErrConflict) && ctx.Err() == nil {
			s.log.Warn("scheduled probe", "tenant", t.ID, "err", err)
		}
	}
}
