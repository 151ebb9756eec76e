package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/probe"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/compliance"
	"github.com/stockade-dev/stockade/tenants/integrations"
	"github.com/stockade-dev/stockade/tenants/netguard"
	"github.com/stockade-dev/stockade/tenants/notify"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
	usagestore "github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/tenants/workflow"
	"github.com/stockade-dev/stockade/web"
)

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var cfg config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.flags(fs, getenv)
	waitLease := fs.Bool("wait-lease", getenv("STOCKADE_WAIT_LEASE") == "true",
		"wait for the server holding this installation to stop, instead of refusing to start (STOCKADE_WAIT_LEASE)")
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	if err := cfg.check(); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	db, err := tenants.Open(ctx, cfg.DB, cfg.DataDir)
	if err != nil {
		return err
	}
	if err := tenants.Migrate(ctx, db); err != nil {
		return fmt.Errorf("migrate database: %w", err)
	}
	// One server per installation: the lease is taken before anything
	// reconciles VMs or sandboxes; losing it stops this server.
	ctx, releaseLease, err := serveLease(ctx, db, *waitLease, log)
	if err != nil {
		return err
	}
	defer releaseLease() // last: everything else has closed
	store := tenants.NewStore(db, nil)
	installID, err := store.InstallationID(ctx)
	if err != nil {
		return err
	}
	root, err := cfg.rootKey()
	if err != nil {
		return err
	}
	// Secrets, encrypted under a key derived from the root key; also each
	// tenant's CA for the egress gateway's TLS termination.
	sec, err := secrets.New(db, root, secrets.Config{})
	if err != nil {
		return err
	}
	// The egress gateway: every sandbox connection, decided by the tenant
	// policy (read per connection, cached 2 s), logged in egress_events.
	pol, err := policy.NewStore(db, nil)
	if err != nil {
		return err
	}
	allowCIDRs, err := netguard.ParseAllowance(cfg.EgressAllowCIDRs)
	if err != nil {
		return fmt.Errorf("STOCKADE_EGRESS_ALLOW_CIDRS: %w", err)
	}
	egressEvents := egress.NewStore(db)
	auditLog := audit.NewLog(db, nil)
	// Refused connections are also audited (egress.denied), at most one
	// per sandbox and host a minute.
	gw, err := egress.New(egress.Config{Policies: egress.FromPolicy(pol), Store: egressEvents, Swapper: sec, Audit: auditLog,
		Sandboxes: egress.StoredSandboxes(sandbox.NewStore(db, nil)), AllowCIDRs: allowCIDRs, Logger: log})
	if err != nil {
		return err
	}
	// The VM pools start even with libvirtd down: they keep retrying, and
	// until a host answers VM pages and API say the hypervisor is unavailable.
	// A tenant an operator froze gets no VM and no sandbox (Freezes).
	vms, err := vmpool.New(ctx, db, vmpool.Config{URIs: splitList(cfg.LibvirtURIs), DataDir: cfg.DataDir, Logger: log, DomainType: cfg.DomainType,
		Egress: gw, Freezes: store, ExecGrace: cfg.ExecGrace})
	if err != nil {
		return err
	}
	if err := vms.Start(ctx); err != nil {
		return err
	}
	defer vms.Close() // leaves VMs running: the next start adopts them
	// After the VM pools: it reconciles sandboxes with the agents of the VMs
	// they adopted.
	// Each tenant's policy (pol, above) bounds its sandboxes at create.
	// Outgoing webhooks: lifecycle and run events go to an outbox in the
	// transactions of their changes; a dispatcher (below) delivers them.
	hooks := integrations.NewStore(db, integrations.Config{})
	sbx := sandbox.New(db, vms, sandbox.Config{DataDir: cfg.DataDir, Logger: log, Credentials: sec, Policies: pol, Freezes: store,
		Outbox: hooks, MaxFileBytes: cfg.MaxFileBytes, ExecGrace: cfg.ExecGrace})
	if err := sbx.Start(ctx); err != nil {
		return err
	}
	defer sbx.Close() // leaves sandboxes running: the next start adopts them
	terms := terminal.New(db, terminal.SandboxPTYs{Service: sbx}, terminal.Config{DataDir: cfg.DataDir, Logger: log,
		RecordInput: cfg.RecordInput, RetentionDays: cfg.RetentionDays,
		MaxRecordingBytes: mib(cfg.RecordingMaxMiB), MaxTenantRecordingBytes: mib(cfg.RecordingTenantMaxMiB),
		Exclusive: true, AdoptWindow: cfg.ExecGrace}) // the installation lease: terminals a stopped server left are taken up
	if err := terms.Start(ctx); err != nil {
		return err
	}
	defer terms.Close()         // ends the live terminals, recorded with the reason
	sbx.OnEnd(terms.EndSandbox) // a destroyed sandbox ends its terminals at once, for everyone
	// An ended sandbox's egress bytes stay in egress_events only.
	sbx.OnEnd(func(_, id, _ string) { gw.Forget(id) })
	// The compliance checklist: every tenant re-evaluated each
	// ComplianceInterval; the probe runs in a sandbox of each tenant every
	// ProbeInterval (and on demand), its sandboxes destroyed afterwards.
	hostShares, vmNICs, err := probe.DomainShares()
	if err != nil {
		return err
	}
	comp, err := compliance.New(db, compliance.Config{
		Policies: pol, Secrets: sec, Tenants: store, Live: probe.NewLive(db, nil),
		Prober: probe.NewRunner(sbx, probe.Config{Policies: pol, Logger: log,
			Targets: probe.Targets{ControlPlane: probe.HostPort(cfg.PublicURL)}}),
		Platform: compliance.Platform{DomainType: cfg.DomainType, HostMounts: hostShares, NetworkDevices: vmNICs, Gateway: true,
			AllowCIDRs: splitList(cfg.EgressAllowCIDRs), SecretsEncrypted: true, OperatorContacts: cfg.operatorList(),
			IncidentContacts: splitList(cfg.IncidentContacts), IncidentRunbookURL: cfg.IncidentRunbookURL,
			ControlPlane: cfg.PublicURL},
		Interval: cfg.ComplianceInterval, ProbeInterval: cfg.ProbeInterval, Logger: log,
	})
	if err != nil {
		return err
	}
	if err := comp.Start(ctx); err != nil {
		return err
	}
	defer comp.Close()
	// Workflows: each run gets a sandbox of its own, destroyed when it ends;
	// results go where the workflow says (Slack, Jira, signed webhooks).
	wfs, err := workflow.NewStore(db, nil)
	if err != nil {
		return err
	}
	sender := notify.New(db, notify.HostScoped(sec), notify.Config{Logger: log, GitHubAPI: cfg.GitHubAPI})
	dispatchCtx, stopDispatch := context.WithCancel(ctx)
	dispatched := make(chan struct{})
	go func() {
		defer close(dispatched)
		integrations.NewDispatcher(hooks, sender, integrations.DispatcherConfig{Logger: log}).Run(dispatchCtx)
	}()
	defer func() { stopDispatch(); <-dispatched }()
	runEngine := runs.NewEngine(runs.NewStore(db, nil), wfs, sbx, runs.Config{Outbox: hooks, ArtifactDir: filepath.Join(cfg.DataDir, "artifacts"),
		Logger: log, GitURL: cfg.GitHubURL, Notifier: runs.NotifyWith(sender, cfg.PublicURL), Costs: runs.LedgerCosts(usagestore.NewStore(db, nil))})
	if err := runEngine.Recover(ctx); err != nil {
		return err
	}
	defer func() { // before the sandbox service closes: cancelled runs destroy their sandboxes
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if err := runEngine.Close(cctx); err != nil {
			log.Warn("close run engine", "err", err)
		}
	}()
	metricsToken := ""
	if cfg.MetricsTokenFile != "" {
		b, err := os.ReadFile(cfg.MetricsTokenFile)
		if err != nil {
			return fmt.Errorf("STOCKADE_METRICS_TOKEN_FILE: %w", err)
		}
		if metricsToken = strings.TrimSpace(string(b)); len(metricsToken) < 16 {
			return fmt.Errorf("STOCKADE_METRICS_TOKEN_FILE %s: the token must be at least 16 characters", cfg.MetricsTokenFile)
		}
	}
	app, err := web.NewApp(ctx, web.AppConfig{
		PublicURL: cfg.PublicURL, OperatorEmails: cfg.operatorEmails(), RootKey: root, MetricsToken: metricsToken,
		OIDCIssuer: cfg.OIDCIssuer, OIDCClientID: cfg.OIDCClientID, OIDCClientSecret: cfg.OIDCSecret,
		Version: version, Log: log, VMs: vms, Sandboxes: sbx, Terminals: terms, Secrets: sec, Policies: pol,
		Egress: egressEvents, Usage: usagestore.NewStore(db, nil),
		UsageMetrics: usagestore.MetricsConfig{MaxTenants: cfg.MetricsTenants}, Compliance: comp,
		Workflows: wfs, Runs: runEngine, Integrations: hooks,
	}, store, auditLog)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- app.Serve(ctx, l) }()
	if err := app.ConnectDevIdP(ctx); err != nil {
		return err
	}
	go sweep(ctx, store, egressEvents, cfg.EgressRetentionDays, log)
	// Audit retention: each tenant's policy audit.retention_days (0 keeps
	// everything); every deletion is itself audited (audit.pruned).
	go audit.NewRetention(auditLog, audit.RetentionConfig{Logger: log,
		Tenants: func(ctx context.Context) ([]string, error) {
			ts, err := store.ListTenants(ctx)
			ids := make([]string, 0, len(ts))
			for _, t := range ts {
				ids = append(ids, t.ID)
			}
			return ids, err
		},
		Days: func(ctx context.Context, tenantID string) (int, error) {
			v, err := pol.Current(ctx, tenantID)
			return v.Doc.Audit.RetentionDays, err
		},
	}).Run(ctx)
	log.Info("stockade serving", "addr", l.Addr().String(), "public_url", cfg.PublicURL, "installation", installID,
		"database", dbKind(cfg.DB), "data_dir", cfg.DataDir, "version", version)
	fmt.Fprintf(stdout, "Stockade is running at %s\n", cfg.PublicURL)
	if err := <-errc; err != nil {
		return err
	}
	return leaseLost(ctx)
}

// splitList splits a comma-separated setting, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func dbKind(dsn string) string {
	if dsn == "" {
		return "sqlite"
	}
	return "postgres"
}

// sweep is the housekeeping loop: expired sessions, and egress events past
// their retention (the usage ledger keeps their bytes).
func sweep(ctx context.Context, store *tenants.Store, egressEvents *egress.Store, egressDays int, log *slog.Logger) {
	t := time.NewTicker(15 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := store.DeleteExpiredSessions(ctx); err != nil {
				log.Warn("sweep sessions", "err", err)
			} else if n > 0 {
				log.Info("swept expired sessions", "count", n)
			}
			if n, err := egressEvents.Prune(ctx, time.Now().AddDate(0, 0, -egressDays)); err != nil {
				log.Warn("prune egress events", "err", err)
			} else if n > 0 {
				log.Info("pruned egress events", "count", n, "retention_days", egressDays)
			}
			// Idempotency keys are remembered 24 h.
			if n, err := store.DeleteExpiredIdempotencyKeys(ctx); err != nil {
				log.Warn("sweep idempotency keys", "err", err)
			} else if n > 0 {
				log.Info("swept expired idempotency keys", "count", n)
			}
		}
	}
}
