package tenants

// Permission names one thing a caller may do. Routes declare the permission
// they require (web/routes.go); Can decides it from the caller's role.
type Permission string

const (
	// PermPublic needs nobody signed in (login page, health checks).
	PermPublic Permission = "public"
	// PermSignedIn needs a signed-in person but no tenant (tenant chooser, logout).
	PermSignedIn Permission = "signed_in"
	// PermOperator needs a platform operator (STOCKADE_ADMIN_EMAILS).
	PermOperator Permission = "operator"

	// Tenant permissions: need an active tenant and a role that grants them.
	PermTenantView   Permission = "tenant.view"   // dashboard, own identity
	PermMembersRead  Permission = "members.read"  // list members
	PermMembersWrite Permission = "members.write" // invite, change roles, remove
	PermTokensRead   Permission = "tokens.read"   // list API tokens
	PermTokensWrite  Permission = "tokens.write"  // create, revoke API tokens
	PermAuditRead    Permission = "audit.read"    // audit log and its exports
	PermVMsRead      Permission = "vms.read"      // the tenant's VMs and pool settings
	PermVMsWrite     Permission = "vms.write"     // start, stop, destroy, recycle VMs; pool settings
	// PermTokensOwn: create API tokens of a role one's own covers, list and
	// revoke one's own (every role: the CLI and agents need one). Reading or
	// revoking another member's token needs tokens.read / tokens.write.
	PermTokensOwn Permission = "tokens.own"
	// PermSandboxesRead: the tenant's sandboxes, their timelines and the
	// commands run in them (with their output).
	PermSandboxesRead Permission = "sandboxes.read"
	// PermSandboxesWrite: create and destroy sandboxes, run commands, read
	// and write their files.
	PermSandboxesWrite Permission = "sandboxes.write"
	// PermTerminalsDrive: open a sandbox's terminal and type into it, or
	// take control of one after asking.
	PermTerminalsDrive Permission = "terminals.drive"
	// PermTerminalsWatch: watch live terminals read-only, replay and
	// download their recordings.
	PermTerminalsWatch Permission = "terminals.watch"
	// PermPolicyRead: the tenant policy, its versions and their diffs
	// (every member: people should know the rules their agents run under).
	PermPolicyRead Permission = "policy.read"
	// PermPolicyWrite: save a new policy version, roll back.
	PermPolicyWrite Permission = "policy.write"
	// PermSecretsRead: the names, hosts and states of the tenant's secrets,
	// never their values (every member but billing: they are what agents
	// get as placeholders).
	PermSecretsRead Permission = "secrets.read"
	// PermSecretsWrite: create and revoke secrets.
	PermSecretsWrite Permission = "secrets.write"
	// PermComplianceRead: the compliance checklist with its evidence,
	// history, probe runs and export.
	PermComplianceRead Permission = "compliance.read"
	// PermComplianceRun: run the compliance probe now.
	PermComplianceRun Permission = "compliance.run"
	// PermUsageRead: the tenant's usage, its cost and quota lines (pages
	// and summary API).
	PermUsageRead Permission = "usage.read"
	// PermUsageExport: billing exports (CSV/JSON) of the tenant's usage.
	PermUsageExport Permission = "usage.export"
	// PermWorkflowsRead: the tenant's workflows, their runs, logs and
	// artifacts list.
	PermWorkflowsRead Permission = "workflows.read"
	// PermWorkflowsWrite: save and delete workflows, set the workflow
	// settings (which secret signs GitHub deliveries).
	PermWorkflowsWrite Permission = "workflows.write"
	// PermRunsWrite: start runs by hand, cancel and re-run them.
	PermRunsWrite Permission = "runs.write"
	// PermIntegrationsRead: the tenant's outgoing webhook endpoints (URLs
	// and secret names, never values) and their delivery log.
	PermIntegrationsRead Permission = "integrations.read"
	// PermIntegrationsWrite: create, enable, disable and delete outgoing
	// webhook endpoints, send test events.
	PermIntegrationsWrite Permission = "integrations.write"
)

// grants is the role -> permission matrix. Tenant-scoped permissions only;
// the platform ones are decided by the caller's kind, not a role.
var grants = map[Role][]Permission{
	RoleAdmin: {PermTenantView, PermMembersRead, PermMembersWrite, PermTokensOwn, PermTokensRead, PermTokensWrite, PermAuditRead, PermVMsRead, PermVMsWrite,
		PermSandboxesRead, PermSandboxesWrite, PermTerminalsDrive, PermTerminalsWatch, PermPolicyRead, PermPolicyWrite,
		PermSecretsRead, PermSecretsWrite, PermComplianceRead, PermComplianceRun, PermUsageRead, PermUsageExport,
		PermWorkflowsRead, PermWorkflowsWrite, PermRunsWrite, PermIntegrationsRead, PermIntegrationsWrite},
	// Managers read the whole tenant and change nothing (ARCHITECTURE: "read
	// all of the tenant, usage, compliance"): no VM controls either.
	RoleManager: {PermTenantView, PermMembersRead, PermTokensOwn, PermTokensRead, PermAuditRead, PermVMsRead, PermSandboxesRead,
		PermTerminalsWatch, PermPolicyRead, PermSecretsRead, PermComplianceRead, PermUsageRead, PermWorkflowsRead, PermIntegrationsRead},
	RoleDeveloper: {PermTenantView, PermTokensOwn, PermVMsRead, PermSandboxesRead, PermSandboxesWrite, // sees the VMs their sandboxes run in
		PermTerminalsDrive, PermTerminalsWatch, PermPolicyRead, PermSecretsRead, PermWorkflowsRead, PermRunsWrite},
	// Auditors read what ran in sandboxes (commands and output) but start nothing.
	RoleAuditor: {PermTenantView, PermTokensOwn, PermMembersRead, PermAuditRead, PermSandboxesRead, PermTerminalsWatch, PermPolicyRead, PermSecretsRead,
		PermComplianceRead, PermWorkflowsRead},
	RoleBilling: {PermTenantView, PermTokensOwn, PermPolicyRead, PermUsageRead, PermUsageExport},
}

// Can reports whether role grants p. Platform permissions (public, signed
// in, operator) are not role grants and always return false here.
func Can(role Role, p Permission) bool {
	for _, x := range grants[role] {
		if x == p {
			return true
		}
	}
	return false
}

// covers reports whether role a grants every permission role b grants.
func covers(a, b Role) bool {
	for _, p := range grants[b] {
		if !Can(a, p) {
			return false
		}
	}
	return true
}

// RolesCoveredBy lists the roles, in Roles order, that role grants every
// permission of: the roles of the tokens its holder may make. An invalid
// role covers none.
func RolesCoveredBy(role Role) []Role {
	var out []Role
	if !role.Valid() {
		return nil
	}
	for _, r := range Roles {
		if covers(role, r) {
			out = append(out, r)
		}
	}
	return out
}

// CapRole is the role a token of role tok acts with when the person who
// made it now has role member: tok when member covers it, member when tok
// covers member (an admin token of a demoted admin acts as the new role);
// ok is false when neither covers the other (a developer token of a member
// who is now an auditor): the token may not act at all.
func CapRole(tok, member Role) (Role, bool) {
	switch {
	case !tok.Valid() || !member.Valid():
		return "", false
	case covers(member, tok):
		return tok, true
	case covers(tok, member):
		return member, true
	}
	return "", false
}

// TenantScoped reports whether p needs an active tenant.
func (p Permission) TenantScoped() bool {
	switch p {
	case PermPublic, PermSignedIn, PermOperator:
		return false
	}
	return true
}
