package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// MCPPath is the MCP endpoint (Streamable HTTP). It is a protocol
// endpoint outside the route table and its session, CSRF and per-route
// permission middleware (like GitHubHookPath): it takes an API token and
// nothing else (no cookie, so no CSRF to check), looked up exactly as for
// the API routes (authenticateToken), and each tool checks the permission
// its REST twin's route has (handlers/mcp's tool table). Browsers'
// Origins other than this server's are refused (the MCP spec's security
// guidance for Streamable HTTP) before the token is looked at.
const MCPPath = "/mcp"

// MCPServer serves one MCP request of an authenticated caller
// (handlers/mcp.Server); actor names it in the audit log.
type MCPServer interface {
	Serve(w http.ResponseWriter, r *http.Request, cl *handlers.Caller, actor audit.Actor)
}

func (s *Server) mountMCP(m MCPServer) {
	s.echo.Match([]string{http.MethodGet, http.MethodPost, http.MethodDelete}, MCPPath, func(c echo.Context) error {
		if !s.handlers.SameOrigin(c.Request()) {
			return forbidden("a page of another site may not call this server's MCP endpoint (Origin " + c.Request().Header.Get("Origin") + ")")
		}
		authz := c.Request().Header.Get(echo.HeaderAuthorization)
		if authz == "" {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="stockade"`)
			return errdefs.ErrUnauthorized
		}
		if err := s.authenticateToken(c, authz); err != nil {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="stockade", error="invalid_token"`)
			return err
		}
		cl := handlers.CallerOf(c)
		if handled, err := s.forwardMCP(c, cl); handled || err != nil {
			return err
		}
		m.Serve(c.Response(), c.Request(), cl, cl.Actor(c))
		return nil
	})
}
