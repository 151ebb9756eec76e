package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/tenants"
)

// mayOpen is the request's handlers.MayOpen: whether its caller (read when
// asked, after authentication) may open a page of the route table. The
// navigation is built from it, so it offers exactly what authorize admits.
func (s *Server) mayOpen(c echo.Context) handlers.MayOpen {
	return func(path string) bool {
		for _, r := range s.routes {
			if r.Method == http.MethodGet && r.Path == path && !r.API {
				return permits(r, handlers.CallerOf(c))
			}
		}
		return false
	}
}

// permits says whether authorize lets cl through to r without a refusal or
// a detour (sign-in, tenant choice). A check that holds for some requests
// only (Check.When) counts as applying: a link is left out rather than
// lead to a refusal.
func permits(r Route, cl *handlers.Caller) bool {
	switch {
	case r.Perm == tenants.PermPublic:
		return true
	case cl.Kind == "anonymous":
		return false
	case r.Perm == tenants.PermSignedIn:
		return true
	case r.Perm == tenants.PermOperator:
		return cl.Operator
	case cl.Tenant == nil || !tenants.Can(cl.Role, r.Perm):
		return false
	}
	for _, chk := range r.Also {
		if !tenants.Can(cl.Role, chk.Perm) {
			return false
		}
	}
	return true
}
