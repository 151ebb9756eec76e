package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/stockade-dev/stockade/cmd/stockade/app"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
)

// serve parses the configuration, builds the server through the one
// composition root (cmd/stockade/app), takes the installation lease and
// runs it until ctx ends or the lease is lost.
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
	appCfg, err := cfg.app()
	if err != nil {
		return err
	}
	a, err := app.New(ctx, appCfg, app.Options{Log: log})
	if err != nil {
		return err
	}
	// On SQLite, one server per installation: the lease is taken before
	// anything reconciles VMs or sandboxes (Start); losing it stops this
	// server. On PostgreSQL any number of replicas run: the same lease is
	// the leader lease, which the App campaigns for (app.Leader).
	if a.Replicas == nil {
		var releaseLease func()
		ctx, releaseLease, err = serveLease(ctx, a.DB, a.Clock, *waitLease, log)
		if err != nil {
			a.Close()
			return err
		}
		// Released last, after every service has closed, while the
		// database is still open.
		a.LastOnDatabase(releaseLease)
	}
	defer a.Close() // leaves VMs and sandboxes running: the next start adopts them
	if err := a.Start(ctx); err != nil {
		return err
	}
	l, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	err = a.Serve(ctx, l, func() {
		log.Info("stockade serving", "addr", l.Addr().String(), "public_url", cfg.PublicURL, "installation", a.InstallationID,
			"database", dbKind(cfg.DB), "data_dir", cfg.DataDir, "version", version)
		fmt.Fprintf(stdout, "Stockade is running at %s\n", cfg.PublicURL)
	})
	if err != nil {
		return err
	}
	return leaseLost(ctx)
}

// app is the composition root's configuration, with the files read.
func (c *config) app() (app.Config, error) {
	root, err := c.rootKey()
	if err != nil {
		return app.Config{}, err
	}
	metricsToken := ""
	if c.MetricsTokenFile != "" {
		b, err := os.ReadFile(c.MetricsTokenFile)
		if err != nil {
			return app.Config{}, fmt.Errorf("STOCKADE_METRICS_TOKEN_FILE: %w", err)
		}
		if metricsToken = strings.TrimSpace(string(b)); len(metricsToken) < 16 {
			return app.Config{}, fmt.Errorf("STOCKADE_METRICS_TOKEN_FILE %s: the token must be at least 16 characters", c.MetricsTokenFile)
		}
	}
	hostFiles, err := vmpool.ParseFilesModes("STOCKADE_HOST_FILES", c.HostFiles)
	if err != nil {
		return app.Config{}, err
	}
	return app.Config{
		PublicURL: c.PublicURL, InternalURL: c.internalURL(), PreviewDomain: c.PreviewDomain, DataDir: c.DataDir, DB: c.DB, RootKey: root,
		OIDCIssuer: c.OIDCIssuer, OIDCClientID: c.OIDCClientID, OIDCClientSecret: c.OIDCSecret,
		OperatorEmails: c.operatorList(), Version: version,
		LibvirtURIs: splitList(c.LibvirtURIs), HostFiles: hostFiles, HostPoolDir: c.HostPoolDir, DomainType: c.DomainType, ExecGrace: c.ExecGrace, VMSnapshots: c.VMSnapshots, VMSnapshotsShared: c.VMSnapshotsShared, ChannelStream: !c.ChannelDirect, MaxFileBytes: c.MaxFileBytes,
		EgressAllowCIDRs: splitList(c.EgressAllowCIDRs), EgressRetentionDays: c.EgressRetentionDays,
		PrestartPerTemplate: c.PrestartPerTemplate,
		TemplateRegistries:  splitList(c.TemplateRegistries), TemplateMaxUploadBytes: c.TemplateMaxUpload,
		RecordInput: c.RecordInput, RecordingRetentionDays: c.RetentionDays,
		MaxRecordingBytes: mib(c.RecordingMaxMiB), MaxTenantRecordingBytes: mib(c.RecordingTenantMaxMiB),
		ComplianceInterval: c.ComplianceInterval, ProbeInterval: c.ProbeInterval,
		IncidentContacts: splitList(c.IncidentContacts), IncidentRunbookURL: c.IncidentRunbookURL,
		GitHubAPI: c.GitHubAPI, GitHubURL: c.GitHubURL,
		MetricsToken: metricsToken, MetricsTenants: c.MetricsTenants,
	}, nil
}

// internalURL is STOCKADE_INTERNAL_URL, default http://ADDR (a wildcard
// listen host: this machine's name).
func (c *config) internalURL() string {
	if c.InternalURL != "" {
		return strings.TrimRight(c.InternalURL, "/")
	}
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return "http://" + c.Addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return "http://" + net.JoinHostPort(host, port)
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
