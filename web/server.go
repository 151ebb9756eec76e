// Package web is the HTTP server: the route table, middleware (request ids,
// logs, metrics, security headers, body limits, sessions, tokens, CSRF),
// the one place errors become HTTP statuses, and the embedded static files.
package web

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/static"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/forward"
)

// Config is the server's configuration.
type Config struct {
	PublicURL      string // e.g. https://stockade.example.com; decides Secure cookies and HSTS
	SecureCookies  bool
	OperatorEmails map[string]bool // lowercased
	SessionIdle    time.Duration
	BodyLimit      string // default "1M"
	// DevIdP, when set, is the embedded development identity provider,
	// mounted at DevIdPPath.
	DevIdP     http.Handler
	DevIdPPath string
	// MetricsToken, when set, is the bearer token /metrics requires (the
	// per-tenant usage is there); when empty /metrics answers only
	// connections from this machine's loopback, and only when PublicURL is
	// itself a loopback URL (behind a local TLS proxy every request comes
	// from loopback).
	MetricsToken string
	// BodyTimeout and BodyMinRate bound how long a request body may take to
	// arrive: BodyTimeout plus its size at BodyMinRate bytes per second
	// (defaults DefaultBodyTimeout, DefaultBodyMinRate).
	BodyTimeout time.Duration
	BodyMinRate int64
	// GitHub receives the tenants' GitHub deliveries at GitHubHookPath.
	GitHub GitHubReceiver
	// MCP serves the MCP endpoint at MCPPath.
	MCP MCPServer
	// E2B, when set, serves the E2B surface (web/e2b.go); E2BAPIKeyToken
	// maps an X-API-KEY to its token and E2BError writes E2B's errors.
	E2B            E2BServer
	E2BAPIKeyToken func(string) string
	E2BError       func(w http.ResponseWriter, status int, msg string)
	// Forward, when set, sends requests of routes with a Channel to the
	// replica owning their sandbox's VM agent channel (web/forward.go).
	Forward *forward.Forwarder
}

// Server is the configured Echo instance.
type Server struct {
	cfg      Config
	echo     *echo.Echo
	store    *tenants.Store
	handlers *handlers.Handlers
	log      *slog.Logger
	routes   []Route
}

// FileUploadPath is the route whose request bodies are sandbox files: its
// handler applies the file size limit instead of BodyLimit.
const FileUploadPath = "/api/v1/sandboxes/:id/files"

// New builds the server and its route table; every argument is required.
func New(cfg Config, store *tenants.Store, h *handlers.Handlers, log *slog.Logger, reg *prometheus.Registry) (*Server, error) {
	switch {
	case store == nil || h == nil || log == nil || reg == nil:
		return nil, errors.New("web server: store, handlers, logger and metrics registry are required")
	case cfg.GitHub == nil:
		return nil, errors.New("web server: the GitHub receiver is required")
	case cfg.MCP == nil:
		return nil, errors.New("web server: the MCP server is required")
	}
	if cfg.BodyLimit == "" {
		cfg.BodyLimit = "1M"
	}
	if cfg.SessionIdle == 0 {
		cfg.SessionIdle = h.SessionIdle()
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.BodyMinRate <= 0 {
		cfg.BodyMinRate = DefaultBodyMinRate
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	// Only the direct peer's address: we do not trust X-Forwarded-For unless
	// an operator puts a proxy in front (not supported yet).
	e.IPExtractor = echo.ExtractIPDirect()
	s := &Server{cfg: cfg, echo: e, store: store, handlers: h, log: log}
	e.HTTPErrorHandler = s.handleError

	m := newMetrics(reg)
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisableStackAll: true, LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
		log.ErrorContext(c.Request().Context(), "panic", "err", err, "stack", string(stack))
		return err
	}}))
	e.Use(middleware.RequestID())
	e.Use(s.accessLog(m))
	e.Use(s.securityHeaders)
	e.Use(s.bodyDeadline)
	e.Use(middleware.BodyLimitWithConfig(middleware.BodyLimitConfig{Limit: cfg.BodyLimit, Skipper: func(c echo.Context) bool {
		// File uploads bound their bodies themselves, at their own limit.
		m := c.Request().Method
		return (m == http.MethodPut || m == http.MethodPost) && (c.Path() == FileUploadPath || c.Path() == E2BFilesPath ||
			c.Path() == handlers.TemplateImportPath || c.Path() == handlers.TemplateImportPage)
	}}))
	e.Use(s.templateUploadLimit)

	// Static files and the dev identity provider need no session.
	e.GET("/static/*", echo.WrapHandler(http.StripPrefix("/static/", staticHandler())))
	if cfg.DevIdP != nil {
		e.Any(cfg.DevIdPPath+"/*", echo.WrapHandler(cfg.DevIdP))
	}
	e.GET("/metrics", echo.WrapHandler(metricsGuard(cfg.MetricsToken, LoopbackURL(cfg.PublicURL), promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))))

	e.Pre(takeForwardSignature)
	s.mountPreviews(h)
	app := e.Group("", s.authenticate, s.verifyForward, s.csrf)
	s.routes = Routes(h)
	for _, r := range s.routes {
		app.Add(r.Method, r.Path, r.Handler, s.authorize(r), s.forwardChannel(r))
	}
	s.mountGitHub(cfg.GitHub)
	s.mountMCP(cfg.MCP)
	if cfg.E2B != nil {
		s.mountE2B(cfg.E2B, cfg.E2BAPIKeyToken, cfg.E2BError)
	}
	return s, nil
}

// Handler returns the server as an http.Handler.
func (s *Server) Handler() http.Handler { return s.echo }

// RouteTable returns the routes (for tests and docs).
func (s *Server) RouteTable() []Route { return s.routes }

// Serve serves on l until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: s.echo, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// CSP allows only our own origin: no inline script or style anywhere.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; object-src 'none'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"

func (s *Server) securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		if !strings.HasPrefix(c.Request().URL.Path, s.cfg.DevIdPPath+"/") || s.cfg.DevIdP == nil {
			h.Set("Content-Security-Policy", CSP)
		}
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
		if s.cfg.SecureCookies {
			h.Set("Strict-Transport-Security", "max-age=63072000; includeSubDomains")
		}
		if !strings.HasPrefix(c.Request().URL.Path, "/static/") {
			h.Set("Cache-Control", "no-store")
		}
		return next(c)
	}
}

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockade_http_requests_total",
			Help: "HTTP requests by route template, method and status code."}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "stockade_http_request_duration_seconds",
			Help: "HTTP request latency by route template.", Buckets: prometheus.DefBuckets}, []string{"route", "method"}),
	}
	reg.MustRegister(m.requests, m.duration, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// accessLog logs one JSON line per request and counts it. Labels use the
// route template, never the raw path, so cardinality stays bounded.
func (s *Server) accessLog(m *metrics) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			if err != nil {
				c.Error(err)
			}
			route := c.Path()
			if route == "" {
				route = "unmatched"
			}
			status := c.Response().Status
			elapsed := time.Since(start)
			m.requests.WithLabelValues(route, c.Request().Method, strconv.Itoa(status)).Inc()
			m.duration.WithLabelValues(route, c.Request().Method).Observe(elapsed.Seconds())
			if !strings.HasPrefix(route, "/static/") {
				s.log.InfoContext(c.Request().Context(), "request",
					"request_id", c.Response().Header().Get(echo.HeaderXRequestID),
					"method", c.Request().Method, "route", route, "status", status,
					"duration_ms", float64(elapsed.Microseconds())/1000, "remote", c.RealIP(),
					"bytes", c.Response().Size)
			}
			return nil
		}
	}
}

func staticHandler() http.Handler {
	fs := http.FileServerFS(static.FS)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no directory listings
			return
		}
		if r.URL.Query().Get("v") != "" {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			w.Header().Set("Cache-Control", "public, max-age=300")
		}
		fs.ServeHTTP(w, r)
	})
}

// metricsGuard lets a scraper through with the bearer token (constant-time
// compare), or, with no token configured, from loopback only and only when
// the server is published on loopback (localOnly): the metrics carry every
// tenant's usage and cost, and a TLS proxy on this machine in front of a
// public URL makes every request look like loopback.
func metricsGuard(token string, localOnly bool, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="stockade metrics"`)
				http.Error(w, "metrics need the bearer token of STOCKADE_METRICS_TOKEN_FILE", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if !localOnly {
			http.Error(w, "STOCKADE_PUBLIC_URL is not a loopback URL: metrics need the bearer token of STOCKADE_METRICS_TOKEN_FILE", http.StatusForbidden)
			return
		}
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			http.Error(w, "metrics are served to this machine only; set STOCKADE_METRICS_TOKEN_FILE to scrape from elsewhere", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// LoopbackURL reports whether u is an http(s) URL whose host is a loopback
// address or "localhost": only this machine reaches it.
func LoopbackURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") {
		return false
	}
	return LoopbackHost(p.Hostname())
}

// LoopbackHost reports whether host (no port) is a loopback IP literal or
// localhost.
func LoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
