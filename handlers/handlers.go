// Package handlers holds the page, JSON API and login handlers. Handlers bind
// and validate input, call the domain packages and render; they return domain
// errors and leave the mapping to HTTP to web/.
package handlers

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/a-h/templ"
	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/integrations"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/tenants/workflow"
	"github.com/stockade-dev/stockade/web/authn"
)

// Identity is the part of the relying party the login handlers need.
type Identity interface {
	Begin(w http.ResponseWriter, r *http.Request, returnTo string) (string, error)
	Finish(w http.ResponseWriter, r *http.Request) (authn.Identity, string, error)
	Issuer() string
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
}

// DefaultStreamWriteTimeout is Config.StreamWriteTimeout's default.
const DefaultStreamWriteTimeout = 30 * time.Second

// Handlers carries the dependencies of every handler.
type Handlers struct {
	cfg     Config
	store   *tenants.Store
	audit   *audit.Log
	idp     Identity
	log     *slog.Logger
	ready   func(ctx context.Context) error
	clock   func() time.Time
	vms     *vmpool.Service // nil: VM pages and API answer "unavailable"
	sbx     *sandbox.Service
	terms   *terminal.Service // nil: terminals answer "unavailable"
	secrets *secrets.Store    // nil: secrets answer "unavailable"
	pol     *policy.Store     // nil: policy pages and API answer not found
	egress  *egress.Store     // nil: egress events answer "unavailable"
	usage   *usage.Store      // nil: usage pages and API answer "unavailable"
	// compliance evaluates the checklist; nil: its pages say unavailable.
	compliance Compliance
	workflows  *workflow.Store // nil: workflow API answers "unavailable"
	runs       *runs.Engine    // nil: run API answers "unavailable"
	// integrations keeps outgoing webhook endpoints and deliveries; nil:
	// their pages and API answer "unavailable".
	integrations *integrations.Store
	// authFailures rate-limits the audit events of failed sign-ins and
	// tokens: anyone can cause them.
	authFailures *audit.Limiter
	// instance names this server process in the idempotency keys it runs.
	instance string
}

// Deps are the services handlers call.
type Deps struct {
	Store *tenants.Store
	Audit *audit.Log
	IdP   Identity
	Log   *slog.Logger
	// Ready reports whether the server can serve (database reachable, ...).
	Ready func(ctx context.Context) error
	Clock func() time.Time
	// VMs runs the tenant VM pools; nil when the server runs without them.
	VMs *vmpool.Service
	// Sandboxes runs the sandboxes; nil answers "unavailable" for them.
	Sandboxes *sandbox.Service
	// Terminals runs the sandboxes' terminals; nil answers "unavailable".
	Terminals *terminal.Service
	// Secrets keeps the tenants' secrets; nil answers "unavailable".
	Secrets *secrets.Store
	// Policies keeps the tenants' policy versions.
	Policies *policy.Store
	// Egress keeps the egress gateway's decisions; nil answers "unavailable".
	Egress *egress.Store
	// Usage meters and prices what sandboxes use; nil answers "unavailable".
	Usage *usage.Store
	// Compliance evaluates the security checklist and runs the probe
	// (*compliance.Service); nil answers "unavailable".
	Compliance Compliance
	// Workflows keeps the tenants' workflow definitions and settings; nil
	// answers "unavailable".
	Workflows *workflow.Store
	// Runs executes workflow runs; nil answers "unavailable".
	Runs *runs.Engine
	// Integrations keeps the tenants' outgoing webhook endpoints and their
	// deliveries; nil answers "unavailable".
	Integrations *integrations.Store
}

// New returns the handlers.
func New(cfg Config, d Deps) *Handlers {
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
		integrations: d.Integrations, instance: uuid.NewString()}
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
