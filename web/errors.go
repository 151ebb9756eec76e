package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/views"
)

// Problem is an RFC 9457 problem document.
type Problem struct {
	Type      string         `json:"type"`
	Title     string         `json:"title"`
	Status    int            `json:"status"`
	Detail    string         `json:"detail,omitempty"`
	Instance  string         `json:"instance,omitempty"`
	RequestID string         `json:"request_id,omitempty"`
	Errors    []ProblemField `json:"errors,omitempty"`
}

// ProblemField names one field at fault.
type ProblemField struct {
	Field  string `json:"field"`
	Rule   string `json:"rule,omitempty"`
	Detail string `json:"detail"`
}

const problemBase = "https://stockade.dev/problems/"

// problemFor maps an error to its problem. This is the one place where
// domain errors become HTTP statuses.
func problemFor(err error) Problem {
	var (
		he  *echo.HTTPError
		fe  *tenants.FieldError
		me  *handlers.MalformedError
		fbe *forbiddenError
		qe  *tenants.QuotaError
		tle *sandbox.TooLargeError
	)
	switch {
	case errors.As(err, &me):
		p := Problem{Type: problemBase + "malformed", Title: "Malformed request", Status: http.StatusBadRequest, Detail: me.Error()}
		if me.Field != "" {
			p.Errors = []ProblemField{{Field: me.Field, Rule: "syntax", Detail: me.Detail}}
		}
		return p
	case errors.As(err, &fe):
		p := Problem{Type: problemBase + "invalid", Title: "Invalid input", Status: http.StatusUnprocessableEntity, Detail: fe.Error()}
		// A document checked against a schema fails on many paths at once:
		// every one is listed.
		all := allFieldErrors(err, nil)
		if len(all) > 1 {
			p.Detail = fmt.Sprintf("%d fields are invalid; see errors", len(all))
		}
		for _, f := range all {
			p.Errors = append(p.Errors, ProblemField{Field: f.Field, Rule: f.Rule, Detail: f.Detail})
		}
		return p
	case errors.Is(err, tenants.ErrInvalid):
		return Problem{Type: problemBase + "invalid", Title: "Invalid input", Status: http.StatusUnprocessableEntity, Detail: err.Error()}
	case errors.Is(err, tenants.ErrNotFound):
		return Problem{Type: problemBase + "not-found", Title: "Not found", Status: http.StatusNotFound}
	case errors.Is(err, tenants.ErrConflict):
		return Problem{Type: problemBase + "conflict", Title: "Conflict", Status: http.StatusConflict, Detail: err.Error()}
	case errors.As(err, &qe):
		return Problem{Type: problemBase + "quota", Title: "Quota exceeded", Status: http.StatusTooManyRequests, Detail: err.Error(),
			Errors: []ProblemField{{Field: qe.Quota, Rule: "quota", Detail: qe.Error()}}}
	case errors.Is(err, tenants.ErrQuota):
		return Problem{Type: problemBase + "quota", Title: "Quota exceeded", Status: http.StatusTooManyRequests, Detail: err.Error()}
	case errors.As(err, &tle):
		return Problem{Type: problemBase + "too-large", Title: "Too large", Status: http.StatusRequestEntityTooLarge, Detail: tle.Error(),
			Errors: []ProblemField{{Field: tle.Limit.Setting, Rule: "max", Detail: "at most " + tle.Limit.String()}}}
	case errors.Is(err, sandbox.ErrTooLarge):
		return Problem{Type: problemBase + "too-large", Title: "Too large", Status: http.StatusRequestEntityTooLarge, Detail: err.Error()}
	case errors.Is(err, sandbox.ErrNoSpace):
		return Problem{Type: problemBase + "no-space", Title: "No space left in the sandbox", Status: http.StatusInsufficientStorage, Detail: err.Error()}
	case errors.Is(err, vmpool.ErrUnavailable):
		return Problem{Type: problemBase + "hypervisor-unavailable", Title: "Hypervisor unavailable", Status: http.StatusServiceUnavailable,
			Detail: err.Error()}
	case errors.Is(err, tenants.ErrUnauthorized):
		return Problem{Type: problemBase + "unauthorized", Title: "Authentication required", Status: http.StatusUnauthorized,
			Detail: "send a valid API token as 'Authorization: Bearer <token>', or sign in"}
	case errors.As(err, &fbe):
		return Problem{Type: problemBase + "forbidden", Title: "Forbidden", Status: http.StatusForbidden, Detail: fbe.detail}
	case errors.Is(err, tenants.ErrForbidden):
		return Problem{Type: problemBase + "forbidden", Title: "Forbidden", Status: http.StatusForbidden, Detail: err.Error()}
	case errors.As(err, &he):
		p := Problem{Type: "about:blank", Title: http.StatusText(he.Code), Status: he.Code}
		if m, ok := he.Message.(string); ok && m != http.StatusText(he.Code) {
			p.Detail = m
		}
		switch he.Code {
		case http.StatusRequestEntityTooLarge:
			p.Type, p.Detail = problemBase+"too-large", "the request body is larger than this endpoint accepts"
		case http.StatusForbidden, http.StatusBadRequest:
			if strings.Contains(strings.ToLower(p.Detail), "csrf") {
				p.Type, p.Status, p.Title = problemBase+"csrf", http.StatusForbidden, "Forbidden"
				p.Detail = "missing or invalid CSRF token: reload the page and try again"
			}
		}
		return p
	}
	return Problem{Type: problemBase + "internal", Title: "Internal error", Status: http.StatusInternalServerError,
		Detail: "something went wrong on our side; the request id helps the operator find it"}
}

// allFieldErrors appends every *tenants.FieldError in err's tree to out.
func allFieldErrors(err error, out []*tenants.FieldError) []*tenants.FieldError {
	if fe, ok := err.(*tenants.FieldError); ok {
		return append(out, fe)
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = allFieldErrors(e, out)
		}
	case interface{ Unwrap() error }:
		if e := u.Unwrap(); e != nil {
			out = allFieldErrors(e, out)
		}
	}
	return out
}

// handleError renders err as a problem document (API) or an error page.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	if errors.Is(err, context.Canceled) {
		return
	}
	p := problemFor(err)
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
// no route took (404, 405) is the API's when its path is under /api/.
func (s *Server) isAPI(c echo.Context) bool {
	if r, ok := routeOf(s.routes, c); ok {
		return r.API
	}
	return strings.HasPrefix(c.Request().URL.Path, "/api/")
}
