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
	ok, suppressed := h.authFailures.Admit(eventType+"\x00"+tenantID+"\x00"+c.RealIP(), h.clock())
	if !ok {
		return
	}
	if details == nil {
		details = map[string]any{}
	}
	details["suppressed"] = suppressed
	details["user_agent"] = c.Request().UserAgent()
	e := audit.Actor{Kind: audit.ActorAnonymous, RemoteAddr: c.RealIP(),
		RequestID: c.Response().Header().Get(echo.HeaderXRequestID)}.Event(tenantID, eventType, "", "", details)
	e.Outcome = audit.OutcomeFailure
	if err := h.audit.Record(c.Request().Context(), e); err != nil {
		h.log.ErrorContext(c.Request().Context(), "audit authentication failure", "type", eventType, "err", err)
	}
}
