package web

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers"
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
		vals, _ := c.Get(forwardSigKey).([]string)
		if len(vals) == 0 {
			return next(c)
		}
		if s.cfg.Forward == nil {
			return forward.ErrBadSignature
		}
		ok, err := s.cfg.Forward.Verify(c.Request(), vals, principal(handlers.CallerOf(c)))
		if err != nil {
			return err
		}
		c.Set(forwardedKey, ok)
		return next(c)
	}
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
