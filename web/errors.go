package web

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

// fromEcho makes echo's own refusals (no route, method not allowed, the
// body limit) part of the vocabulary: a *errdefs.StatusError wrapping err.
// Domain errors in err's chain still decide first.
func fromEcho(err error) error {
	var he *echo.HTTPError
	if !errors.As(err, &he) {
		return err
	}
	detail, _ := he.Message.(string)
	return &errdefs.StatusError{Status: he.Code, Detail: detail, Err: err}
}

// handleError renders err as a problem document (API) or an error page.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	if errors.Is(err, context.Canceled) {
		return
	}
	p := errdefs.ToProblem(fromEcho(err))
	reqID := c.Response().Header().Get(echo.HeaderXRequestID)
	p.RequestID = reqID
	p.Instance = c.Request().URL.Path
	if p.Status >= 500 {
		s.log.ErrorContext(c.Request().Context(), "request failed", "err", err, "request_id", reqID, "path", c.Path())
	}
	if s.isAPI(c) {
		c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
		_ = c.JSON(p.Status, p)
		return
	}
	if p.Status == http.StatusUnauthorized {
		_ = c.Redirect(http.StatusSeeOther, "/login?return_to="+url.QueryEscape(c.Request().URL.RequestURI()))
		return
	}
	var buf bytes.Buffer
	detail := p.Detail
	for _, f := range p.Errors {
		detail = f.Field + ": " + f.Detail
	}
	page := s.handlers.ErrorShell(c)
	if err := views.ErrorPage(page, views.ErrorView{Status: p.Status, Title: p.Title, Detail: detail, RequestID: reqID}).Render(c.Request().Context(), &buf); err != nil {
		_ = c.String(p.Status, p.Title)
		return
	}
	_ = c.HTMLBlob(p.Status, buf.Bytes())
}

// isAPI says whether c's route is of the JSON API (Route.API); a request
// no route took (404, 405) is the API's when its path is under /api/; the
// MCP endpoint's refusals are problem documents too.
func (s *Server) isAPI(c echo.Context) bool {
	if r, ok := routeOf(s.routes, c); ok {
		return r.API
	}
	return strings.HasPrefix(c.Request().URL.Path, "/api/") || c.Request().URL.Path == MCPPath
}
