package web_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestRouteTableChecks: the terminal WebSocket's drive check is declared in
// the table (Route.Also), not left to its handler, and asks for
// terminals.drive exactly when the request does not only watch.
func TestRouteTableChecks(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	var found bool
	for _, r := range env.App.RouteTable() {
		if r.Method != http.MethodGet || r.Path != "/api/v1/sandboxes/:id/terminal" {
			continue
		}
		found = true
		if r.Perm != tenants.PermTerminalsWatch || len(r.Also) != 1 || r.Also[0].Perm != tenants.PermTerminalsDrive {
			t.Fatalf("Got(terminal route) perm %s, also %+v; want terminals.watch, also terminals.drive", r.Perm, r.Also)
		}
		for _, tc := range []struct {
			query string
			drive bool
		}{{"", true}, {"?session=x", true}, {"?watch=0", true}, {"?watch=1", false}, {"?watch=true", false}} {
			c := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/api/v1/sandboxes/x/terminal"+tc.query, nil), httptest.NewRecorder())
			if got := r.Also[0].When(c); got != tc.drive {
				t.Errorf("Got(needs terminals.drive for %q) = %v; want %v", tc.query, got, tc.drive)
			}
		}
	}
	if !found {
		t.Fatal("Got(terminal route) = missing; want GET /api/v1/sandboxes/:id/terminal in the table")
	}
}
