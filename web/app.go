package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/handlers/github"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/static"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/integrations"
	"github.com/stockade-dev/stockade/tenants/notify"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/tenants/workflow"
	"github.com/stockade-dev/stockade/web/authn"
	"github.com/stockade-dev/stockade/web/devidp"
)

// DevIdPPath is where the development identity provider is mounted.
const DevIdPPath = "/dev-idp"

// AppConfig is everything needed to assemble the web app.
type AppConfig struct {
	PublicURL      string
	OperatorEmails map[string]bool
	RootKey        []byte // signs cookies; derive per purpose
	// OIDC issuer and client; an empty Issuer runs the development identity
	// provider inside this server.
	OIDCIssuer, OIDCClientID, OIDCClientSecret string
	Version                                    string
	Log                                        *slog.Logger
	Registry                                   *prometheus.Registry
	// DevIdPMutateClaims lets tests make the development provider misbehave.
	DevIdPMutateClaims func(map[string]any)
	SessionIdle        time.Duration
	SessionAbsolute    time.Duration
	Clock              func() time.Time
	// VMs runs the tenant VM pools; nil serves VM pages and API as unavailable.
	VMs *vmpool.Service
	// Sandboxes runs the sandboxes; nil serves their pages and API as
	// unavailable.
	Sandboxes *sandbox.Service
	// Terminals runs the sandboxes' terminals; nil serves them as
	// unavailable.
	Terminals *terminal.Service
	// Secrets keeps the tenants' secrets and CAs; nil serves the secrets
	// pages and API as unavailable.
	Secrets *secrets.Store
	// Policies keeps the tenants' policy versions; nil serves the policy
	// pages and API as not found.
	Policies *policy.Store
	// Egress keeps the egress gateway's decisions; nil serves the egress
	// page and API as unavailable.
	Egress *egress.Store
	// Usage meters and prices what sandboxes use (one store, shared by the
	// pages, the API and the metrics); nil serves usage pages and API as
	// unavailable and exports no tenant metrics.
	Usage *usage.Store
	// UsageMetrics bounds the per-tenant metrics (zero: the defaults).
	UsageMetrics usage.MetricsConfig
	// BodyTimeout bounds how long a request body may take to arrive (plus
	// its size at DefaultBodyMinRate); zero: DefaultBodyTimeout.
	BodyTimeout time.Duration
	// StreamWriteTimeout bounds one write of a streamed exec to a client
	// that stopped reading: past it the command is killed (reason
	// timeout); zero: handlers.DefaultStreamWriteTimeout.
	StreamWriteTimeout time.Duration
	// MetricsToken is the bearer token /metrics requires; empty: loopback only.
	MetricsToken string
	// Compliance evaluates the security checklist and runs the probe
	// (*compliance.Service); nil serves the compliance page without a
	// checklist and its API as unavailable.
	Compliance handlers.Compliance
	// Workflows keeps the tenants' workflows; nil serves the workflow API
	// as unavailable and refuses GitHub deliveries.
	Workflows *workflow.Store
	// Runs executes workflow runs; nil serves the run API as unavailable
	// and refuses GitHub deliveries.
	Runs *runs.Engine
	// Integrations keeps outgoing webhook endpoints and their deliveries;
	// nil serves their pages and API as unavailable.
	Integrations *integrations.Store
}

// App is the assembled web app: the server and its relying party.
type App struct {
	*Server
	rp    *lateRP
	rpCfg authn.Config
	dev   bool
}

// NewApp wires handlers, the identity provider and the server. With a real
// issuer it discovers it now and fails with a clear message if it cannot;
// with the development provider call ConnectDevIdP once the server listens.
func NewApp(ctx context.Context, cfg AppConfig, store *tenants.Store, auditLog *audit.Log) (*App, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	secure := len(cfg.PublicURL) > 8 && cfg.PublicURL[:8] == "https://"
	a := &App{rp: &lateRP{}}
	a.rpCfg = authn.Config{
		Issuer: cfg.OIDCIssuer, ClientID: cfg.OIDCClientID, ClientSecret: cfg.OIDCClientSecret,
		RedirectURL: cfg.PublicURL + "/auth/callback", CookieKey: Derive(cfg.RootKey, "login-flow"),
		SecureCookies: secure, Clock: cfg.Clock,
	}
	var devHandler http.Handler
	providerName := cfg.OIDCIssuer
	if cfg.OIDCIssuer == "" {
		a.dev = true
		secret := make([]byte, 24)
		if _, err := rand.Read(secret); err != nil {
			return nil, err
		}
		a.rpCfg.Issuer = cfg.PublicURL + DevIdPPath
		a.rpCfg.ClientID, a.rpCfg.ClientSecret = "stockade", hex.EncodeToString(secret)
		idp, err := devidp.New(devidp.Config{
			Issuer:       a.rpCfg.Issuer,
			Clients:      []devidp.Client{{ID: a.rpCfg.ClientID, Secret: a.rpCfg.ClientSecret, RedirectURIs: []string{a.rpCfg.RedirectURL}}},
			Logger:       cfg.Log,
			MutateClaims: cfg.DevIdPMutateClaims,
			Clock:        cfg.Clock,
		})
		if err != nil {
			return nil, err
		}
		devHandler = idp.Handler()
		providerName = "development identity provider"
		cfg.Log.Warn("development identity provider active: anyone who can reach this server can sign in as any email; set STOCKADE_OIDC_ISSUER for real use",
			"issuer", a.rpCfg.Issuer)
	} else {
		r, err := authn.New(ctx, a.rpCfg)
		if err != nil {
			return nil, fmt.Errorf("identity provider: %w", err)
		}
		a.rp.set(r)
	}
	assets, err := static.Version()
	if err != nil {
		return nil, fmt.Errorf("static assets: %w", err)
	}
	h := handlers.New(handlers.Config{
		ProviderName: providerName, DevIdP: a.dev, SecureCookies: secure,
		OperatorEmails: cfg.OperatorEmails, AssetVersion: assets, FlashKey: Derive(cfg.RootKey, "flash"),
		SessionIdle: cfg.SessionIdle, SessionAbsolute: cfg.SessionAbsolute, PublicURL: cfg.PublicURL,
		StreamWriteTimeout: cfg.StreamWriteTimeout,
	}, handlers.Deps{
		Store: store, Audit: auditLog, IdP: a.rp, Log: cfg.Log, Clock: cfg.Clock, VMs: cfg.VMs, Sandboxes: cfg.Sandboxes, Terminals: cfg.Terminals,
		Secrets: cfg.Secrets, Policies: cfg.Policies, Egress: cfg.Egress, Usage: cfg.Usage,
		Compliance: cfg.Compliance, Workflows: cfg.Workflows, Runs: cfg.Runs, Integrations: cfg.Integrations,
		Ready: func(ctx context.Context) error {
			if !a.rp.ready() {
				return errors.New("identity provider not ready")
			}
			return store.Ping(ctx)
		},
	})
	if cfg.Usage != nil {
		mc := cfg.UsageMetrics
		if mc.Log == nil {
			mc.Log = cfg.Log
		}
		if mc.VMs == nil && cfg.VMs != nil {
			mc.VMs = vmFigures(cfg.VMs)
		}
		if err := cfg.Registry.Register(usage.NewCollector(cfg.Usage, mc)); err != nil {
			return nil, fmt.Errorf("register usage metrics: %w", err)
		}
	}
	a.Server = New(Config{
		PublicURL: cfg.PublicURL, SecureCookies: secure, OperatorEmails: cfg.OperatorEmails,
		DevIdP: devHandler, DevIdPPath: DevIdPPath, MetricsToken: cfg.MetricsToken, BodyTimeout: cfg.BodyTimeout,
	}, store, h, cfg.Log, cfg.Registry)
	if cfg.Workflows != nil && cfg.Runs != nil && cfg.Secrets != nil {
		a.mountGitHub(&github.Receiver{Tenants: store, Workflows: cfg.Workflows, Secrets: notify.HostScoped(cfg.Secrets),
			Runs: cfg.Runs.Store(), Starter: cfg.Runs, Log: cfg.Log})
	}
	return a, nil
}

// ConnectDevIdP discovers the embedded development provider over HTTP,
// once this server is listening. It is a no-op with a real issuer.
func (a *App) ConnectDevIdP(ctx context.Context) error {
	if !a.dev {
		return nil
	}
	var last error
	for i := 0; i < 50; i++ {
		r, err := authn.New(ctx, a.rpCfg)
		if err == nil {
			a.rp.set(r)
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("development identity provider: %w", last)
}

// Derive makes a purpose-specific key from the root key.
func Derive(root []byte, purpose string) []byte {
	m := hmac.New(sha256.New, root)
	m.Write([]byte("stockade/" + purpose))
	return m.Sum(nil)
}

// lateRP is the relying party, set once discovery has succeeded. Until
// then logins answer "not ready" (and /readyz says so).
type lateRP struct{ p atomic.Pointer[authn.RP] }

func (l *lateRP) set(r *authn.RP) { l.p.Store(r) }
func (l *lateRP) ready() bool     { return l.p.Load() != nil }

var errNotReady = errors.New("identity provider not ready yet")

func (l *lateRP) Begin(w http.ResponseWriter, r *http.Request, returnTo string) (string, error) {
	if p := l.p.Load(); p != nil {
		return p.Begin(w, r, returnTo)
	}
	return "", errNotReady
}

func (l *lateRP) Finish(w http.ResponseWriter, r *http.Request) (authn.Identity, string, error) {
	if p := l.p.Load(); p != nil {
		return p.Finish(w, r)
	}
	return authn.Identity{}, "", errNotReady
}

func (l *lateRP) Issuer() string {
	if p := l.p.Load(); p != nil {
		return p.Issuer()
	}
	return ""
}

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

// GitHubHookPath receives a tenant's GitHub deliveries. It is public and
// outside the route table's session, token and CSRF middleware: a delivery
// authenticates by its signature (X-Hub-Signature-256, checked by the
// handler before anything else), not by a session or token.
const GitHubHookPath = "/hooks/github/:tenant"

func (a *App) mountGitHub(g *github.Receiver) {
	a.echo.POST(GitHubHookPath, func(c echo.Context) error {
		g.Serve(c.Response(), c.Request(), c.Param("tenant"))
		return nil
	})
}
