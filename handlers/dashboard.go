package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/views"
)

// areas are the parts of the product the dashboard points to; each shows
// to the roles that may open it.
var areas = []struct {
	title, summary, href string
	perm                 tenants.Permission
}{
	{"Sandboxes", "Disposable container sandboxes nested inside your tenant's VMs, created by agents through the API and CLI.", "/sandboxes", tenants.PermSandboxesRead},
	{"Terminals", "Live terminals of agent sessions, watched in the browser and recorded.", "/terminals", tenants.PermTerminalsWatch},
	{"Workflows", "GitHub events and manual runs start your tests and agents in fresh sandboxes; results go back to GitHub, Slack and Jira.", "/workflows", tenants.PermWorkflowsRead},
	{"VMs", "Your tenant's virtual machines: the infrastructure boundary every sandbox runs inside.", "/vms", tenants.PermVMsRead},
	{"Policy", "What your agents may do: resources, lifetime, network egress, credentials, processes and cleanup.", "/policy", tenants.PermPolicyRead},
	{"Usage", "Metered compute, memory and egress per sandbox, priced per tenant, with billing exports.", "/usage", tenants.PermUsageRead},
	{"Compliance", "The security checklist for running autonomous agents, evaluated with live evidence and a probe.", "/compliance", tenants.PermComplianceRead},
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
		if tenants.Can(cl.Role, a.perm) {
			v.Areas = append(v.Areas, views.AreaCard{Title: a.title, Href: a.href, Summary: a.summary})
		}
	}
	return render(c, http.StatusOK, views.Dashboard(h.page(c, "Dashboard", "dashboard"), v))
}
