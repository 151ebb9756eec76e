// Package app is Stockade's composition root: New builds the whole server
// from its configuration in one direction — database, stores, services,
// handlers, HTTP server — for `stockade serve` and for the test harness
// (web/webtest), which passes Options to swap in a clock, an identity
// provider hook, a database, or services it runs itself.
//
// It is the one package that imports every layer (web, handlers, sandbox,
// hypervisor-facing services, tenants); it lives beside the CLI rather than
// in package main so that test harnesses can build the same server, and no
// package but cmd/stockade and test harnesses imports it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/handlers/e2b"
	"github.com/stockade-dev/stockade/handlers/github"
	"github.com/stockade-dev/stockade/handlers/mcp"
	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/probe"
	"github.com/stockade-dev/stockade/sandbox/replicas"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/sandbox/templates/oci"
	"github.com/stockade-dev/stockade/sandbox/templates/recipe"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/sandbox/volumes"
	"github.com/stockade-dev/stockade/static"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/compliance"
	"github.com/stockade-dev/stockade/tenants/integrations"
	"github.com/stockade-dev/stockade/tenants/netguard"
	"github.com/stockade-dev/stockade/tenants/notify"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/tenants/workflow"
	"github.com/stockade-dev/stockade/web"
	"github.com/stockade-dev/stockade/web/forward"
)

// Config is the deployment: what `stockade serve` reads from its
// environment and flags (cmd/stockade checks and defaults it first).
type Config struct {
	PublicURL string // where people reach the server; https makes cookies Secure
	DataDir   string // guest image, recordings, artifacts, scratch disks
	// DB is the database: "" for SQLite in DataDir, or a postgres:// DSN.
	DB string
	// RootKey signs cookies and derives the secrets' keys (at least 32
	// bytes).
	RootKey []byte
	// OIDCIssuer and its client; an empty issuer runs the development
	// identity provider inside this server.
	OIDCIssuer, OIDCClientID, OIDCClientSecret string
	OperatorEmails                             []string // platform operators
	Version                                    string

	// LibvirtURIs are the VM hosts (default qemu:///system); DomainType
	// forces kvm or qemu ("" detects).
	LibvirtURIs []string
	DomainType  string
	// HostFiles and HostPoolDir: vmpool.Config's (remote hosts' files).
	HostFiles   map[string]vmpool.FilesMode
	HostPoolDir string
	// ExecGrace is how long commands and terminals outlive a lost agent
	// session (0: the agent's default).
	ExecGrace time.Duration
	// VMSnapshots restores VMs from memory snapshots (vmpool snapshot.go).
	VMSnapshots bool
	// VMSnapshotsShared makes one snapshot serve every tenant (vmpool
	// Config.SnapshotsShared).
	VMSnapshotsShared bool
	// ChannelStream: agent channels through libvirt's stream API even on
	// local hosts (vmpool Config.ChannelStream).
	ChannelStream bool
	// PrestartPerTemplate is each VM's pre-started sandboxes per template
	// (0: none; sandbox/prestart.go).
	PrestartPerTemplate int
	// MaxFileBytes bounds one file through the files API (0: the default).
	MaxFileBytes int64

	// EgressAllowCIDRs are private ranges the egress gateway may reach
	// (netguard.ParseAllowance); EgressRetentionDays how long its events
	// are kept (0: 90).
	EgressAllowCIDRs    []string
	EgressRetentionDays int

	// TemplateRegistries are the registries tenants may pull template
	// images from (STOCKADE_TEMPLATE_REGISTRIES); TemplateMaxUploadBytes
	// bounds an image upload (0: 2 GiB).
	TemplateRegistries     []string
	TemplateMaxUploadBytes int64

	// Terminal recordings: keystrokes too, retention, and caps in bytes
	// per session and per tenant (negative: none; 0: the defaults).
	RecordInput                                bool
	RecordingRetentionDays                     int
	MaxRecordingBytes, MaxTenantRecordingBytes int64

	// Compliance: how often every tenant's checklist is re-evaluated and
	// the probe runs (negative ProbeInterval: on demand only), and the
	// platform's incident-response process.
	ComplianceInterval, ProbeInterval time.Duration
	IncidentContacts                  []string
	IncidentRunbookURL                string

	// GitHubAPI is where workflow results are posted, GitHubURL where runs
	// clone from (empty: github.com).
	GitHubAPI, GitHubURL string

	// MetricsToken is the bearer token /metrics requires (empty: loopback
	// only); MetricsTenants bounds the tenants with a label of their own.
	MetricsToken   string
	MetricsTenants int

	// HTTP: session expiries, request body and streamed-write bounds (zero:
	// the defaults).
	SessionIdle, SessionAbsolute    time.Duration
	BodyTimeout, StreamWriteTimeout time.Duration
	// PreviewDomain (STOCKADE_PREVIEW_DOMAIN): preview links at
	// <port>-<sandbox id>.<domain>; empty: at /preview/<token>/.
	PreviewDomain string
	// InternalURL (STOCKADE_INTERNAL_URL) is where the other replicas
	// reach this one; default PublicURL. PostgreSQL only.
	InternalURL string
}

// Options are what tests change; the zero value is production. A store or
// service given here is used instead of the one New would build: its maker
// runs and closes it (Start and Close leave it alone).
type Options struct {
	Log      *slog.Logger         // default slog.Default()
	Registry *prometheus.Registry // default a fresh registry
	Clock    clockwork.Clock      // default the real clock
	// DevIdPMutateClaims lets tests make the development provider misbehave.
	DevIdPMutateClaims func(map[string]any)
	// DB is an opened and migrated database, which the caller closes;
	// default: Config.DB opened and migrated, closed by Close.
	DB *gorm.DB

	VMs          *vmpool.Service
	Sandboxes    *sandbox.Service
	Terminals    *terminal.Service
	Secrets      *secrets.Store
	Policies     *policy.Store
	Egress       *egress.Store
	Usage        *usage.Store
	Compliance   handlers.Compliance
	Workflows    *workflow.Store
	Runs         *runs.Engine
	Integrations *integrations.Store
	// Owners, when set, says which replica owns each VM's agent channel:
	// requests needing a channel another replica owns are forwarded there
	// (web/forward), signed under a key derived from RootKey.
	Owners forward.Owners
	// TemplateImportGateway carries template image pulls (default: an
	// egress gateway on the configured policies and ranges).
	TemplateImportGateway oci.Dialer
}

// App is the assembled server. Its fields are what New built or was
// given, for serve's loops and for tests.
type App struct {
	*web.Server

	DB             *gorm.DB
	Clock          clockwork.Clock // the one clock every part reads
	InstallationID string
	Store          *tenants.Store
	Audit          *audit.Log
	Secrets        *secrets.Store
	Policies       *policy.Store
	Egress         *egress.Store
	Usage          *usage.Store
	Workflows      *workflow.Store
	Integrations   *integrations.Store
	VMs            *vmpool.Service
	Sandboxes      *sandbox.Service
	Templates      *templates.Service // tenants' own templates
	TemplateBuilds *recipe.Builder    // recipe builds of tenant templates
	Terminals      *terminal.Service
	Compliance     handlers.Compliance
	Runs           *runs.Engine
	// Replicas and Leader: this replica's registration and leader lease
	// (PostgreSQL only; nil with SQLite's one server).
	Replicas *replicas.Registry
	Leader   *Leader
	Imports  *oci.Importer // tenant templates from OCI images
	Volumes  *volumes.Service

	cfg      Config
	log      *slog.Logger
	identity *identity
	sender   *notify.Sender

	// What New built itself, and so Start starts and Close closes.
	closeDB              bool
	lastOnDB             []func() // LastOnDatabase
	ownVMs, ownSandboxes bool
	ownTerminals, ownRun bool
	ownCompliance        *compliance.Service
	// stops ends the background work Start began, last started first.
	stops []func()
	repl  replication // replicas.go
}

// New builds the server: the database (opened and migrated unless given),
// every store once, the services on those stores, the handlers on the
// services, and the HTTP server on the handlers. Nothing runs yet: Start
// starts the services' background work (VM pools, sandbox reconcile,
// terminals, compliance, webhook delivery, run recovery), Serve serves
// HTTP. A server that is never started serves its records, and everything
// needing a VM answers unavailable. Close releases what New built.
func New(ctx context.Context, cfg Config, o Options) (a *App, err error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	clock := o.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	o.Clock = clock
	a = &App{cfg: cfg, log: log, Clock: clock}
	defer func() {
		if err != nil {
			a.Close()
			a = nil
		}
	}()
	// Config -> database.
	if a.DB = o.DB; a.DB == nil {
		if a.DB, err = tenants.Open(ctx, cfg.DB, cfg.DataDir); err != nil {
			return a, err
		}
		a.closeDB = true
		if err := tenants.Migrate(ctx, a.DB); err != nil {
			return a, fmt.Errorf("migrate database: %w", err)
		}
	}
	// The one clock: services take it whole (their timers too), stores
	// and the HTTP side read it.
	db, now := a.DB, clock.Now

	// Database -> stores, each built once.
	a.Store, a.Audit = tenants.NewStore(db, now), audit.NewLog(db, now)
	if a.InstallationID, err = a.Store.InstallationID(ctx); err != nil {
		return a, err
	}
	if a.Secrets = o.Secrets; a.Secrets == nil {
		// Secrets, encrypted under a key derived from the root key; also
		// each tenant's CA for the egress gateway's TLS termination.
		if a.Secrets, err = secrets.New(db, cfg.RootKey, secrets.Config{Clock: clock}); err != nil {
			return a, err
		}
	}
	if a.Policies = o.Policies; a.Policies == nil {
		if a.Policies, err = policy.NewStore(db, now); err != nil {
			return a, err
		}
	}
	if a.Workflows = o.Workflows; a.Workflows == nil {
		if a.Workflows, err = workflow.NewStore(db, now); err != nil {
			return a, err
		}
	}
	if a.Egress = o.Egress; a.Egress == nil {
		a.Egress = egress.NewStore(db)
	}
	if a.Usage = o.Usage; a.Usage == nil {
		a.Usage = usage.NewStore(db, now)
	}
	if a.Integrations = o.Integrations; a.Integrations == nil {
		// Outgoing webhooks: lifecycle and run events go to an outbox in
		// the transactions of their changes; Start's dispatcher delivers.
		a.Integrations = integrations.NewStore(db, integrations.Config{Clock: now})
	}
	sandboxes := sandbox.NewStore(db, now)
	if o.Sandboxes != nil {
		sandboxes = o.Sandboxes.Store()
	}

	// Stores -> services.
	if err := a.services(ctx, cfg, o, sandboxes); err != nil {
		return a, err
	}

	// Services -> handlers -> server.
	if err := a.server(ctx, cfg, o, log, reg); err != nil {
		return a, err
	}
	return a, nil
}

// services builds the services New was not given, on the stores.
func (a *App) services(ctx context.Context, cfg Config, o Options, sandboxes *sandbox.Store) error {
	clock, log := o.Clock, a.log
	a.VMs, a.Sandboxes, a.Terminals, a.Runs, a.Compliance = o.VMs, o.Sandboxes, o.Terminals, o.Runs, o.Compliance
	var gw *egress.Gateway
	if a.VMs == nil {
		// The egress gateway: every sandbox connection, decided by the
		// tenant policy (read per connection, cached 2 s), logged in
		// egress_events; refusals also audited (egress.denied), at most one
		// per sandbox and host a minute.
		allow, err := netguard.ParseAllowance(strings.Join(cfg.EgressAllowCIDRs, ","))
		if err != nil {
			return fmt.Errorf("STOCKADE_EGRESS_ALLOW_CIDRS: %w", err)
		}
		gw, err = egress.New(egress.Config{Policies: egress.FromPolicy(a.Policies), Store: a.Egress, Swapper: a.Secrets, Audit: a.Audit,
			Sandboxes: egress.StoredSandboxes(sandboxes), AllowCIDRs: allow, Logger: log, Clock: clock})
		if err != nil {
			return err
		}
		// The VM pools run even with libvirtd down: they keep retrying,
		// and until a host answers VM pages and API say the hypervisor is
		// unavailable. A tenant an operator froze gets no VM (Freezes).
		if err := a.newReplication(cfg); err != nil {
			return err
		}
		if a.VMs, err = vmpool.NewService(vmpool.NewStore(a.DB, clock.Now), a.Store, a.Audit, a.InstallationID, vmpool.Config{
			URIs: cfg.LibvirtURIs, DataDir: cfg.DataDir, Logger: log, Clock: clock, DomainType: cfg.DomainType,
			HostFiles: cfg.HostFiles, PoolDir: cfg.HostPoolDir, ChannelStream: cfg.ChannelStream,
			Egress: gw, Freezes: a.Store, ExecGrace: cfg.ExecGrace, Leader: a.leading(), Leases: a.vmLeases(),
			Snapshots: cfg.VMSnapshots, SnapshotsShared: cfg.VMSnapshotsShared,
			AgentReady: a.prestartHook(cfg, log),
		}); err != nil {
			return err
		}
		a.ownVMs = true
	}
	if a.Templates == nil {
		var err error
		if a.Templates, err = templates.New(templates.Config{DB: a.DB, DataDir: cfg.DataDir, Clock: clock, Logger: log,
			Builtins: func() []image.Template {
				if a.Sandboxes == nil {
					return nil
				}
				return a.Sandboxes.Templates()
			}}); err != nil {
			return err
		}
	}
	// Tenant volumes, hot-attached to the tenant's VMs (volumes.go).
	vols, err := newVolumes(a, cfg, log)
	if err != nil {
		return err
	}
	a.Volumes = vols
	if a.Sandboxes == nil {
		// Each tenant's policy bounds its sandboxes at create; a frozen
		// tenant gets none.
		var err error
		if a.Sandboxes, err = sandbox.NewService(sandboxes, a.Usage, a.VMs, sandbox.Config{DataDir: cfg.DataDir, Logger: log, Clock: clock,
			Credentials: a.Secrets, Policies: a.Policies, Freezes: a.Store, Outbox: a.Integrations, TenantTemplates: a.Templates,
			Volumes:      a.Volumes,
			MaxFileBytes: cfg.MaxFileBytes, ExecGrace: cfg.ExecGrace, Replicated: a.multiReplica()}); err != nil {
			return err
		}
		a.ownSandboxes = true
	}
	if gw != nil {
		// An ended sandbox's egress bytes stay in egress_events only.
		a.Sandboxes.OnEnd(func(_, id, _ string) { gw.Forget(id) })
	}
	if a.Terminals == nil {
		a.Terminals = terminal.NewService(terminal.NewStore(a.DB, clock.Now), terminal.SandboxPTYs{Service: a.Sandboxes}, terminal.Config{
			DataDir: cfg.DataDir, Logger: log, Clock: clock, RecordInput: cfg.RecordInput, RetentionDays: cfg.RecordingRetentionDays,
			MaxRecordingBytes: cfg.MaxRecordingBytes, MaxTenantRecordingBytes: cfg.MaxTenantRecordingBytes,
			// serve holds the installation lease before Start: terminals a
			// stopped server left are taken up again while their PTYs
			// live in the agent (the exec grace).
			// With replicas (not Exclusive) the owner of a VM takes up the
			// terminals a killed replica left, on the first Join.
			Exclusive: !a.multiReplica(), AdoptWindow: cfg.ExecGrace,
		})
		a.ownTerminals = true
		// A destroyed sandbox ends its terminals at once, for everyone.
		a.Sandboxes.OnEnd(a.Terminals.EndSandbox)
		a.Sandboxes.OnEnding(a.Terminals.SandboxEnding)
	}
	if a.Compliance == nil {
		// The checklist: every tenant re-evaluated each ComplianceInterval;
		// the probe runs in a sandbox of each tenant every ProbeInterval
		// (and on demand), its sandboxes destroyed afterwards.
		hostShares, vmNICs, err := probe.DomainShares()
		if err != nil {
			return err
		}
		svc, err := compliance.New(a.DB, compliance.Config{
			Policies: a.Policies, Secrets: a.Secrets, Tenants: a.Store, Live: probe.NewLiveOn(a.DB, sandboxes, clock.Now),
			Prober: probe.NewRunner(a.Sandboxes, probe.Config{Policies: a.Policies, Logger: log,
				Targets: probe.Targets{ControlPlane: probe.HostPort(cfg.PublicURL)}}),
			Platform: compliance.Platform{DomainType: cfg.DomainType, HostMounts: hostShares, NetworkDevices: vmNICs, Gateway: true,
				AllowCIDRs: cfg.EgressAllowCIDRs, SecretsEncrypted: true, OperatorContacts: sortedLower(cfg.OperatorEmails),
				IncidentContacts: cfg.IncidentContacts, IncidentRunbookURL: cfg.IncidentRunbookURL, ControlPlane: cfg.PublicURL},
			Interval: cfg.ComplianceInterval, ProbeInterval: cfg.ProbeInterval, Logger: log, Clock: clock,
		})
		if err != nil {
			return err
		}
		a.Compliance, a.ownCompliance = svc, svc
	}
	if err := a.templateBuilds(cfg); err != nil {
		return err
	}
	// Notifications (Slack, Jira, GitHub, signed webhooks) for runs and the
	// webhook dispatcher.
	a.sender = notify.New(a.DB, notify.HostScoped(a.Secrets), notify.Config{Logger: log, Clock: clock.Now, Timers: clock, GitHubAPI: cfg.GitHubAPI})
	if a.Runs == nil {
		// Workflows: each run gets a sandbox of its own, destroyed when it
		// ends; results go where the workflow says.
		a.Runs = runs.NewEngine(runs.NewStore(a.DB, clock.Now), a.Workflows, a.Sandboxes, runs.Config{Outbox: a.Integrations,
			ArtifactDir: filepath.Join(cfg.DataDir, "artifacts"), Logger: log, GitURL: cfg.GitHubURL,
			Notifier: runs.NotifyWith(a.sender, cfg.PublicURL), Costs: runs.LedgerCosts(a.Usage),
			ReplicaID: a.replicaID(), LiveReplicas: a.liveReplicas()})
		a.ownRun = true
	}
	return nil
}

// server builds the identity provider, the handlers and the HTTP server.
func (a *App) server(ctx context.Context, cfg Config, o Options, log *slog.Logger, reg *prometheus.Registry) error {
	secure := strings.HasPrefix(cfg.PublicURL, "https://")
	id, err := newIdentity(ctx, cfg, secure, o.DevIdPMutateClaims, o.Clock.Now, log)
	if err != nil {
		return err
	}
	a.identity = id
	assets, err := static.Version()
	if err != nil {
		return fmt.Errorf("static assets: %w", err)
	}
	operators := map[string]bool{}
	for _, e := range sortedLower(cfg.OperatorEmails) {
		operators[e] = true
	}
	if a.Imports, err = a.templateImports(cfg, o); err != nil {
		return err
	}
	h, err := handlers.New(handlers.Config{
		ProviderName: id.providerName, DevIdP: id.dev != nil, SecureCookies: secure,
		OperatorEmails: operators, AssetVersion: assets, FlashKey: web.Derive(cfg.RootKey, "flash"),
		SessionIdle: cfg.SessionIdle, SessionAbsolute: cfg.SessionAbsolute, PublicURL: cfg.PublicURL,
		StreamWriteTimeout: cfg.StreamWriteTimeout, PreviewDomain: cfg.PreviewDomain,
	}, handlers.Deps{
		Store: a.Store, Audit: a.Audit, IdP: id.rp, Log: log, Clock: o.Clock.Now, VMs: a.VMs, Sandboxes: a.Sandboxes, Terminals: a.Terminals,
		Secrets: a.Secrets, Policies: a.Policies, Egress: a.Egress, Usage: a.Usage,
		Compliance: a.Compliance, Workflows: a.Workflows, Runs: a.Runs, Integrations: a.Integrations, Templates: a.Templates,
		Replication:     a.replicationStatus(),
		TemplateImports: a.Imports, Volumes: a.Volumes, TemplateBuilds: a.TemplateBuilds,
		Ready: func(ctx context.Context) error {
			if !id.rp.ready() {
				return errors.New("identity provider not ready")
			}
			return a.Store.Ping(ctx)
		},
	})
	if err != nil {
		return err
	}
	if err := a.registerReplicaMetrics(reg); err != nil {
		return fmt.Errorf("register replica metrics: %w", err)
	}
	if a.VMs != nil {
		if err := reg.Register(newSnapshotCollector(a.VMs)); err != nil {
			return fmt.Errorf("register vm snapshot metrics: %w", err)
		}
	}
	// Per-tenant usage and cost, and every running VM's figures.
	if err := reg.Register(usage.NewCollector(a.Usage, usage.MetricsConfig{MaxTenants: cfg.MetricsTenants, Log: log,
		VMs: vmFigures(a.VMs)})); err != nil {
		return fmt.Errorf("register usage metrics: %w", err)
	}
	var devHandler http.Handler
	if id.dev != nil {
		devHandler = id.dev.Handler()
	}
	mcpServer, err := mcp.New(mcp.Deps{Sandboxes: a.Sandboxes, Audit: a.Audit, Log: log, Version: cfg.Version, PublicURL: cfg.PublicURL})
	if err != nil {
		return err
	}
	var fwd *forward.Forwarder
	owners := o.Owners
	if owners == nil {
		owners = a.forwardOwners() // replicas: this one's registry
	}
	if owners != nil {
		if fwd, err = forward.New(forward.Config{Owners: owners, Sandboxes: a.Sandboxes.Store(), Previews: a.Sandboxes, Key: cfg.RootKey,
			Clock: o.Clock, Log: log, Registerer: reg}); err != nil {
			return err
		}
	}
	a.Server, err = web.New(web.Config{
		PublicURL: cfg.PublicURL, SecureCookies: secure, OperatorEmails: operators,
		DevIdP: devHandler, DevIdPPath: web.DevIdPPath, MetricsToken: cfg.MetricsToken, BodyTimeout: cfg.BodyTimeout,
		GitHub: &github.Receiver{Tenants: a.Store, Workflows: a.Workflows, Secrets: notify.HostScoped(a.Secrets),
			Runs: a.Runs.Store(), Starter: a.Runs, Log: log},
		MCP: mcpServer,
		E2B: e2b.New(e2b.Deps{Sandboxes: a.Sandboxes, DB: a.DB, Log: log, Now: o.Clock.Now}), E2BAPIKeyToken: e2b.APIKeyToken, E2BError: e2b.WriteError,
		Forward: fwd,
	}, a.Store, h, log, reg)
	return err
}

// Start starts the background work of the services New built, in order:
// the VM pools (adopting running VMs), the sandboxes (reconciled with the
// agents of those VMs), terminals, compliance, webhook delivery, and the
// recovery of workflow runs a stopped server left. serve calls it once it
// holds the installation lease; ctx bounds the background work.
func (a *App) Start(ctx context.Context) error {
	if err := a.startReplication(ctx); err != nil {
		return err
	}
	if a.ownVMs {
		if err := a.VMs.Start(ctx); err != nil {
			return err
		}
	}
	if a.ownSandboxes {
		if err := a.Sandboxes.Start(ctx); err != nil {
			return err
		}
	}
	if a.ownTerminals {
		if err := a.Terminals.Start(ctx); err != nil {
			return err
		}
	}
	if a.ownCompliance != nil && a.Leader != nil {
		// With replicas the leader evaluates and probes, term by term.
		a.singleton(ctx, "compliance", a.ownCompliance.Run)
	} else if a.ownCompliance != nil {
		if err := a.ownCompliance.Start(ctx); err != nil {
			return err
		}
	}
	dctx, stop := context.WithCancel(ctx)
	wait := a.singleton(dctx, "webhook dispatch", func(ctx context.Context) {
		integrations.NewDispatcher(a.Integrations, a.sender, integrations.DispatcherConfig{Logger: a.log}).Run(ctx)
	})
	a.stops = append(a.stops, func() { stop(); wait() })
	if a.ownRun && a.Leader != nil {
		// With replicas the leader recovers runs, at each term's start.
		a.singleton(ctx, "run recovery", a.recoverRuns)
	} else if a.ownRun {
		if err := a.Runs.Recover(ctx); err != nil {
			return err
		}
	}
	return a.startTemplateBuilds(ctx)
}

// Serve serves HTTP on l until ctx ends, then shuts down gracefully. With
// the development identity provider it discovers it once listening;
// ready, when set, is called then. The housekeeping loops (expired
// sessions and idempotency keys, egress and audit retention) run meanwhile.
func (a *App) Serve(ctx context.Context, l net.Listener, ready func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- a.Server.Serve(ctx, l) }()
	if err := a.ConnectDevIdP(ctx); err != nil {
		cancel()
		<-errc
		return err
	}
	a.singleton(ctx, "sweep", a.sweep)
	a.singleton(ctx, "audit retention", a.retention().Run)
	if ready != nil {
		ready()
	}
	return <-errc
}

// ConnectDevIdP discovers the embedded development provider over HTTP,
// once this server is listening. It is a no-op with a real issuer.
func (a *App) ConnectDevIdP(ctx context.Context) error { return a.identity.connect(ctx) }

// Close stops what Start began and closes what New built, in the reverse
// order: runs (their sandboxes destroyed), webhook delivery, compliance,
// terminals (ended, recorded with the reason), sandboxes and VM pools
// (both left running: the next start adopts them), the database. It is
// safe on a partly built App.
func (a *App) Close() {
	if a.ownRun && a.Runs != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := a.Runs.Close(cctx); err != nil {
			a.log.Warn("close run engine", "err", err)
		}
		cancel()
	}
	for i := len(a.stops) - 1; i >= 0; i-- {
		a.stops[i]()
	}
	a.stops = nil
	if a.ownCompliance != nil {
		a.ownCompliance.Close()
	}
	if a.ownTerminals && a.Terminals != nil {
		a.Terminals.Close()
	}
	if a.ownSandboxes && a.Sandboxes != nil {
		a.Sandboxes.Close()
	}
	if a.ownVMs && a.VMs != nil {
		a.VMs.Close()
	}
	a.closeReplication()
	for i := len(a.lastOnDB) - 1; i >= 0; i-- {
		a.lastOnDB[i]()
	}
	a.lastOnDB = nil
	if a.closeDB && a.DB != nil {
		if sqlDB, err := a.DB.DB(); err == nil {
			sqlDB.Close()
		}
	}
	a.ownRun, a.ownCompliance, a.ownTerminals, a.ownSandboxes, a.ownVMs, a.closeDB = false, nil, false, false, false, false
}

// LastOnDatabase makes f the last thing Close does on the database, after
// every service has closed and before the database does: serve releases
// the installation lease there.
func (a *App) LastOnDatabase(f func()) { a.lastOnDB = append(a.lastOnDB, f) }

// vmFigures gives the usage metrics every running VM with libvirt's figures.
func vmFigures(vms *vmpool.Service) func(context.Context) ([]usage.VMFigure, error) {
	return func(ctx context.Context) ([]usage.VMFigure, error) {
		all, err := vms.ListAll(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]usage.VMFigure, 0, len(all))
		for _, st := range all {
			if st.VM.State == vmpool.StateRunning {
				out = append(out, usage.VMFigure{TenantID: st.VM.TenantID, VCPUs: st.VM.VCPUs, MemoryMiB: st.VM.MemoryMiB, CPUTime: st.CPUTime})
			}
		}
		return out, nil
	}
}
