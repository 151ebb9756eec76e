package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/tenants"
)

// Route is one entry of the route table: what it serves and the permission
// it requires. Access control is read here, in one place.
type Route struct {
	Method  string
	Path    string
	Perm    tenants.Permission
	API     bool // JSON API: bearer tokens accepted, errors as problem documents
	Handler echo.HandlerFunc
}

// Routes is the route table.
func Routes(h *handlers.Handlers) []Route {
	const (
		get  = http.MethodGet
		post = http.MethodPost
		del  = http.MethodDelete
		pat  = http.MethodPatch
		put  = http.MethodPut
	)
	P := tenants.PermPublic
	return []Route{
		// Health and login.
		{get, "/healthz", P, true, h.Healthz},
		{get, "/readyz", P, true, h.Readyz},
		{get, "/login", P, false, h.LoginPage},
		{get, "/login/start", P, false, h.LoginStart},
		{get, "/auth/callback", P, false, h.LoginCallback},
		{post, "/logout", tenants.PermSignedIn, false, h.Logout},
		{get, "/tenants/choose", tenants.PermSignedIn, false, h.ChooseTenant},
		{post, "/tenant/switch", tenants.PermSignedIn, false, h.SwitchTenant},

		// Tenant pages.
		{get, "/", tenants.PermTenantView, false, h.Dashboard},
		{get, "/sandboxes", tenants.PermSandboxesRead, false, h.SandboxesPage},
		{get, "/sandboxes/table", tenants.PermSandboxesRead, false, h.SandboxesTable},
		{post, "/sandboxes", tenants.PermSandboxesWrite, false, h.CreateSandbox},
		{get, "/sandboxes/:id", tenants.PermSandboxesRead, false, h.SandboxPage},
		{get, "/sandboxes/:id/live", tenants.PermSandboxesRead, false, h.SandboxLive},
		{post, "/sandboxes/:id/destroy", tenants.PermSandboxesWrite, false, h.DestroySandbox},
		{get, "/sandboxes/:id/terminal", tenants.PermTerminalsWatch, false, h.SandboxTerminalPage},
		{get, "/terminals", tenants.PermTerminalsWatch, false, h.TerminalsPage},
		{get, "/terminals/live", tenants.PermTerminalsWatch, false, h.TerminalsLive},
		{get, "/terminals/:id", tenants.PermTerminalsWatch, false, h.TerminalPage},
		{get, "/egress", tenants.PermSandboxesRead, false, h.EgressPage},
		{get, "/vms", tenants.PermVMsRead, false, h.VMsPage},
		{get, "/vms/table", tenants.PermVMsRead, false, h.VMsTable},
		{post, "/vms", tenants.PermVMsWrite, false, h.StartVM},
		{post, "/vms/pool", tenants.PermVMsWrite, false, h.SetVMPool},
		{post, "/vms/:id/stop", tenants.PermVMsWrite, false, h.StopVM},
		{post, "/vms/:id/destroy", tenants.PermVMsWrite, false, h.DestroyVM},
		{post, "/vms/:id/recycle", tenants.PermVMsWrite, false, h.RecycleVM},
		{get, "/policy", tenants.PermPolicyRead, false, h.PolicyPage},
		{post, "/policy", tenants.PermPolicyWrite, false, h.SavePolicySection},
		{post, "/policy/raw", tenants.PermPolicyWrite, false, h.SavePolicyRaw},
		{post, "/policy/rollback", tenants.PermPolicyWrite, false, h.RollbackPolicy},
		{get, "/policy/versions/:version", tenants.PermPolicyRead, false, h.PolicyVersionPage},
		{get, "/usage", tenants.PermUsageRead, false, h.UsagePage},
		{get, "/usage/sandboxes/:id", tenants.PermUsageRead, false, h.SandboxUsagePage},
		{get, "/compliance", tenants.PermComplianceRead, false, h.CompliancePage},
		{get, "/compliance/print", tenants.PermComplianceRead, false, h.CompliancePrint},
		{get, "/compliance/export", tenants.PermComplianceRead, false, h.ComplianceExport},
		{get, "/compliance/probes/:id", tenants.PermComplianceRead, false, h.ComplianceProbePage},
		{post, "/compliance/probe", tenants.PermComplianceRun, false, h.RunComplianceProbe},
		// Workflows and runs. A run's log streams as Server-Sent Events.
		{get, "/workflows", tenants.PermWorkflowsRead, false, h.WorkflowsPage},
		{get, "/workflows/new", tenants.PermWorkflowsWrite, false, h.NewWorkflowPage},
		{post, "/workflows", tenants.PermWorkflowsWrite, false, h.SaveWorkflow},
		{post, "/workflows/settings", tenants.PermWorkflowsWrite, false, h.SaveWorkflowSettings},
		{get, "/workflows/:name", tenants.PermWorkflowsRead, false, h.WorkflowPage},
		{post, "/workflows/:name/runs", tenants.PermRunsWrite, false, h.StartWorkflowRun},
		{get, "/runs", tenants.PermWorkflowsRead, false, h.RunsPage},
		{get, "/runs/:id", tenants.PermWorkflowsRead, false, h.RunPage},
		{get, "/runs/:id/summary", tenants.PermWorkflowsRead, false, h.RunSummary},
		{get, "/runs/:id/events", tenants.PermWorkflowsRead, false, h.RunEvents},
		{post, "/runs/:id/cancel", tenants.PermRunsWrite, false, h.CancelRun},
		{post, "/runs/:id/rerun", tenants.PermRunsWrite, false, h.RerunRun},
		{get, "/runs/:run/artifacts/:index", tenants.PermWorkflowsRead, false, h.RunArtifact},
		{get, "/audit", tenants.PermAuditRead, false, h.Audit},
		{get, "/audit/export", tenants.PermAuditRead, false, h.AuditExport},
		{get, "/settings", tenants.PermTenantView, false, h.Settings},
		{get, "/settings/members", tenants.PermMembersRead, false, h.Members},
		{post, "/settings/members", tenants.PermMembersWrite, false, h.InviteMember},
		{post, "/settings/members/:id/role", tenants.PermMembersWrite, false, h.SetMemberRole},
		{post, "/settings/members/:id/remove", tenants.PermMembersWrite, false, h.RemoveMember},
		{get, "/settings/tokens", tenants.PermTokensRead, false, h.Tokens},
		{post, "/settings/tokens", tenants.PermTokensWrite, false, h.CreateToken},
		{post, "/settings/tokens/:id/revoke", tenants.PermTokensWrite, false, h.RevokeToken},
		{get, "/settings/secrets", tenants.PermSecretsRead, false, h.SecretsPage},
		{post, "/settings/secrets", tenants.PermSecretsWrite, false, h.CreateSecret},
		{post, "/settings/secrets/:name/revoke", tenants.PermSecretsWrite, false, h.RevokeSecret},
		{post, "/settings/secrets/:name/inject", tenants.PermSecretsWrite, false, h.SetSecretInject},
		{get, "/settings/integrations", tenants.PermIntegrationsRead, false, h.IntegrationsPage},
		{post, "/settings/integrations", tenants.PermIntegrationsWrite, false, h.CreateWebhook},
		{post, "/settings/integrations/:id/test", tenants.PermIntegrationsWrite, false, h.TestWebhook},
		{post, "/settings/integrations/:id/delete", tenants.PermIntegrationsWrite, false, h.DeleteWebhook},
		{post, "/settings/integrations/:id/enable", tenants.PermIntegrationsWrite, false, h.EnableWebhook},
		{post, "/settings/integrations/:id/disable", tenants.PermIntegrationsWrite, false, h.DisableWebhook},

		// Platform operators.
		{get, "/operator/tenants", tenants.PermOperator, false, h.OperatorTenants},
		{post, "/operator/tenants", tenants.PermOperator, false, h.OperatorCreateTenant},
		{get, "/operator/hosts", tenants.PermOperator, false, h.OperatorHosts},
		{post, "/operator/tenants/:id/quota", tenants.PermOperator, false, h.OperatorSetQuota},
		{get, "/operator/usage", tenants.PermOperator, false, h.OperatorUsagePage},
		{get, "/operator/prices", tenants.PermOperator, false, h.PricesPage},
		{post, "/operator/prices", tenants.PermOperator, false, h.OperatorSetPrice},
		// Incident response: freeze destroys the tenant's sandboxes and
		// refuses new sandboxes and VMs until unfreeze.
		{post, "/operator/tenants/:id/freeze", tenants.PermOperator, false, h.OperatorFreezeTenant},
		{post, "/operator/tenants/:id/unfreeze", tenants.PermOperator, false, h.OperatorUnfreezeTenant},

		// JSON API.
		{get, "/api/v1/openapi.json", P, true, openAPIHandler()},
		{get, "/api/v1/me", tenants.PermSignedIn, true, h.Me},
		{get, "/api/v1/members", tenants.PermMembersRead, true, h.APIMembers},
		{post, "/api/v1/members", tenants.PermMembersWrite, true, h.APIInviteMember},
		{pat, "/api/v1/members/:id", tenants.PermMembersWrite, true, h.APIUpdateMember},
		{del, "/api/v1/members/:id", tenants.PermMembersWrite, true, h.APIRemoveMember},
		{get, "/api/v1/tokens", tenants.PermTokensRead, true, h.APITokens},
		{post, "/api/v1/tokens", tenants.PermTokensWrite, true, h.Idempotent(handlers.IdemToken, h.APICreateToken)},
		{del, "/api/v1/tokens/:id", tenants.PermTokensWrite, true, h.APIRevokeToken},
		{get, "/api/v1/secrets", tenants.PermSecretsRead, true, h.APISecrets},
		{post, "/api/v1/secrets", tenants.PermSecretsWrite, true, h.APICreateSecret},
		{pat, "/api/v1/secrets/:name", tenants.PermSecretsWrite, true, h.APIUpdateSecret},
		{del, "/api/v1/secrets/:name", tenants.PermSecretsWrite, true, h.APIRevokeSecret},
		{get, "/api/v1/integrations/webhooks", tenants.PermIntegrationsRead, true, h.APIWebhooks},
		{post, "/api/v1/integrations/webhooks", tenants.PermIntegrationsWrite, true, h.APICreateWebhook},
		{pat, "/api/v1/integrations/webhooks/:id", tenants.PermIntegrationsWrite, true, h.APIUpdateWebhook},
		{del, "/api/v1/integrations/webhooks/:id", tenants.PermIntegrationsWrite, true, h.APIDeleteWebhook},
		{post, "/api/v1/integrations/webhooks/:id/test", tenants.PermIntegrationsWrite, true, h.APITestWebhook},
		{get, "/api/v1/integrations/deliveries", tenants.PermIntegrationsRead, true, h.APIWebhookDeliveries},
		{get, "/api/v1/policy", tenants.PermPolicyRead, true, h.APIPolicy},
		{put, "/api/v1/policy", tenants.PermPolicyWrite, true, h.APIPutPolicy},
		{post, "/api/v1/policy/preview", tenants.PermPolicyWrite, true, h.APIPreviewPolicy},
		// The schema holds no tenant data.
		{get, "/api/v1/policy/schema", tenants.PermSignedIn, true, h.APIPolicySchema},
		{get, "/api/v1/policy/diff", tenants.PermPolicyRead, true, h.APIPolicyDiff},
		{post, "/api/v1/policy/rollback", tenants.PermPolicyWrite, true, h.APIRollbackPolicy},
		{get, "/api/v1/policy/versions", tenants.PermPolicyRead, true, h.APIPolicyVersions},
		{get, "/api/v1/policy/versions/:version", tenants.PermPolicyRead, true, h.APIPolicyVersion},
		{get, "/api/v1/audit", tenants.PermAuditRead, true, h.AuditExport},
		{get, "/api/v1/vms", tenants.PermVMsRead, true, h.APIVMs},
		{post, "/api/v1/vms", tenants.PermVMsWrite, true, h.Idempotent(handlers.IdemVM, h.APICreateVM)},
		{get, "/api/v1/vms/:id", tenants.PermVMsRead, true, h.APIVM},
		{del, "/api/v1/vms/:id", tenants.PermVMsWrite, true, h.APIDestroyVM},
		{post, "/api/v1/vms/:id/stop", tenants.PermVMsWrite, true, h.APIStopVM},
		{post, "/api/v1/vms/:id/recycle", tenants.PermVMsWrite, true, h.APIRecycleVM},
		{get, "/api/v1/vm-pool", tenants.PermVMsRead, true, h.APIVMPool},
		{put, "/api/v1/vm-pool", tenants.PermVMsWrite, true, h.APISetVMPool},
		{get, "/api/v1/sandboxes", tenants.PermSandboxesRead, true, h.APISandboxes},
		// Creates take an Idempotency-Key (handlers.Idempotent): a retry answers the first result.
		{post, "/api/v1/sandboxes", tenants.PermSandboxesWrite, true, h.Idempotent(handlers.IdemSandbox, h.APICreateSandbox)},
		{get, "/api/v1/sandboxes/:id", tenants.PermSandboxesRead, true, h.APISandbox},
		{del, "/api/v1/sandboxes/:id", tenants.PermSandboxesWrite, true, h.APIDestroySandbox},
		{post, "/api/v1/sandboxes/:id/exec", tenants.PermSandboxesWrite, true, h.APIExec},
		// Resumes a streamed command that outlived its server (NDJSON from ?offset=).
		{get, "/api/v1/sandboxes/:id/execs/:exec_id/stream", tenants.PermSandboxesWrite, true, h.APIResumeExec},
		{get, "/api/v1/sandboxes/:id/files", tenants.PermSandboxesWrite, true, h.APIReadFile},
		{put, "/api/v1/sandboxes/:id/files", tenants.PermSandboxesWrite, true, h.APIWriteFile},
		// WebSocket: watching needs the route's permission; driving (no
		// ?watch=1) terminals.drive too, checked before the upgrade.
		{get, "/api/v1/sandboxes/:id/terminal", tenants.PermTerminalsWatch, true, h.TerminalSocket},
		{get, "/api/v1/terminals", tenants.PermTerminalsWatch, true, h.APITerminals},
		{get, "/api/v1/terminals/:id", tenants.PermTerminalsWatch, true, h.APITerminal},
		{get, "/api/v1/terminals/:id/cast", tenants.PermTerminalsWatch, true, h.TerminalCast},
		// Egress decisions of the gateway (sandbox connections, allowed or denied).
		{get, "/api/v1/egress-events", tenants.PermSandboxesRead, true, h.APIEgressEvents},
		// Usage and cost of the caller's tenant: the billing export (streamed,
		// audited), a summary for dashboards, and the quota with what is used.
		{get, "/api/v1/usage", tenants.PermUsageExport, true, h.APIUsageExport},
		{get, "/api/v1/usage/summary", tenants.PermUsageRead, true, h.APIUsageSummary},
		{get, "/api/v1/quota", tenants.PermTenantView, true, h.APIQuota},
		{get, "/api/v1/hosts", tenants.PermOperator, true, h.APIHosts},
		{get, "/api/v1/tenants", tenants.PermOperator, true, h.APITenants},
		{post, "/api/v1/tenants", tenants.PermOperator, true, h.APICreateTenant},
		{get, "/api/v1/tenants/:id/quota", tenants.PermOperator, true, h.APITenantQuota},
		{put, "/api/v1/tenants/:id/quota", tenants.PermOperator, true, h.APISetTenantQuota},
		{get, "/api/v1/prices", tenants.PermOperator, true, h.APIPrices},
		{post, "/api/v1/prices", tenants.PermOperator, true, h.APISetPrice},
		// Every tenant's usage as FOCUS rows, streamed (audited, scope all).
		{get, "/api/v1/operator/usage", tenants.PermOperator, true, h.OperatorUsageExport},
		{post, "/api/v1/tenants/:id/freeze", tenants.PermOperator, true, h.APIFreezeTenant},
		{post, "/api/v1/tenants/:id/unfreeze", tenants.PermOperator, true, h.APIUnfreezeTenant},
		// The security checklist with its evidence; probe runs.
		{get, "/api/v1/compliance", tenants.PermComplianceRead, true, h.APICompliance},
		{post, "/api/v1/compliance/probe", tenants.PermComplianceRun, true, h.APIRunComplianceProbe},
		{get, "/api/v1/compliance/probes", tenants.PermComplianceRead, true, h.APIComplianceProbes},
		{get, "/api/v1/compliance/probes/:id", tenants.PermComplianceRead, true, h.APIComplianceProbe},
		// Workflows (YAML definitions, JSON accepted too), their settings, and
		// runs. GitHub deliveries arrive on web.GitHubHookPath, outside this
		// table: they authenticate by signature, not session or token.
		{get, "/api/v1/workflows", tenants.PermWorkflowsRead, true, h.APIWorkflows},
		{get, "/api/v1/workflows/:name", tenants.PermWorkflowsRead, true, h.APIWorkflow},
		{put, "/api/v1/workflows/:name", tenants.PermWorkflowsWrite, true, h.APIPutWorkflow},
		{del, "/api/v1/workflows/:name", tenants.PermWorkflowsWrite, true, h.APIDeleteWorkflow},
		{post, "/api/v1/workflows/:name/runs", tenants.PermRunsWrite, true, h.Idempotent(handlers.IdemRun, h.APIStartRun)},
		{get, "/api/v1/workflow-settings", tenants.PermWorkflowsRead, true, h.APIWorkflowSettings},
		{put, "/api/v1/workflow-settings", tenants.PermWorkflowsWrite, true, h.APIPutWorkflowSettings},
		{get, "/api/v1/runs", tenants.PermWorkflowsRead, true, h.APIRuns},
		{get, "/api/v1/runs/:id", tenants.PermWorkflowsRead, true, h.APIRun},
		{get, "/api/v1/runs/:id/log", tenants.PermWorkflowsRead, true, h.APIRunLog},
		{post, "/api/v1/runs/:id/cancel", tenants.PermRunsWrite, true, h.APICancelRun},
		{post, "/api/v1/runs/:id/rerun", tenants.PermRunsWrite, true, h.Idempotent(handlers.IdemRun, h.APIRerun)},
	}
}
