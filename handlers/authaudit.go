package handlers

import (
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants/audit"
)

// authFailureBurst is how many failed sign-ins or tokens from one address
// are audited a minute; the rest are counted into the next one.
const authFailureBurst = 10

// AuditAuthFailure records a failed sign-in or a refused API token
// (auth.login_failed, auth.token_failed; outcome failure) in tenantID's log
// ("" when no tenant is known: a platform event). Anyone can cause these, so
// they are rate-limited: authFailureBurst per kind, tenant and address a
// minute, the next one after counting those folded in.
func (h *Handlers) AuditAuthFailure(c echo.Context, eventType, tenantID string, details map[string]any) {
	if details == nil {
		details = map[string]any{}
	}
	if !h.admitRefusal(eventType+"\x00"+tenantID+"\x00"+c.RealIP(), details) {
		return
	}
	details["user_agent"] = c.Request().UserAgent()
	e := audit.Actor{Kind: audit.ActorAnonymous, RemoteAddr: c.RealIP(),
		RequestID: c.Response().Header().Get(echo.HeaderXRequestID)}.Event(tenantID, eventType, "", "", details)
	e.Outcome = audit.OutcomeFailure
	if err := h.audit.Record(c.Request().Context(), e); err != nil {
		h.log.ErrorContext(c.Request().Context(), "audit authentication failure", "type", eventType, "err", err)
	}
}

// AuditAccessDenied records a signed-in caller refused by a route's
// permission (auth.access_denied, outcome denied) in tenantID's log ("":
// the platform's), rate-limited like AuditAuthFailure per caller and route.
func (h *Handlers) AuditAccessDenied(c echo.Context, tenantID string, details map[string]any) {
	cl := CallerOf(c)
	a := cl.Actor(c)
	if !h.admitRefusal(audit.TypeAccessDenied+"\x00"+tenantID+"\x00"+a.ID+"\x00"+c.Request().Method+" "+c.Path(), details) {
		return
	}
	details["method"], details["route"] = c.Request().Method, c.Path()
	e := a.Event(tenantID, audit.TypeAccessDenied, "route", c.Path(), details)
	e.Outcome = audit.OutcomeDenied
	if err := h.audit.Record(c.Request().Context(), e); err != nil {
		h.log.ErrorContext(c.Request().Context(), "audit access denied", "err", err)
	}
}

// admitRefusal applies the refusals' rate limit to key, noting in details
// how many were folded in.
func (h *Handlers) admitRefusal(key string, details map[string]any) bool {
	ok, suppressed := h.authFailures.Admit(key, h.clock())
	if ok {
		details["suppressed"] = suppressed
	}
	return ok
}
