package handlers

import (
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// Caller is who is making a request, as established by web/'s
// authentication middleware: a signed-in person or an API token.
type Caller struct {
	Kind     string // "user", "token" or "anonymous"
	User     *tenants.User
	Session  *tenants.Session
	Token    *tenants.APIToken
	Tenant   *tenants.Tenant // the one tenant this request acts in; nil if none chosen
	Role     tenants.Role    // role in Tenant
	Operator bool            // platform operator (STOCKADE_ADMIN_EMAILS)
	Tenants  []tenants.UserTenant
}

const callerKey = "stockade.caller"

// SetCaller stores the caller on the request context.
func SetCaller(c echo.Context, cl *Caller) { c.Set(callerKey, cl) }

// CallerOf returns the request's caller; never nil.
func CallerOf(c echo.Context) *Caller {
	if cl, ok := c.Get(callerKey).(*Caller); ok && cl != nil {
		return cl
	}
	return &Caller{Kind: "anonymous"}
}

// TenantID returns the active tenant's id or "".
func (cl *Caller) TenantID() string {
	if cl.Tenant == nil {
		return ""
	}
	return cl.Tenant.ID
}

// Actor describes the caller for the audit log.
func (cl *Caller) Actor(c echo.Context) audit.Actor {
	a := audit.Actor{Kind: cl.Kind, RemoteAddr: c.RealIP(), RequestID: c.Response().Header().Get(echo.HeaderXRequestID)}
	switch {
	case cl.User != nil:
		a.ID, a.Name = cl.User.ID, cl.User.Email
	case cl.Token != nil:
		a.ID, a.Name = cl.Token.ID, cl.Token.Name+" ("+cl.Token.Prefix+")"
	}
	return a
}
