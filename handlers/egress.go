package handlers

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

// Kept so its call sites stay as they are; every service is required
// (handlers.New), so it never fails.
func (h *Handlers) egressStore() (*egress.Store, error) { return h.egress, nil }

// egressFilter reads ?sandbox=&decision=&limit=. The sandbox is its id or
// the end of it: the 12-character short id every page shows.
func egressFilter(c echo.Context) (egress.Filter, error) {
	f := egress.Filter{Decision: c.QueryParam("decision")}
	switch sb := strings.TrimSpace(c.QueryParam("sandbox")); {
	case sb == "":
	case len(sb) < 36 && strings.Trim(strings.ToLower(sb), "0123456789abcdef-") == "":
		f.SandboxShort = strings.ToLower(sb)
	default:
		f.SandboxID = sb
	}
	switch f.Decision {
	case "", egress.DecisionAllow, egress.DecisionDeny:
	default:
		return f, errdefs.Invalid("decision", "enum", "must be allow, deny or empty")
	}
	if l := c.QueryParam("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > egress.MaxEvents {
			return f, errdefs.Invalid("limit", "range", fmt.Sprintf("must be 1-%d", egress.MaxEvents))
		}
		f.Limit = n
	}
	return f, nil
}

// APIEgressEvents lists the tenant's egress decisions, newest first:
// GET /api/v1/egress-events.
func (h *Handlers) APIEgressEvents(c echo.Context) error {
	st, err := h.egressStore()
	if err != nil {
		return err
	}
	f, err := egressFilter(c)
	if err != nil {
		return err
	}
	evs, err := st.Events(c.Request().Context(), CallerOf(c).Tenant.ID, f)
	if err != nil {
		return err
	}
	out := api.EgressEventList{Events: make([]api.EgressEvent, 0, len(evs))}
	for _, e := range evs {
		out.Events = append(out.Events, api.EgressEvent{ID: e.ID, SandboxID: e.SandboxID, VMID: e.VMID, Method: e.Method, Host: e.Host,
			Port: e.Port, Decision: e.Decision, Rule: e.Rule, Addr: e.Addr, PolicyVersion: e.PolicyVersion, Intercepted: e.Intercepted,
			Status: e.Status, Error: e.Error, BytesUp: e.BytesUp, BytesDown: e.BytesDown, StartedAt: e.StartedAt.Format(time.RFC3339Nano),
			DurationMS: e.DurationMS, Suppressed: e.Suppressed, SecretsReflected: e.SecretsReflected})
	}
	return c.JSON(http.StatusOK, out)
}

// EgressPage shows the tenant's egress decisions: GET /egress.
func (h *Handlers) EgressPage(c echo.Context) error {
	v := views.EgressView{Sandbox: c.QueryParam("sandbox"), Decision: c.QueryParam("decision")}
	p := h.page(c, "Egress", views.NavEgress)
	st, err := h.egressStore()
	if err != nil {
		v.Unavailable = err.Error()
		return render(c, http.StatusOK, views.Egress(p, v))
	}
	f, err := egressFilter(c)
	if err != nil {
		return err
	}
	f.Limit = views.EgressPageRows
	evs, err := st.Events(c.Request().Context(), CallerOf(c).Tenant.ID, f)
	if err != nil {
		return err
	}
	for _, e := range evs {
		v.Rows = append(v.Rows, views.EgressRow{
			At: e.StartedAt, SandboxID: e.SandboxID, Method: e.Method, Target: net.JoinHostPort(e.Host, strconv.Itoa(e.Port)),
			Allowed: e.Decision == egress.DecisionAllow, Rule: e.Rule, Addr: e.Addr, Status: e.Status, Error: e.Error,
			BytesUp: e.BytesUp, BytesDown: e.BytesDown, PolicyVersion: e.PolicyVersion, Intercepted: e.Intercepted,
			Suppressed:       e.Suppressed,
			SecretsReflected: e.SecretsReflected,
		})
	}
	return render(c, http.StatusOK, views.Egress(p, v))
}
