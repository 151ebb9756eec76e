// Package handlers holds the page, JSON API and login handlers. Handlers bind
// and validate input, call the domain packages and render; they return domain
// errors and leave the mapping to HTTP to web/.
package handlers

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/sandbox/templates/oci"
	"github.com/stockade-dev/stockade/sandbox/templates/recipe"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/sandbox/volumes"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/integrations"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// Identity is the part of the relying party the login handlers need. The
// composition root adapts the OIDC relying party (web/authn) to it, so
// handlers import nothing of the HTTP server's packages.
type Identity interface {
	Begin(w http.ResponseWriter, r *http.Request, returnTo string) (string, error)
	Finish(w http.ResponseWriter, r *http.Request) (LoginIdentity, string, error)
	Issuer() string
}

// LoginIdentity is who the identity provider says signed in.
type LoginIdentity struct {
	Issuer, Subject, Email, Name string
	// EmailVerified: only a verified email may claim invitations or
	// operator rights.
	EmailVerified bool
}

// Config holds what handlers need to know about the deployment.
type Config struct {
	ProviderName    string // shown on the login button
	DevIdP          bool   // the embedded development identity provider is active
	SecureCookies   bool
	SessionIdle     time.Duration
	SessionAbsolute time.Duration
	OperatorEmails  map[string]bool // lowercased
	AssetVersion    string
	FlashKey        []byte
	// PublicURL is where people reach the server; browsers' WebSocket
	// Origins must match it.
	PublicURL string
	// StreamWriteTimeout bounds one write of a streamed exec: a client
	// that stops reading for longer gets its command killed with reason
	// timeout. Zero: DefaultStreamWriteTimeout.
	StreamWriteTimeout time.Duration
	// PreviewDomain (STOCKADE_PREVIEW_DOMAIN) serves preview links at
	// <port>-<sandbox id>.<domain>; empty: at /preview/<token>/.
	PreviewDomain string
}

// DefaultStreamWriteTimeout is Config.StreamWriteTimeout's default.
const DefaultStreamWriteTimeout = 30 * time.Second

// Handlers carries the dependencies of every handler.
type Handlers struct {
	cfg   Config
	store *tenants.Store
	audit *audit.Log
	idp   Identity
	log   *slog.Logger
	ready func(ctx context.Context) error
	clock func() time.Time
	// Every service is set (New refuses a missing one). One that can be
	// down says so itself: vms.Available, and the sandbox service's
	// operations answer vmpool.ErrUnavailable while the VM pools are not
	// running.
	vms          *vmpool.Service
	sbx          *sandbox.Service
	terms        *terminal.Service
	secrets      *secrets.Store
	pol          *policy.Store
	egress       *egress.Store
	usage        *usage.Store
	compliance   Compliance
	workflows    *workflow.Store
	runs         *runs.Engine
	integrations *integrations.Store
	replication  func(ctx context.Context) (*api.Replication, error)
	templates    *templates.Service
	// builds runs recipe template builds; nil: the routes say unavailable.
	builds  *recipe.Builder
	imports *oci.Importer
	volumes *volumes.Service
	// authFailures rate-limits the audit events of failed sign-ins and
	// tokens: anyone can cause them.
	authFailures *audit.Limiter
	// instance names this server process in the idempotency keys it runs.
	instance string
}

// Deps are the services handlers call. Every one is required: the
// composition root (cmd/stockade/app) builds them all, also for a server
// without libvirt, whose VM pools then say they are unavailable.
type Deps struct {
	Store *tenants.Store
	Audit *audit.Log
	IdP   Identity
	Log   *slog.Logger
	// Ready reports whether the server can serve (database reachable, ...).
	Ready func(ctx context.Context) error
	Clock func() time.Time
	// VMs runs the tenant VM pools.
	VMs *vmpool.Service
	// Sandboxes runs the sandboxes.
	Sandboxes *sandbox.Service
	// Terminals runs the sandboxes' terminals.
	Terminals *terminal.Service
	// Secrets keeps the tenants' secrets (and seals idempotent answers).
	Secrets *secrets.Store
	// Policies keeps the tenants' policy versions.
	Policies *policy.Store
	// Egress keeps the egress gateway's decisions.
	Egress *egress.Store
	// Usage meters and prices what sandboxes use.
	Usage *usage.Store
	// Compliance evaluates the security checklist and runs the probe
	// (*compliance.Service).
	Compliance Compliance
	// Workflows keeps the tenants' workflow definitions and settings.
	Workflows *workflow.Store
	// Runs executes workflow runs.
	Runs *runs.Engine
	// Integrations keeps the tenants' outgoing webhook endpoints and their
	// deliveries.
	Integrations *integrations.Store
	// Replication reports leadership and lease health for /readyz; nil
	// with one server (SQLite).
	Replication func(ctx context.Context) (*api.Replication, error)
	// Templates keeps the tenants' own sandbox templates.
	Templates *templates.Service
	// TemplateBuilds builds tenant templates from recipes (optional: without
	// it the build routes answer 503).
	TemplateBuilds *recipe.Builder
	// TemplateImports imports tenant templates from OCI images.
	TemplateImports *oci.Importer
	// Volumes keeps the tenants' persistent volumes.
	Volumes *volumes.Service
}

// check names every missing dependency.
func (d Deps) check() error {
	var missing []string
	for name, ok := range map[string]bool{
		"Store": d.Store != nil, "Audit": d.Audit != nil, "IdP": d.IdP != nil, "Ready": d.Ready != nil,
		"VMs": d.VMs != nil, "Sandboxes": d.Sandboxes != nil, "Terminals": d.Terminals != nil, "Secrets": d.Secrets != nil,
		"Policies": d.Policies != nil, "Egress": d.Egress != nil, "Usage": d.Usage != nil, "Compliance": d.Compliance != nil,
		"Workflows": d.Workflows != nil, "Runs": d.Runs != nil, "Integrations": d.Integrations != nil,
		"Templates":       d.Templates != nil,
		"TemplateImports": d.TemplateImports != nil,
		"Volumes":         d.Volumes != nil,
	} {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("handlers: missing dependencies: %s", strings.Join(missing, ", "))
	}
	return nil
}

// New returns the handlers; every dependency is required.
func New(cfg Config, d Deps) (*Handlers, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	if cfg.SessionIdle == 0 {
		cfg.SessionIdle = 12 * time.Hour
	}
	if cfg.SessionAbsolute == 0 {
		cfg.SessionAbsolute = 7 * 24 * time.Hour
	}
	if d.Clock == nil {
		d.Clock = time.Now
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Handlers{cfg: cfg, store: d.Store, audit: d.Audit, idp: d.IdP, log: d.Log, ready: d.Ready, clock: d.Clock, vms: d.VMs, sbx: d.Sandboxes,
		terms: d.Terminals, secrets: d.Secrets, pol: d.Policies, egress: d.Egress, usage: d.Usage,
		compliance: d.Compliance, workflows: d.Workflows, runs: d.Runs, authFailures: audit.NewLimiter(time.Minute, authFailureBurst),
		integrations: d.Integrations, templates: d.Templates, builds: d.TemplateBuilds, imports: d.TemplateImports, volumes: d.Volumes,
		replication: d.Replication, instance: uuid.NewString()}, nil
}

// SessionIdle is the idle expiry of browser sessions.
func (h *Handlers) SessionIdle() time.Duration { return h.cfg.SessionIdle }

// render writes a templ component after rendering it fully into a buffer,
// so a render error is a clean 500 and never half a page.
func render(c echo.Context, status int, comp templ.Component) error {
	var buf bytes.Buffer
	if err := comp.Render(c.Request().Context(), &buf); err != nil {
		return err
	}
	return c.HTMLBlob(status, buf.Bytes())
}
