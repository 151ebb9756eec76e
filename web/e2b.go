package web

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// E2BPrefix is where the E2B control plane is served (E2B_API_URL =
// $STOCKADE_PUBLIC_URL/e2b). Like MCPPath it is a protocol endpoint
// outside the route table and its session, CSRF and per-route permission
// middleware, with E2B's own routes and error shape (handlers/e2b): it
// takes an API token as X-API-KEY (the token itself, or its "e2b_" + hex
// alias) and nothing else, looked up exactly as for the API routes
// (authenticateToken); each E2B route checks the permission its native
// twin has. The envd surface (E2B_SANDBOX_URL = $STOCKADE_PUBLIC_URL) is
// served at the root paths E2BServer.EnvdPaths names (/health, /files,
// /process.Process/*, /filesystem.Filesystem/*), authenticated by the
// per-sandbox access token alone (handlers/e2b).
const E2BPrefix = "/e2b"

// E2BFilesPath is envd's file route: its bodies are sandbox files, bounded
// by the file size limit instead of BodyLimit.
const E2BFilesPath = "/files"

// E2BServer serves the E2B surface (handlers/e2b.Server).
type E2BServer interface {
	ServeAPI(w http.ResponseWriter, r *http.Request, cl *handlers.Caller, actor audit.Actor)
	ServeEnvd(w http.ResponseWriter, r *http.Request)
	EnvdPaths() []string
	// EnvdSandbox is the tenant and sandbox an envd request's access token
	// is bound to (ok false when it is not valid for the sandbox named).
	EnvdSandbox(r *http.Request) (tenantID, sandboxID string, ok bool)
}

// e2bError writes E2B's {code,message} error body.
type e2bError func(w http.ResponseWriter, status int, msg string)

func (s *Server) mountE2B(m E2BServer, apiKeyToken func(string) string, writeErr e2bError) {
	api := func(c echo.Context) error {
		r := c.Request()
		key := r.Header.Get("X-API-KEY")
		if key == "" {
			writeErr(c.Response(), http.StatusUnauthorized, "missing X-API-KEY: send a Stockade API token (E2B_API_KEY)")
			return nil
		}
		if err := s.authenticateToken(c, "Bearer "+apiKeyToken(key)); err != nil {
			writeErr(c.Response(), http.StatusUnauthorized, "invalid API key")
			return nil
		}
		cl := handlers.CallerOf(c)
		if s.forwardE2BAPI(c, cl, writeErr) {
			return nil
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = strings.TrimPrefix(r.URL.Path, E2BPrefix)
		r2.URL.RawPath = ""
		m.ServeAPI(c.Response(), r2, cl, cl.Actor(c))
		return nil
	}
	s.echo.Any(E2BPrefix+"/*", api)
	envd := func(c echo.Context) error {
		if !s.forwardEnvd(c, m.EnvdSandbox, writeErr) {
			m.ServeEnvd(c.Response(), c.Request())
		}
		return nil
	}
	for _, p := range m.EnvdPaths() {
		if strings.HasSuffix(p, "/") {
			s.echo.Any(p+"*", envd)
		} else {
			s.echo.Any(p, envd)
		}
	}
}
