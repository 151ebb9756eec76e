package web

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// TestCSRFTypedError: a CSRF refusal is known by its type, not its words.
// The middleware's refusal maps to the csrf problem however it is wrapped;
// an echo error or a domain error that merely mentions "csrf" does not.
func TestCSRFTypedError(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		status int
		typ    string
	}{
		{"the middleware's refusal", &errdefs.CSRFError{Reason: "missing or invalid token"}, http.StatusForbidden, errdefs.ProblemBase + "csrf"},
		{"wrapped", fmt.Errorf("invite: %w", &errdefs.CSRFError{Reason: "cross-site request (Sec-Fetch-Site)"}), http.StatusForbidden, errdefs.ProblemBase + "csrf"},
		{"an echo 403 naming csrf", echo.NewHTTPError(http.StatusForbidden, "missing or invalid csrf token"), http.StatusForbidden, "about:blank"},
		{"an echo 400 naming csrf", echo.NewHTTPError(http.StatusBadRequest, "csrf field malformed"), http.StatusBadRequest, "about:blank"},
		{"a field called csrf", errdefs.Invalid("csrf_note", "required", "is required"), http.StatusUnprocessableEntity, errdefs.ProblemBase + "invalid"},
		{"echo's 404", echo.ErrNotFound, http.StatusNotFound, "about:blank"},
		{"echo's 413", echo.ErrStatusRequestEntityTooLarge, http.StatusRequestEntityTooLarge, errdefs.ProblemBase + "too-large"},
		{"echo wrapping a domain error", echo.NewHTTPError(http.StatusBadRequest).WithInternal(errdefs.ErrConflict), http.StatusConflict, errdefs.ProblemBase + "conflict"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := errdefs.ToProblem(fromEcho(tt.err))
			if p.Status != tt.status || p.Type != tt.typ {
				t.Errorf("Got(problem of %v) = %d %s; want %d %s", tt.err, p.Status, p.Type, tt.status, tt.typ)
			}
		})
	}
}
