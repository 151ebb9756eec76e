package web

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/tenants"
)

// mayOpen is the request's handlers.MayOpen: whether its caller (read when
// asked, after authentication) may open a page of the route table. The
// navigation is built from it, so it offers exactly what authorize admits.
func (s *Server) mayOpen(c echo.Context) handlers.MayOpen {
	return func(link string) bool {
		path, _, _ := strings.Cut(link, "?")
		var best *Route
		for i, r := range s.routes {
			// A static route wins over one with parameters, as in echo's router.
			if r.Method == http.MethodGet && !r.API && matches(r.Path, path) && (best == nil || !strings.Contains(r.Path, ":")) {
				best = &s.routes[i]
			}
		}
		return best != nil && permits(*best, handlers.CallerOf(c))
	}
}

// matches says whether path is one of pattern's (":name" segments stand
// for any one non-empty segment).
func matches(pattern, path string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(ps) != len(xs) {
		return false
	}
	for i, p := range ps {
		if p != xs[i] && (!strings.HasPrefix(p, ":") || xs[i] == "") {
			return false
		}
	}
	return true
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
