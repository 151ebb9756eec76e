package handlers

import (
	"fmt"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/views"
)

// MayOpen says whether the request's caller may open the page at a link of
// ours (GET; a path, with route parameters filled in, and a query). web/
// derives it from its route table and the caller, so the navigation
// offers exactly what authorization allows.
type MayOpen func(path string) bool

const mayOpenKey = "stockade.mayopen"

// SetMayOpen leaves the request's MayOpen for the page shell.
func SetMayOpen(c echo.Context, f MayOpen) { c.Set(mayOpenKey, f) }

// mayOpen answers for path; without a MayOpen on the request it opens
// nothing (a link too few, never a link to a refusal).
func mayOpen(c echo.Context, path string) bool {
	f, ok := c.Get(mayOpenKey).(MayOpen)
	return ok && f != nil && f(path)
}

// navEntry is one link of the navigation; summary describes it on the
// Settings hub and, for the tenant's pages, makes it an area card of the
// dashboard (the pages without one are reached from those that have).
type navEntry struct {
	key, label, href, summary string
}

// The navigation tables: functions, so nothing can change them.
func mainNav() []navEntry {
	return []navEntry{
		{views.NavDashboard, "Dashboard", "/", ""},
		{views.NavSandboxes, "Sandboxes", "/sandboxes", "Disposable container sandboxes nested inside your tenant's VMs, created by agents through the API and CLI."},
		{views.NavTemplates, "Templates", "/templates", ""},
		{views.NavVolumes, "Volumes", "/volumes", ""},
		{views.NavTerminals, "Terminals", "/terminals", "Live terminals of agent sessions, watched in the browser and recorded."},
		{views.NavWorkflows, "Workflows", "/workflows", "GitHub events and manual runs start your tests and agents in fresh sandboxes; results go back to GitHub, Slack and Jira."},
		{views.NavRuns, "Runs", "/runs", ""},
		{views.NavVMs, "VMs", "/vms", "Your tenant's virtual machines: the infrastructure boundary every sandbox runs inside."},
		{views.NavPolicy, "Policy", "/policy", "What your agents may do: resources, lifetime, network egress, credentials, processes and cleanup."},
		{views.NavEgress, "Egress", "/egress", ""},
		{views.NavUsage, "Usage", "/usage", "Metered compute, memory and egress per sandbox, priced per tenant, with billing exports."},
		{views.NavCompliance, "Compliance", "/compliance", "The security checklist for running autonomous agents, evaluated with live evidence and a probe."},
		{views.NavAudit, "Audit", "/audit", ""},
	}
}

func settingsNav() []navEntry {
	return []navEntry{
		{views.NavMembers, "Members", "/settings/members", "Who can sign in to the tenant, and with which role."},
		{views.NavTokens, "API tokens", "/settings/tokens", "Bearer tokens for agents, CI and the CLI."},
		{views.NavSecrets, "Secrets", "/settings/secrets", "Credentials the egress gateway injects into your agents' requests; never shown again."},
		{views.NavIntegrations, "Integrations", "/settings/integrations", "Outgoing webhooks with the tenant's events, and their deliveries."},
	}
}

func operatorNav() []navEntry {
	return []navEntry{
		{views.NavPlatform, "Overview", "/operator", ""},
		{views.NavTenants, "Tenants", "/operator/tenants", ""},
		{views.NavOperatorUsage, "Platform usage", "/operator/usage", ""},
		{views.NavPrices, "Prices", "/operator/prices", ""},
		{views.NavHosts, "Hosts", "/operator/hosts", ""},
		{views.NavOperatorTemplates, "Templates", "/operator/templates", ""},
	}
}

// nav is the caller's navigation: the entries of the tables it may open.
func nav(c echo.Context) views.Nav {
	pick := func(es []navEntry) []views.NavItem {
		var out []views.NavItem
		for _, e := range es {
			if mayOpen(c, e.href) {
				out = append(out, views.NavItem{Key: e.key, Label: e.label, Href: e.href, Summary: e.summary})
			}
		}
		return out
	}
	n := views.Nav{Main: pick(mainNav()), Settings: pick(settingsNav()), Operator: pick(operatorNav())}
	if hub := pick([]navEntry{{views.NavSettings, "Settings", "/settings", ""}}); len(hub) == 1 {
		n.Hub = hub[0]
	}
	return n
}

// roleCan says in words what a role may do.
func roleCan(r tenants.Role) string {
	switch r {
	case tenants.RoleAdmin:
		return "manage everything in the tenant"
	case tenants.RoleManager:
		return "see everything in the tenant (sandboxes, terminals, runs, usage, compliance and the audit log) but change nothing"
	case tenants.RoleDeveloper:
		return "start and use sandboxes and terminals, run workflows, and see VMs, policy and secret names"
	case tenants.RoleAuditor:
		return "see the audit log, compliance, sandboxes with their recordings, and workflows, but start nothing"
	case tenants.RoleBilling:
		return "see usage and exports"
	}
	return "do nothing here yet"
}

// permPurpose says in words what a permission is for, after "to".
func permPurpose(p tenants.Permission) string {
	switch p {
	case tenants.PermMembersRead:
		return "see the members"
	case tenants.PermMembersWrite:
		return "invite members and change their roles"
	case tenants.PermTokensRead:
		return "see the API tokens"
	case tenants.PermTokensWrite:
		return "create and revoke API tokens"
	case tenants.PermAuditRead:
		return "read the audit log"
	case tenants.PermVMsRead:
		return "see the VMs"
	case tenants.PermVMsWrite:
		return "start and stop VMs"
	case tenants.PermSandboxesRead:
		return "see sandboxes and their egress"
	case tenants.PermSandboxesWrite:
		return "start sandboxes"
	case tenants.PermTerminalsWatch:
		return "watch terminals"
	case tenants.PermTerminalsDrive:
		return "type into terminals"
	case tenants.PermPolicyRead:
		return "see the policy"
	case tenants.PermPolicyWrite:
		return "change the policy"
	case tenants.PermSecretsRead:
		return "see the secrets"
	case tenants.PermSecretsWrite:
		return "add and revoke secrets"
	case tenants.PermComplianceRead:
		return "see compliance"
	case tenants.PermComplianceRun:
		return "run the compliance probe"
	case tenants.PermUsageRead:
		return "see usage and cost"
	case tenants.PermUsageExport:
		return "export usage"
	case tenants.PermWorkflowsRead:
		return "see workflows and runs"
	case tenants.PermWorkflowsWrite:
		return "change workflows"
	case tenants.PermRunsWrite:
		return "start and cancel runs"
	case tenants.PermIntegrationsRead:
		return "see the integrations"
	case tenants.PermIntegrationsWrite:
		return "change the integrations"
	}
	return "open this page"
}

// rolesWith are the roles that grant p, the narrowest first; admin only
// when no other role does.
func rolesWith(p tenants.Permission) []string {
	var out []string
	for _, r := range []tenants.Role{tenants.RoleBilling, tenants.RoleAuditor, tenants.RoleDeveloper, tenants.RoleManager} {
		if tenants.Can(r, p) {
			out = append(out, string(r))
		}
	}
	if len(out) == 0 {
		out = []string{string(tenants.RoleAdmin)}
	}
	return out
}

// maxAdminsNamed bounds the admins a refusal names.
const maxAdminsNamed = 3

// Refusal says in words, to a signed-in member refused p in the current
// tenant, what their role can do and whom to ask for a role that can: the
// detail of the browser's 403 page. The tenant's admins are named by
// email (members the caller may not list otherwise: only the admins, who
// are whom to ask).
func (h *Handlers) Refusal(c echo.Context, p tenants.Permission) string {
	cl := CallerOf(c)
	if cl.Tenant == nil {
		return "This page needs a role in a tenant: choose a tenant first."
	}
	role := string(cl.Role)
	if role != "" {
		role = strings.ToUpper(role[:1]) + role[1:]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s members can %s. ", role, roleCan(cl.Role))
	who := "an admin of " + cl.Tenant.Name
	if ms, err := h.store.ListMembers(c.Request().Context(), cl.Tenant.ID); err == nil {
		var admins []string
		for _, m := range ms {
			if m.Role == tenants.RoleAdmin && (cl.User == nil || !strings.EqualFold(m.Email, cl.User.Email)) {
				admins = append(admins, m.Email)
			}
		}
		switch {
		case len(admins) > maxAdminsNamed:
			who += fmt.Sprintf(" (%s or one of %d more)", strings.Join(admins[:maxAdminsNamed], ", "), len(admins)-maxAdminsNamed)
		case len(admins) > 0:
			who += " (" + strings.Join(admins, ", ") + ")"
		}
	}
	roles := rolesWith(p)
	either := roles[len(roles)-1]
	if len(roles) > 1 {
		either = strings.Join(roles[:len(roles)-1], ", ") + " or " + either
	}
	fmt.Fprintf(&b, "Ask %s for the %s role to %s.", who, either, permPurpose(p))
	return b.String()
}

// OperatorRefusal is the 403 page's detail for a page of platform
// operators.
func OperatorRefusal() string {
	return "This page is for the platform's operators, who run Stockade for every tenant. Ask whoever runs this installation."
}
