package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/web/forward"
)

// Forwarding (web/forward): a route whose Channel is set needs its
// sandbox's VM agent channel, which one replica owns. The chain of such a
// route is authenticate -> verifyForward -> csrf -> authorize ->
// forwardChannel -> handler: the request is authenticated and checked
// against its route's permissions and tenant here, then served here or
// sent to the owner.

const (
	forwardSigKey = "stockade.forward.sig"
	forwardedKey  = "stockade.forwarded"
)

// takeForwardSignature moves the forward signature header off every
// request before routing (echo Pre), so that no handler sees it; only
// verifyForward looks at it.
func takeForwardSignature(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if vals := forward.Take(c.Request()); len(vals) > 0 {
			c.Set(forwardSigKey, vals)
		}
		return next(c)
	}
}

// principal names the authenticated caller in a forward signature: the
// owner must authenticate the same caller, in the same tenant.
func principal(cl *handlers.Caller) string {
	id := ""
	switch {
	case cl.Token != nil:
		id = cl.Token.ID
	case cl.User != nil:
		id = cl.User.ID
	}
	return cl.Kind + ":" + id + "@" + cl.TenantID()
}

// verifyForward checks a forward signature a request carries (after
// authenticate, before anything acts on the request): a valid one marks
// the request forwarded; any other is refused, as is any signature when
// this server does not forward.
func (s *Server) verifyForward(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if _, err := s.forwardSig(c, principal(handlers.CallerOf(c))); err != nil {
			return err
		}
		return next(c)
	}
}

// forwardSig checks c's forward signature, if any, for principal p (the
// caller authenticated here) and marks c forwarded when it is valid; an
// invalid one, or any when this server does not forward, is refused.
func (s *Server) forwardSig(c echo.Context, p string) (bool, error) {
	vals, _ := c.Get(forwardSigKey).([]string)
	if len(vals) == 0 {
		return false, nil
	}
	if s.cfg.Forward == nil {
		return false, forward.ErrBadSignature
	}
	ok, err := s.cfg.Forward.Verify(c.Request(), vals, p)
	if err != nil {
		return false, err
	}
	c.Set(forwardedKey, ok)
	return ok, nil
}

// forwardTo is forwardChannel for the protocol endpoints outside the route
// table (MCP, E2B): once the caller p is authenticated here and the
// request names tenantID's sandboxID, it is proxied to the owner of the
// sandbox's channel when that is another replica. handled reports that
// the request was answered (proxied, or refused through fail, which
// writes the surface's own error shape); else the caller serves it here:
// this replica owns the channel, there is none, the sandbox is not the
// tenant's (the endpoint says not found in its own words), or the request
// was forwarded here already.
func (s *Server) forwardTo(c echo.Context, route, tenantID, sandboxID, p string, fail func(status int, err error)) (handled bool) {
	f := s.cfg.Forward
	if f == nil || sandboxID == "" || isForwarded(c) {
		return false
	}
	owner, self, err := f.Target(c.Request().Context(), tenantID, sandboxID)
	var no *forward.NoOwnerError
	switch {
	case errors.As(err, &no):
		c.Response().Header().Set("Retry-After", strconv.Itoa(forward.RetryAfter))
		f.NoOwner(route)
		fail(http.StatusServiceUnavailable, err)
		return true
	case err != nil || self:
		return false
	}
	f.Proxy(c.Response(), c.Request(), owner, p, route, func(_ http.ResponseWriter, _ *http.Request, err error) {
		c.Response().Header().Set("Retry-After", strconv.Itoa(forward.RetryAfter))
		fail(http.StatusServiceUnavailable, err)
	})
	return true
}

// mcpSandbox is the sandbox an MCP tools/call names (its sandbox_id
// argument), read from the body, which is put back for whoever serves it.
// The body is bounded by the server's BodyLimit.
func mcpSandbox(r *http.Request) (string, error) {
	if r.Method != http.MethodPost || r.Body == nil {
		return "", nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return "", fmt.Errorf("read the MCP request: %w", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Arguments struct {
				SandboxID string `json:"sandbox_id"`
			} `json:"arguments"`
		} `json:"params"`
	}
	if json.Unmarshal(b, &msg) != nil || msg.Method != "tools/call" {
		return "", nil // the MCP server answers what it makes of it
	}
	return msg.Params.Arguments.SandboxID, nil
}

// forwardMCP forwards an MCP tool call on a sandbox whose channel another
// replica owns (the tool's own permission is checked there, by the tool
// table; the tenant here). handled: answered, or err to answer.
func (s *Server) forwardMCP(c echo.Context, cl *handlers.Caller) (handled bool, err error) {
	p := principal(cl)
	if fwd, err := s.forwardSig(c, p); err != nil || fwd || s.cfg.Forward == nil {
		return err != nil, err
	}
	sbID, err := mcpSandbox(c.Request())
	if err != nil || sbID == "" || !tenants.Can(cl.Role, tenants.PermSandboxesRead) {
		return err != nil, err
	}
	return s.forwardTo(c, MCPPath, cl.TenantID(), sbID, p, func(_ int, err error) { s.handleError(err, c) }), nil
}

// e2bSandbox is the sandbox of an E2B control-plane path
// (/sandboxes/{id}[/...], /v2/sandboxes/{id}/...), after E2BPrefix.
func e2bSandbox(path string) string {
	path = strings.TrimPrefix(strings.TrimPrefix(path, "/v2"), "/")
	rest, ok := strings.CutPrefix(path, "sandboxes/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// forwardE2BAPI forwards an E2B control-plane request on a sandbox (kill,
// timeout, pause, connect, metrics) whose channel another replica owns,
// once the caller's role has the permission E2B's routes ask of it
// (reading for GET, writing otherwise; the owner checks the route's
// exact one). handled: answered.
func (s *Server) forwardE2BAPI(c echo.Context, cl *handlers.Caller, writeErr e2bError) bool {
	p := principal(cl)
	if fwd, err := s.forwardSig(c, p); err != nil {
		writeErr(c.Response(), http.StatusForbidden, err.Error())
		return true
	} else if fwd {
		return false
	}
	perm := tenants.PermSandboxesWrite
	if c.Request().Method == http.MethodGet {
		perm = tenants.PermSandboxesRead
	}
	sbID := e2bSandbox(strings.TrimPrefix(c.Request().URL.Path, E2BPrefix))
	if !tenants.Can(cl.Role, perm) {
		return false // refused there, in E2B's words
	}
	return s.forwardTo(c, E2BPrefix+"/sandboxes/{id}", cl.TenantID(), sbID, p, func(status int, err error) {
		writeErr(c.Response(), status, err.Error())
	})
}

// forwardEnvd forwards an envd request (authenticated by its sandbox's
// access token, which envd checks: sandbox names the tenant and sandbox
// it is bound to, or ok false) to the owner of the sandbox's channel.
// handled: answered, in envd's error shapes (E2B's on /files, Connect's
// JSON error on the RPC paths).
func (s *Server) forwardEnvd(c echo.Context, sandbox func(*http.Request) (tenantID, sandboxID string, ok bool), writeErr e2bError) bool {
	fail := func(status int, err error) {
		if strings.HasPrefix(c.Request().URL.Path, E2BFilesPath) {
			writeErr(c.Response(), status, err.Error())
			return
		}
		code := "unavailable"
		if status == http.StatusForbidden {
			code = "permission_denied"
		}
		c.Response().Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		c.Response().WriteHeader(status)
		_ = json.NewEncoder(c.Response()).Encode(map[string]string{"code": code, "message": err.Error()})
	}
	if s.cfg.Forward == nil { // one replica: nothing to look up
		if _, err := s.forwardSig(c, ""); err != nil {
			fail(http.StatusForbidden, err)
			return true
		}
		return false
	}
	tenantID, sbID, ok := sandbox(c.Request())
	p := "envd:" + sbID + "@" + tenantID
	if !ok {
		p = "envd:@"
	}
	if fwd, err := s.forwardSig(c, p); err != nil {
		fail(http.StatusForbidden, err)
		return true
	} else if fwd || !ok {
		return false
	}
	return s.forwardTo(c, "envd", tenantID, sbID, p, fail)
}

// isForwarded reports a request another replica forwarded here, signed.
func isForwarded(c echo.Context) bool { b, _ := c.Get(forwardedKey).(bool); return b }

// forwardChannel serves route r here when this replica owns the channel of
// the sandbox its Channel parameter names, and proxies it to the owner
// otherwise. It runs after authorize, so a caller who may not make the
// request, or names another tenant's sandbox (not found), is answered
// here and nothing is forwarded.
func (s *Server) forwardChannel(r Route) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		f := s.cfg.Forward
		if f == nil || r.Channel == "" {
			return next
		}
		return func(c echo.Context) error {
			cl := handlers.CallerOf(c)
			owner, self, err := f.Target(c.Request().Context(), cl.TenantID(), c.Param(r.Channel))
			if err != nil {
				return s.noOwner(c, r.Path, err)
			}
			if self {
				return next(c)
			}
			if isForwarded(c) {
				// Ownership moved while the request travelled: one hop only.
				return s.noOwner(c, r.Path, &forward.NoOwnerError{})
			}
			if err := reformBody(c.Request()); err != nil {
				return err
			}
			f.Proxy(c.Response(), c.Request(), owner, principal(cl), r.Path, func(_ http.ResponseWriter, _ *http.Request, err error) {
				c.Response().Header().Set("Retry-After", strconv.Itoa(forward.RetryAfter))
				s.handleError(err, c)
			})
			return nil
		}
	}
}

// noOwner answers err; a channel nobody owns now says when to retry.
func (s *Server) noOwner(c echo.Context, route string, err error) error {
	var no *forward.NoOwnerError
	if errors.As(err, &no) {
		c.Response().Header().Set("Retry-After", strconv.Itoa(forward.RetryAfter))
		s.cfg.Forward.NoOwner(route)
	}
	return err
}

// reformBody puts back a form body the CSRF check parsed (it read the
// body to find _csrf), so the owner gets the form the client sent.
func reformBody(r *http.Request) error {
	if r.MultipartForm != nil {
		return errdefs.WithDetail(errdefs.ErrUnavailable, "a multipart form with its CSRF token in the form cannot be forwarded to the replica serving this sandbox: send the token as X-CSRF-Token")
	}
	if r.PostForm == nil || !strings.HasPrefix(r.Header.Get(echo.HeaderContentType), echo.MIMEApplicationForm) {
		return nil
	}
	body := r.PostForm.Encode()
	r.Body = io.NopCloser(strings.NewReader(body))
	r.ContentLength = int64(len(body))
	r.Header.Set(echo.HeaderContentLength, strconv.Itoa(len(body)))
	return nil
}

// forwardPreview serves the preview link door (/preview/:token/*, which
// authenticates by its token) at the owner of the link's sandbox's
// channel: a link resolved here, to a sandbox whose channel another
// replica owns, is proxied there, signed for the link.
func (s *Server) forwardPreview(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		f := s.cfg.Forward
		if f == nil {
			if _, err := s.forwardSig(c, ""); err != nil {
				return err
			}
			return next(c)
		}
		tenantID, sbID, p, ok := f.Preview(c.Request().Context(), c.Param("token"))
		if fwd, err := s.forwardSig(c, p); err != nil {
			return err
		} else if fwd || !ok {
			return next(c)
		}
		if s.forwardTo(c, "/preview/:token/*", tenantID, sbID, p, func(_ int, err error) { s.handleError(err, c) }) {
			return nil
		}
		return next(c)
	}
}

// PreviewHostRoute names requests to preview hosts (<port>-<sandbox
// id>.<preview domain>) in the forward metrics.
const PreviewHostRoute = "preview-host"

// forwardPreviewHost is forwardPreview for whole preview hosts (which run
// before routing): a request with its link's cookie, for a sandbox whose
// channel another replica owns, is proxied there with the Host it asked
// for, signed for the link; the owner's door checks the link again.
func (s *Server) forwardPreviewHost(h *handlers.Handlers) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			tok, ok := h.PreviewHostCookie(c.Request())
			f := s.cfg.Forward
			if !ok {
				return next(c)
			}
			if f == nil {
				if _, err := s.forwardSig(c, ""); err != nil {
					return err
				}
				return next(c)
			}
			tenantID, sbID, p, ok := f.Preview(c.Request().Context(), tok)
			if fwd, err := s.forwardSig(c, p); err != nil {
				return err
			} else if fwd || !ok {
				return next(c)
			}
			if s.forwardTo(c, PreviewHostRoute, tenantID, sbID, p, func(_ int, err error) { s.handleError(err, c) }) {
				return nil
			}
			return next(c)
		}
	}
}
