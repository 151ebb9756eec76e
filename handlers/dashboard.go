package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/views"
)

// areas are the parts of the product that arrive with later issues. Their
// pages say what they will hold; they never show made-up data.
var areas = []struct {
	key   string
	view  views.AreaView
	href  string
	ready bool
}{
	{"sandboxes", views.AreaView{Title: "Sandboxes", Summary: "Disposable container sandboxes nested inside your tenant's VMs, created by agents through the API and CLI.",
		WillHold: []string{"every sandbox with its state, template, limits and owner", "create and destroy from the browser", "each sandbox's timeline and the commands run in it"}}, "/sandboxes", true},
	{"terminals", views.AreaView{Title: "Terminals", Summary: "Live terminals of agent sessions, watched in the browser and recorded.",
		WillHold: []string{"sessions live now and who is watching", "join as a watcher, request and take control", "replays of every recorded session and .cast downloads"}}, "/terminals", true},
	{"vms", views.AreaView{Title: "VMs", Summary: "Your tenant's virtual machines: the infrastructure boundary every sandbox runs inside.",
		WillHold: []string{"each VM's state, uptime, vCPUs, memory and agent version", "start, stop and recycle actions", "the warm pool that keeps boot off the request path"}}, "/vms", true},
	{"policy", views.AreaView{Title: "Policy", Summary: "What your agents may do: resources, lifetime, network egress, credentials, processes and cleanup.",
		WillHold: []string{"the versioned tenant policy with diffs and rollback", "domain allowlists for egress, default deny", "credentials agents can use but never read"}}, "/policy", false},
	{"usage", views.AreaView{Title: "Usage", Summary: "Metered compute, memory and egress per sandbox, priced per tenant.",
		WillHold: []string{"usage per day with charts", "top sandboxes, users and templates", "CSV and JSON billing exports with FOCUS columns"}}, "/usage", true},
	{"compliance", views.AreaView{Title: "Compliance", Summary: "The security checklist for running autonomous agents, evaluated with live evidence.",
		WillHold: []string{"pass / warn / fail per checklist item, with evidence and since when", "probe sandboxes that try each escape", "exports for auditors"}}, "/compliance", true},
}

// Area renders the page of an area that arrives later.
func (h *Handlers) Area(key string) echo.HandlerFunc {
	return func(c echo.Context) error {
		for _, a := range areas {
			if a.key == key {
				return render(c, http.StatusOK, views.ComingSoon(h.page(c, a.view.Title, key), a.view))
			}
		}
		return tenants.ErrNotFound
	}
}

// Dashboard is the tenant overview.
func (h *Handlers) Dashboard(c echo.Context) error {
	ctx := c.Request().Context()
	cl := CallerOf(c)
	v := views.DashboardView{TenantName: cl.Tenant.Name, Role: string(cl.Role)}
	if tenants.Can(cl.Role, tenants.PermMembersRead) {
		ms, err := h.store.ListMembers(ctx, cl.Tenant.ID)
		if err != nil {
			return err
		}
		v.Members = len(ms)
	}
	if tenants.Can(cl.Role, tenants.PermTokensRead) {
		ts, err := h.store.ListTokens(ctx, cl.Tenant.ID)
		if err != nil {
			return err
		}
		now := h.clock()
		for _, t := range ts {
			if t.RevokedAt == nil && t.ExpiresAt.After(now) {
				v.ActiveTokens++
			}
		}
	}
	if tenants.Can(cl.Role, tenants.PermAuditRead) {
		evs, err := h.audit.List(ctx, cl.Tenant.ID, audit.Filter{Limit: 8})
		if err != nil {
			return err
		}
		v.RecentAudit = auditRows(evs)
	}
	v.Quota = h.quotaWarningsView(c)
	for _, a := range areas {
		v.Areas = append(v.Areas, views.AreaCard{Title: a.view.Title, Href: a.href, Summary: a.view.Summary, Ready: a.ready})
	}
	return render(c, http.StatusOK, views.Dashboard(h.page(c, "Dashboard", "dashboard"), v))
}
