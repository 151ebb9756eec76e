package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/tenants"
)

// Route is one entry of the route table: what it serves and the
// permissions it requires. Access control is read here, in one place.
type Route struct {
	Method string
	Path   string
	// Perm is the permission every request of the route needs.
	Perm tenants.Permission
	// API marks a route of the JSON API: bearer tokens accepted, errors
	// as problem documents, documented in the OpenAPI document (Doc).
	API     bool
	Handler echo.HandlerFunc
	// Also are object-level checks on top of Perm: permissions some
	// requests of the route need, checked after Perm and before the
	// handler runs (a WebSocket before its upgrade).
	Also []Check
	// Doc documents an API route (openapi.go).
	Doc *Doc
	// Channel names the path parameter of the sandbox whose VM agent
	// channel the route needs: the request is served by the replica that
	// owns that channel, forwarded there from any other (web/forward.go).
	Channel string
}

// Check is an object-level access check of a route: a request for which
// When holds (every request when When is nil) needs Perm as well. Checks
// apply to routes of a tenant permission (a caller with a role).
type Check struct {
	Perm tenants.Permission
	When func(c echo.Context) bool
	// Doc says which requests need Perm (in the OpenAPI document), Refusal
	// what a caller without it is told.
	Doc, Refusal string
}

// driveTerminal: a terminal WebSocket that does not ask to watch
// (?watch=1) drives the terminal, which needs terminals.drive.
var driveTerminal = Check{
	Perm: tenants.PermTerminalsDrive,
	When: func(c echo.Context) bool {
		w := c.QueryParam("watch")
		return w != "1" && w != "true"
	},
	Doc:     "Driving (no ?watch=1)",
	Refusal: "may watch terminals (?watch=1), not drive them",
}

// usageExport is the answer of a usage export, CSV or JSON.
func usageExport(desc string) []Answer {
	return []Answer{{Status: http.StatusOK, Desc: desc, Content: []Content{
		{Media: api.MediaCSV, Schema: textSchema("a header row with the FOCUS columns of UsageExportRow, in that order, then the rows", api.MediaCSV)},
		{Media: echo.MIMEApplicationJSON, Type: []api.UsageExportRow{}}}}}
}

// Routes is the route table. The OpenAPI document it serves is generated
// from its API routes, once.
func Routes(h *handlers.Handlers) []Route {
	const (
		get  = http.MethodGet
		post = http.MethodPost
		del  = http.MethodDelete
		pat  = http.MethodPatch
		put  = http.MethodPut
	)
	P := tenants.PermPublic
	var routes []Route
	// Built at the first request for it, not with every server (a test
	// harness builds many): ~40 ms.
	spec := sync.OnceValues(func() ([]byte, error) {
		doc, err := OpenAPIDocument(routes)
		if err != nil {
			return nil, fmt.Errorf("build the OpenAPI document: %w", err)
		}
		return json.MarshalIndent(doc, "", "  ")
	})
	routes = []Route{
		// Health and login.
		{Method: get, Path: "/login", Perm: P, Handler: h.LoginPage},
		{Method: get, Path: "/login/start", Perm: P, Handler: h.LoginStart},
		{Method: get, Path: "/auth/callback", Perm: P, Handler: h.LoginCallback},
		{Method: post, Path: "/logout", Perm: tenants.PermSignedIn, Handler: h.Logout},
		{Method: get, Path: "/tenants/choose", Perm: tenants.PermSignedIn, Handler: h.ChooseTenant},
		{Method: post, Path: "/tenant/switch", Perm: tenants.PermSignedIn, Handler: h.SwitchTenant},

		// Tenant pages.
		{Method: get, Path: "/", Perm: tenants.PermTenantView, Handler: h.Dashboard},
		{Method: get, Path: "/sandboxes", Perm: tenants.PermSandboxesRead, Handler: h.SandboxesPage},
		{Method: get, Path: "/sandboxes/table", Perm: tenants.PermSandboxesRead, Handler: h.SandboxesTable},
		{Method: post, Path: "/sandboxes", Perm: tenants.PermSandboxesWrite, Handler: h.CreateSandbox},
		{Method: get, Path: "/sandboxes/:id", Perm: tenants.PermSandboxesRead, Handler: h.SandboxPage, Channel: "id"},
		{Method: get, Path: "/sandboxes/:id/live", Perm: tenants.PermSandboxesRead, Handler: h.SandboxLive, Channel: "id"},
		{Method: post, Path: "/sandboxes/:id/destroy", Perm: tenants.PermSandboxesWrite, Handler: h.DestroySandbox, Channel: "id"},
		{Method: post, Path: "/sandboxes/:id/pause", Perm: tenants.PermSandboxesWrite, Handler: h.PauseSandbox, Channel: "id"},
		{Method: post, Path: "/sandboxes/:id/resume", Perm: tenants.PermSandboxesWrite, Handler: h.ResumeSandbox, Channel: "id"},
		{Method: get, Path: "/sandboxes/:id/terminal", Perm: tenants.PermTerminalsWatch, Handler: h.SandboxTerminalPage, Channel: "id"},
		{Method: get, Path: "/terminals", Perm: tenants.PermTerminalsWatch, Handler: h.TerminalsPage},
		{Method: get, Path: "/terminals/live", Perm: tenants.PermTerminalsWatch, Handler: h.TerminalsLive},
		{Method: get, Path: "/terminals/:id", Perm: tenants.PermTerminalsWatch, Handler: h.TerminalPage},
		{Method: get, Path: "/egress", Perm: tenants.PermSandboxesRead, Handler: h.EgressPage},
		{Method: get, Path: "/vms", Perm: tenants.PermVMsRead, Handler: h.VMsPage},
		{Method: get, Path: "/vms/table", Perm: tenants.PermVMsRead, Handler: h.VMsTable},
		{Method: post, Path: "/vms", Perm: tenants.PermVMsWrite, Handler: h.StartVM},
		{Method: post, Path: "/vms/pool", Perm: tenants.PermVMsWrite, Handler: h.SetVMPool},
		{Method: post, Path: "/vms/:id/stop", Perm: tenants.PermVMsWrite, Handler: h.StopVM},
		{Method: post, Path: "/vms/:id/destroy", Perm: tenants.PermVMsWrite, Handler: h.DestroyVM},
		{Method: post, Path: "/vms/:id/recycle", Perm: tenants.PermVMsWrite, Handler: h.RecycleVM},
		{Method: get, Path: "/policy", Perm: tenants.PermPolicyRead, Handler: h.PolicyPage},
		{Method: post, Path: "/policy", Perm: tenants.PermPolicyWrite, Handler: h.SavePolicySection},
		{Method: post, Path: "/policy/raw", Perm: tenants.PermPolicyWrite, Handler: h.SavePolicyRaw},
		{Method: post, Path: "/policy/rollback", Perm: tenants.PermPolicyWrite, Handler: h.RollbackPolicy},
		{Method: get, Path: "/policy/versions/:version", Perm: tenants.PermPolicyRead, Handler: h.PolicyVersionPage},
		{Method: get, Path: "/usage", Perm: tenants.PermUsageRead, Handler: h.UsagePage},
		{Method: get, Path: "/usage/sandboxes/:id", Perm: tenants.PermUsageRead, Handler: h.SandboxUsagePage},
		{Method: get, Path: "/compliance", Perm: tenants.PermComplianceRead, Handler: h.CompliancePage},
		{Method: get, Path: "/compliance/print", Perm: tenants.PermComplianceRead, Handler: h.CompliancePrint},
		{Method: get, Path: "/compliance/export", Perm: tenants.PermComplianceRead, Handler: h.ComplianceExport},
		{Method: get, Path: "/compliance/probes/:id", Perm: tenants.PermComplianceRead, Handler: h.ComplianceProbePage},
		{Method: post, Path: "/compliance/probe", Perm: tenants.PermComplianceRun, Handler: h.RunComplianceProbe},
		// Workflows and runs. A run's log streams as Server-Sent Events.
		{Method: get, Path: "/workflows", Perm: tenants.PermWorkflowsRead, Handler: h.WorkflowsPage},
		{Method: get, Path: "/workflows/new", Perm: tenants.PermWorkflowsWrite, Handler: h.NewWorkflowPage},
		{Method: post, Path: "/workflows", Perm: tenants.PermWorkflowsWrite, Handler: h.SaveWorkflow},
		{Method: post, Path: "/workflows/settings", Perm: tenants.PermWorkflowsWrite, Handler: h.SaveWorkflowSettings},
		{Method: get, Path: "/workflows/:name", Perm: tenants.PermWorkflowsRead, Handler: h.WorkflowPage},
		{Method: post, Path: "/workflows/:name/runs", Perm: tenants.PermRunsWrite, Handler: h.StartWorkflowRun},
		{Method: get, Path: "/runs", Perm: tenants.PermWorkflowsRead, Handler: h.RunsPage},
		{Method: get, Path: "/runs/:id", Perm: tenants.PermWorkflowsRead, Handler: h.RunPage},
		{Method: get, Path: "/runs/:id/summary", Perm: tenants.PermWorkflowsRead, Handler: h.RunSummary},
		{Method: get, Path: "/runs/:id/events", Perm: tenants.PermWorkflowsRead, Handler: h.RunEvents},
		{Method: post, Path: "/runs/:id/cancel", Perm: tenants.PermRunsWrite, Handler: h.CancelRun},
		{Method: post, Path: "/runs/:id/rerun", Perm: tenants.PermRunsWrite, Handler: h.RerunRun},
		{Method: get, Path: "/runs/:run/artifacts/:index", Perm: tenants.PermWorkflowsRead, Handler: h.RunArtifact},
		{Method: get, Path: "/audit", Perm: tenants.PermAuditRead, Handler: h.Audit},
		{Method: get, Path: "/audit/export", Perm: tenants.PermAuditRead, Handler: h.AuditExport},
		{Method: get, Path: "/settings", Perm: tenants.PermTenantView, Handler: h.Settings},
		{Method: get, Path: "/settings/members", Perm: tenants.PermMembersRead, Handler: h.Members},
		{Method: post, Path: "/settings/members", Perm: tenants.PermMembersWrite, Handler: h.InviteMember},
		{Method: post, Path: "/settings/members/:id/role", Perm: tenants.PermMembersWrite, Handler: h.SetMemberRole},
		{Method: post, Path: "/settings/members/:id/remove", Perm: tenants.PermMembersWrite, Handler: h.RemoveMember},
		{Method: get, Path: "/settings/tokens", Perm: tenants.PermTokensOwn, Handler: h.Tokens},
		{Method: post, Path: "/settings/tokens", Perm: tenants.PermTokensOwn, Handler: h.CreateToken},
		{Method: post, Path: "/settings/tokens/:id/revoke", Perm: tenants.PermTokensOwn, Handler: h.RevokeToken},
		{Method: get, Path: "/volumes", Perm: tenants.PermSandboxesRead, Handler: h.VolumesPage},
		{Method: post, Path: "/volumes", Perm: tenants.PermSandboxesWrite, Handler: h.CreateVolume},
		{Method: post, Path: "/volumes/:name/resize", Perm: tenants.PermSandboxesWrite, Handler: h.ResizeVolume},
		{Method: post, Path: "/volumes/:name/delete", Perm: tenants.PermSandboxesWrite, Handler: h.DeleteVolume},
		{Method: get, Path: "/settings/secrets", Perm: tenants.PermSecretsRead, Handler: h.SecretsPage},
		{Method: post, Path: "/settings/secrets", Perm: tenants.PermSecretsWrite, Handler: h.CreateSecret},
		{Method: post, Path: "/settings/secrets/:name/revoke", Perm: tenants.PermSecretsWrite, Handler: h.RevokeSecret},
		{Method: post, Path: "/settings/secrets/:name/inject", Perm: tenants.PermSecretsWrite, Handler: h.SetSecretInject},
		{Method: get, Path: "/settings/integrations", Perm: tenants.PermIntegrationsRead, Handler: h.IntegrationsPage},
		{Method: post, Path: "/settings/integrations", Perm: tenants.PermIntegrationsWrite, Handler: h.CreateWebhook},
		{Method: post, Path: "/settings/integrations/:id/test", Perm: tenants.PermIntegrationsWrite, Handler: h.TestWebhook},
		{Method: post, Path: "/settings/integrations/:id/delete", Perm: tenants.PermIntegrationsWrite, Handler: h.DeleteWebhook},
		{Method: post, Path: "/settings/integrations/:id/enable", Perm: tenants.PermIntegrationsWrite, Handler: h.EnableWebhook},
		{Method: post, Path: "/settings/integrations/:id/disable", Perm: tenants.PermIntegrationsWrite, Handler: h.DisableWebhook},

		// Platform operators.
		{Method: get, Path: "/operator", Perm: tenants.PermOperator, Handler: h.OperatorDashboard},
		{Method: get, Path: "/operator/tenants", Perm: tenants.PermOperator, Handler: h.OperatorTenants},
		{Method: post, Path: "/operator/tenants", Perm: tenants.PermOperator, Handler: h.OperatorCreateTenant},
		{Method: get, Path: "/operator/hosts", Perm: tenants.PermOperator, Handler: h.OperatorHosts},
		{Method: post, Path: "/operator/hosts", Perm: tenants.PermOperator, Handler: h.OperatorAddHost},
		{Method: post, Path: "/operator/hosts/cordon", Perm: tenants.PermOperator, Handler: h.OperatorHostAction("cordon")},
		{Method: post, Path: "/operator/hosts/uncordon", Perm: tenants.PermOperator, Handler: h.OperatorHostAction("uncordon")},
		{Method: post, Path: "/operator/hosts/drain", Perm: tenants.PermOperator, Handler: h.OperatorHostAction("drain")},
		{Method: post, Path: "/operator/hosts/remove", Perm: tenants.PermOperator, Handler: h.OperatorHostAction("remove")},
		{Method: post, Path: "/operator/vms/:id/destroy", Perm: tenants.PermOperator, Handler: h.OperatorDestroyVM},
		{Method: post, Path: "/operator/tenants/:id/quota", Perm: tenants.PermOperator, Handler: h.OperatorSetQuota},
		{Method: get, Path: "/operator/usage", Perm: tenants.PermOperator, Handler: h.OperatorUsagePage},
		{Method: get, Path: "/operator/prices", Perm: tenants.PermOperator, Handler: h.PricesPage},
		{Method: post, Path: "/operator/prices", Perm: tenants.PermOperator, Handler: h.OperatorSetPrice},
		// Incident response: freeze destroys the tenant's sandboxes and
		// refuses new sandboxes and VMs until unfreeze.
		{Method: post, Path: "/operator/tenants/:id/freeze", Perm: tenants.PermOperator, Handler: h.OperatorFreezeTenant},
		{Method: post, Path: "/operator/tenants/:id/unfreeze", Perm: tenants.PermOperator, Handler: h.OperatorUnfreezeTenant},

		// JSON API. Each route's Doc is its operation in the OpenAPI
		// document, generated from it and the api types it names.
		{Method: get, Path: "/healthz", Perm: P, API: true, Handler: h.Healthz,
			Doc: &Doc{Summary: "Liveness: the process answers", Tag: "health", Answers: ok("Alive", api.Status{})}},
		{Method: get, Path: "/readyz", Perm: P, API: true, Handler: h.Readyz,
			Doc: &Doc{Summary: "Readiness: the database and identity provider answer, and a libvirt host where VMs run", Tag: "health",
				Answers: []Answer{answer(http.StatusOK, "Ready", api.Status{}), answer(http.StatusServiceUnavailable, "Not ready, and why", api.Status{})}}},
		{Method: get, Path: "/api/v1/openapi.json", Perm: P, API: true, Handler: openAPIHandler(spec),
			Doc: &Doc{Summary: "This document", Tag: "meta", Answers: []Answer{{Status: http.StatusOK, Desc: "The OpenAPI 3.1 document",
				Content: []Content{{Media: echo.MIMEApplicationJSON, Schema: &openapi3.Schema{Type: types(openapi3.TypeObject)}}}}}}},
		{Method: get, Path: "/api/v1/me", Perm: tenants.PermSignedIn, API: true, Handler: h.Me,
			Doc: &Doc{Summary: "Who the caller is: person or token, tenant and role", Tag: "identity", Answers: ok("The caller", api.Me{})}},

		{Method: get, Path: "/api/v1/members", Perm: tenants.PermMembersRead, API: true, Handler: h.APIMembers,
			Doc: &Doc{Summary: "List the tenant's members and pending invitations", Tag: "members", Answers: ok("The list", api.MemberList{})}},
		{Method: post, Path: "/api/v1/members", Perm: tenants.PermMembersWrite, API: true, Handler: h.APIInviteMember,
			Doc: &Doc{Summary: "Invite a member by email with a role", Tag: "members", Body: jsonIn(api.InviteMember{}),
				Answers: []Answer{answer(http.StatusCreated, "The invitation", api.Member{})}, Errors: map[int]string{409: "Already a member"}}},
		{Method: pat, Path: "/api/v1/members/:id", Perm: tenants.PermMembersWrite, API: true, Handler: h.APIUpdateMember,
			Doc: &Doc{Summary: "Change a member's role", Tag: "members", Body: jsonIn(api.UpdateMember{}), Answers: done}},
		{Method: del, Path: "/api/v1/members/:id", Perm: tenants.PermMembersWrite, API: true, Handler: h.APIRemoveMember,
			Doc: &Doc{Summary: "Remove a member", Tag: "members", Answers: done}},

		{Method: get, Path: "/api/v1/tokens", Perm: tenants.PermTokensOwn, API: true, Handler: h.APITokens,
			Doc: &Doc{Summary: "List API tokens (never their secrets): the caller's own, or all of the tenant's with tokens.read", Tag: "tokens", Answers: ok("The list", api.TokenList{})}},
		// Creates take an Idempotency-Key (handlers.Idempotent): a retry answers the first result.
		{Method: post, Path: "/api/v1/tokens", Perm: tenants.PermTokensOwn, API: true, Handler: h.Idempotent(handlers.IdemToken, h.APICreateToken),
			Doc: &Doc{Summary: "Create an API token of a role the caller's covers (else 422 naming role); its secret is in this answer only (and in replays of it, sealed at rest)", Tag: "tokens",
				Params: api.IdempotencyParams{}, Body: jsonIn(api.CreateToken{}),
				Answers: []Answer{answer(http.StatusCreated, "The token with its secret in token", api.Token{})}}},
		{Method: del, Path: "/api/v1/tokens/:id", Perm: tenants.PermTokensOwn, API: true, Handler: h.APIRevokeToken,
			Doc: &Doc{Summary: "Revoke an API token: the caller's own, or any of the tenant's with tokens.write (another member's is 404)", Tag: "tokens", Answers: done}},

		// Tenant templates imported from OCI images (handlers/template_import.go).
		{Method: post, Path: handlers.TemplateImportPath, Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIImportTemplate,
			Doc: &Doc{Summary: "Import a tenant template from an OCI image: an upload (docker save tarball or OCI layout tar), or a pull from a registry the operator allows, through the tenant's egress", Tag: "templates",
				Params: api.ImportTemplateQuery{},
				Body: &Body{Content: []Content{{Media: echo.MIMEApplicationJSON, Type: api.ImportTemplate{}},
					{Media: api.MediaTar, Schema: textSchema("the image archive; the template's name in ?name=", api.MediaTar)},
					{Media: "multipart/form-data", Schema: textSchema("fields name and image (the archive)", "multipart/form-data")}}},
				Answers: []Answer{answer(http.StatusCreated, "The template's new version", api.TemplateVersion{})},
				Errors: map[int]string{409: "A built-in template, or one built from a recipe, has this name",
					413: "The upload is over STOCKADE_TEMPLATE_MAX_UPLOAD_BYTES (or the pull's blobs are); nothing was written",
					422: "The image was refused (a digest mismatch, a layer escaping its root, no linux/amd64 image, a registry not allowed, a credentials secret not scoped to the registry), the problem says which; nothing was written",
					429: "The tenant's template storage quota (max_template_mib) is used up"}}},
		{Method: get, Path: handlers.TemplateImportPage, Perm: tenants.PermSandboxesWrite, Handler: h.TemplateImportForm},
		{Method: post, Path: handlers.TemplateImportPage, Perm: tenants.PermSandboxesWrite, Handler: h.ImportTemplate},
		{Method: get, Path: "/api/v1/secrets", Perm: tenants.PermSecretsRead, API: true, Handler: h.APISecrets,
			Doc: &Doc{Summary: "List the tenant's secrets (never their values; hosts for admins only)", Tag: "secrets", Answers: ok("The list", api.SecretList{})}},
		{Method: post, Path: "/api/v1/secrets", Perm: tenants.PermSecretsWrite, API: true, Handler: h.APICreateSecret,
			Doc: &Doc{Summary: "Store a secret, encrypted; its value is never returned by anything", Tag: "secrets", Body: jsonIn(api.CreateSecret{}),
				Answers: []Answer{answer(http.StatusCreated, "The secret, without its value", api.Secret{})}, Errors: map[int]string{409: "A live secret has this name"}}},
		{Method: pat, Path: "/api/v1/secrets/:name", Perm: tenants.PermSecretsWrite, API: true, Handler: h.APIUpdateSecret,
			Doc: &Doc{Summary: "Change where a live secret may be injected into requests to its hosts", Tag: "secrets",
				Params: api.SecretParams{}, Body: jsonIn(api.UpdateSecret{}), Answers: ok("The secret, without its value", api.Secret{}),
				Errors: map[int]string{404: "No live secret of this name in the caller's tenant"}}},
		{Method: del, Path: "/api/v1/secrets/:name", Perm: tenants.PermSecretsWrite, API: true, Handler: h.APIRevokeSecret,
			Doc: &Doc{Summary: "Revoke a secret: the gateway stops using it at once", Tag: "secrets", Params: api.SecretParams{}, Answers: done,
				Errors: map[int]string{404: "No live secret of this name in the caller's tenant"}}},

		{Method: get, Path: "/api/v1/volumes", Perm: tenants.PermSandboxesRead, API: true, Handler: h.APIVolumes,
			Doc: &Doc{Summary: "List the tenant's volumes, where each is attached and who mounts it, with the volume quota", Tag: "volumes", Answers: ok("The list", api.VolumeList{})}},
		{Method: post, Path: "/api/v1/volumes", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APICreateVolume,
			Doc: &Doc{Summary: "Make a persistent volume (a sparse ext4 image) within the tenant's volume quota", Tag: "volumes", Body: jsonIn(api.CreateVolume{}),
				Answers: []Answer{answer(http.StatusCreated, "The volume", api.Volume{})}, Errors: map[int]string{409: "The tenant has a volume of this name", 429: "Over the volume quota (max_volume_gib)"}}},
		{Method: get, Path: "/api/v1/volumes/:name", Perm: tenants.PermSandboxesRead, API: true, Handler: h.APIVolume,
			Doc: &Doc{Summary: "Show a volume", Tag: "volumes", Params: api.VolumeParams{}, Answers: ok("The volume", api.Volume{}),
				Errors: map[int]string{404: "No volume of this name in the caller's tenant"}}},
		{Method: pat, Path: "/api/v1/volumes/:name", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIResizeVolume,
			Doc: &Doc{Summary: "Grow a volume (never shrink) while no VM holds it, within the quota", Tag: "volumes", Params: api.VolumeParams{},
				Body: jsonIn(api.ResizeVolume{}), Answers: ok("The volume", api.Volume{}),
				Errors: map[int]string{404: "No volume of this name in the caller's tenant", 409: "Attached to a VM"}}},
		{Method: del, Path: "/api/v1/volumes/:name", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIDeleteVolume,
			Doc: &Doc{Summary: "Delete a volume and its data", Tag: "volumes", Params: api.VolumeParams{}, Answers: done,
				Errors: map[int]string{404: "No volume of this name in the caller's tenant", 409: "Attached to a VM: destroy the sandboxes that use it first"}}},

		{Method: get, Path: "/api/v1/integrations/webhooks", Perm: tenants.PermIntegrationsRead, API: true, Handler: h.APIWebhooks,
			Doc: &Doc{Summary: "List the tenant's outgoing webhook endpoints (secret names, never values)", Tag: "integrations", Answers: ok("The list", api.WebhookList{})}},
		{Method: post, Path: "/api/v1/integrations/webhooks", Perm: tenants.PermIntegrationsWrite, API: true, Handler: h.APICreateWebhook,
			Doc: &Doc{Summary: "Add an outgoing webhook endpoint, signed per Standard Webhooks with a tenant secret's whsec_ key", Tag: "integrations",
				Body: jsonIn(api.CreateWebhook{}), Answers: []Answer{answer(http.StatusCreated, "The endpoint", api.WebhookEndpoint{})},
				Errors: map[int]string{409: "The tenant has as many endpoints as allowed"}}},
		{Method: pat, Path: "/api/v1/integrations/webhooks/:id", Perm: tenants.PermIntegrationsWrite, API: true, Handler: h.APIUpdateWebhook,
			Doc: &Doc{Summary: "Enable or disable an endpoint: a disabled one gets no new events", Tag: "integrations",
				Body: jsonIn(api.UpdateWebhook{}), Answers: ok("The endpoint", api.WebhookEndpoint{})}},
		{Method: del, Path: "/api/v1/integrations/webhooks/:id", Perm: tenants.PermIntegrationsWrite, API: true, Handler: h.APIDeleteWebhook,
			Doc: &Doc{Summary: "Delete an endpoint; its deliveries stay in the log", Tag: "integrations", Answers: done}},
		{Method: post, Path: "/api/v1/integrations/webhooks/:id/test", Perm: tenants.PermIntegrationsWrite, API: true, Handler: h.APITestWebhook,
			Doc: &Doc{Summary: "Queue a webhook.test event for the endpoint (even a disabled one)", Tag: "integrations",
				Answers: []Answer{answer(http.StatusAccepted, "Its delivery, pending", api.WebhookDelivery{})}}},
		{Method: get, Path: "/api/v1/integrations/deliveries", Perm: tenants.PermIntegrationsRead, API: true, Handler: h.APIWebhookDeliveries,
			Doc: &Doc{Summary: "The tenant's recent webhook deliveries, newest first", Tag: "integrations",
				Params: api.DeliveryQuery{}, Answers: ok("The list", api.DeliveryList{})}},

		{Method: get, Path: "/api/v1/policy", Perm: tenants.PermPolicyRead, API: true, Handler: h.APIPolicy,
			Doc: &Doc{Summary: "The tenant's policy now in force (version 0: the built-in strict defaults)", Tag: "policy",
				Answers: ok("The current version with its document", api.PolicyVersion{})}},
		{Method: put, Path: "/api/v1/policy", Perm: tenants.PermPolicyWrite, API: true, Handler: h.APIPutPolicy,
			Doc: &Doc{Summary: "Save a new policy version; a document failing the schema gets 422 listing every failing path and nothing is saved", Tag: "policy",
				Body: jsonIn(api.PolicyEdit{}), Answers: ok("The new version, with its changes against the one it replaced", api.PolicyVersion{}),
				Errors: map[int]string{409: "base_version is not the current version: another change was saved meanwhile"}}},
		{Method: post, Path: "/api/v1/policy/preview", Perm: tenants.PermPolicyWrite, API: true, Handler: h.APIPreviewPolicy,
			Doc: &Doc{Summary: "Check a document and say what saving it would change for running and new sandboxes; nothing is saved", Tag: "policy",
				Body: jsonIn(api.PolicyEdit{}), Answers: ok("The preview", api.PolicyPreview{})}},
		// The schema holds no tenant data.
		{Method: get, Path: "/api/v1/policy/schema", Perm: tenants.PermSignedIn, API: true, Handler: h.APIPolicySchema,
			Doc: &Doc{Summary: "The JSON Schema policy documents are checked against", Tag: "policy", Answers: []Answer{{Status: http.StatusOK,
				Desc: "A JSON Schema (draft 2020-12)", Content: []Content{{Media: echo.MIMEApplicationJSON, Schema: &openapi3.Schema{Type: types(openapi3.TypeObject)}}}}}}},
		{Method: get, Path: "/api/v1/policy/diff", Perm: tenants.PermPolicyRead, API: true, Handler: h.APIPolicyDiff,
			Doc: &Doc{Summary: "What changed between two versions", Tag: "policy", Params: api.PolicyDiffQuery{},
				Answers: ok("The changes", api.PolicyDiff{}), Errors: map[int]string{404: "No such version"}}},
		{Method: post, Path: "/api/v1/policy/rollback", Perm: tenants.PermPolicyWrite, API: true, Handler: h.APIRollbackPolicy,
			Doc: &Doc{Summary: "Save an older version's document as the newest version", Tag: "policy", Body: jsonIn(api.PolicyRollback{}),
				Answers: ok("The new version", api.PolicyVersion{}), Errors: map[int]string{404: "No such version"}}},
		{Method: get, Path: "/api/v1/policy/versions", Perm: tenants.PermPolicyRead, API: true, Handler: h.APIPolicyVersions,
			Doc: &Doc{Summary: "Every version of the tenant's policy, newest first (documents left out)", Tag: "policy", Answers: ok("The list", api.PolicyVersionList{})}},
		{Method: get, Path: "/api/v1/policy/versions/:version", Perm: tenants.PermPolicyRead, API: true, Handler: h.APIPolicyVersion,
			Doc: &Doc{Summary: "One version with its document", Tag: "policy", Params: api.PolicyVersionParams{},
				Answers: ok("The version", api.PolicyVersion{}), Errors: map[int]string{404: "No such version in the caller's tenant"}}},
		{Method: get, Path: "/api/v1/audit", Perm: tenants.PermAuditRead, API: true, Handler: h.AuditExport,
			Doc: &Doc{Summary: "Export the tenant's audit log (itself audited)", Tag: "audit", Params: api.AuditQuery{},
				Answers: []Answer{{Status: http.StatusOK, Desc: "The events, oldest first: JSON Lines (one AuditEvent per line), a JSON array, or CSV", Content: []Content{
					{Media: api.MediaJSONLines, Type: api.AuditEvent{}},
					{Media: echo.MIMEApplicationJSON, Type: []api.AuditEvent{}},
					{Media: api.MediaCSV, Schema: textSchema("a header row, then one row per event", api.MediaCSV)}}}}}},

		{Method: get, Path: "/api/v1/vms", Perm: tenants.PermVMsRead, API: true, Handler: h.APIVMs,
			Doc: &Doc{Summary: "List the tenant's VMs and whether the hypervisor is reachable", Tag: "vms", Answers: ok("The VMs", api.VMList{})}},
		{Method: post, Path: "/api/v1/vms", Perm: tenants.PermVMsWrite, API: true, Handler: h.Idempotent(handlers.IdemVM, h.APICreateVM),
			Doc: &Doc{Summary: "Boot a VM in the tenant's pool (no body, or {}); it boots in the background", Tag: "vms",
				Params: api.IdempotencyParams{}, Body: &Body{Optional: true, Content: []Content{{Media: echo.MIMEApplicationJSON, Type: api.CreateVM{}}}},
				Answers: []Answer{answer(http.StatusAccepted, "The VM, booting", api.VM{})},
				Errors:  map[int]string{429: "Over the pool's max_vms or the tenant quota", 503: "No libvirt host reachable, or no guest image"}}},
		{Method: get, Path: "/api/v1/vms/:id", Perm: tenants.PermVMsRead, API: true, Handler: h.APIVM,
			Doc: &Doc{Summary: "One VM with live CPU and guest numbers", Tag: "vms", Answers: ok("The VM", api.VM{})}},
		{Method: del, Path: "/api/v1/vms/:id", Perm: tenants.PermVMsWrite, API: true, Handler: h.APIDestroyVM,
			Doc: &Doc{Summary: "Destroy a VM at once", Tag: "vms", Answers: ok("The VM, stopped", api.VM{}),
				Errors: map[int]string{409: "Already ended", 503: "Its host is unreachable"}}},
		{Method: post, Path: "/api/v1/vms/:id/stop", Perm: tenants.PermVMsWrite, API: true, Handler: h.APIStopVM,
			Doc: &Doc{Summary: "Shut a running VM down through its agent", Tag: "vms",
				Answers: []Answer{answer(http.StatusAccepted, "The VM, stopping", api.VM{})}, Errors: map[int]string{409: "Not running"}}},
		{Method: post, Path: "/api/v1/vms/:id/recycle", Perm: tenants.PermVMsWrite, API: true, Handler: h.APIRecycleVM,
			Doc: &Doc{Summary: "Replace a running VM with a fresh one", Tag: "vms",
				Answers: []Answer{answer(http.StatusAccepted, "The old and the new VM", api.VMRecycle{})}, Errors: map[int]string{409: "Not running"}}},
		{Method: get, Path: "/api/v1/vm-pool", Perm: tenants.PermVMsRead, API: true, Handler: h.APIVMPool,
			Doc: &Doc{Summary: "The tenant's VM pool settings and quota", Tag: "vms", Answers: ok("The pool", api.Pool{})}},
		{Method: put, Path: "/api/v1/vm-pool", Perm: tenants.PermVMsWrite, API: true, Handler: h.APISetVMPool,
			Doc: &Doc{Summary: "Replace the VM pool settings (checked against the quota)", Tag: "vms", Body: jsonIn(api.SetPool{}),
				Answers: ok("The pool", api.Pool{}), Errors: map[int]string{429: "The pool grown to max_vms would not fit the quota"}}},

		{Method: get, Path: "/api/v1/sandboxes", Perm: tenants.PermSandboxesRead, API: true, Handler: h.APISandboxes,
			Doc: &Doc{Summary: "List the tenant's sandboxes: active ones, then recently ended", Tag: "sandboxes",
				Params: api.SandboxQuery{}, Answers: ok("The list", api.SandboxList{})}},
		{Method: post, Path: "/api/v1/sandboxes", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.Idempotent(handlers.IdemSandbox, h.APICreateSandbox),
			Doc: &Doc{Summary: "Create a sandbox; answers once it runs", Tag: "sandboxes", Params: api.IdempotencyParams{},
				Body:    &Body{Optional: true, Content: []Content{{Media: echo.MIMEApplicationJSON, Type: api.CreateSandbox{}}}},
				Answers: []Answer{answer(http.StatusCreated, "The sandbox, running", api.Sandbox{})},
				Errors: map[int]string{
					429: "Over the tenant quota (errors[].field names it: max_sandboxes, max_vcpus, max_memory_mib) or the pool's max_vms",
					503: "No VM could take it: hypervisor unreachable, boot failed; a sandbox that was recorded is failed with the reason"}}},
		{Method: get, Path: "/api/v1/sandboxes/:id", Perm: tenants.PermSandboxesRead, API: true, Handler: h.APISandbox, Channel: "id",
			Doc: &Doc{Summary: "One sandbox with its timeline and, while it runs, its usage", Tag: "sandboxes", Answers: ok("The sandbox", api.Sandbox{})}},
		{Method: del, Path: "/api/v1/sandboxes/:id", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIDestroySandbox, Channel: "id",
			Doc: &Doc{Summary: "Destroy a sandbox and everything it had", Tag: "sandboxes", Answers: ok("The sandbox, destroyed", api.Sandbox{}),
				Errors: map[int]string{409: "Already ended, or still being created", 503: "Its VM's agent is out of reach; nothing changed"}}},
		{Method: post, Path: "/api/v1/sandboxes/:id/pause", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIPauseSandbox, Channel: "id",
			Doc: &Doc{Summary: "Pause a running sandbox: its processes freeze, keep memory and files, use no CPU and are not billed vCPU-seconds (memory still is); its lifetime clock stops", Tag: "sandboxes",
				Answers: ok("The sandbox, paused (paused_at set)", api.Sandbox{}),
				Errors:  map[int]string{409: "Paused already, or not running", 503: "Its VM's agent is out of reach; nothing changed"}}},
		{Method: post, Path: "/api/v1/sandboxes/:id/resume", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIResumeSandbox, Channel: "id",
			Doc: &Doc{Summary: "Resume a paused sandbox; its lifetime is extended by the time it was paused", Tag: "sandboxes",
				Answers: ok("The sandbox, running", api.Sandbox{}),
				Errors:  map[int]string{409: "Not paused", 503: "Its VM's agent is out of reach; nothing changed"}}},
		{Method: post, Path: "/api/v1/sandboxes/:id/exec", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIExec, Channel: "id",
			Doc: &Doc{Summary: "Run a command in a sandbox", Tag: "sandboxes", Params: api.ExecQuery{}, Body: jsonIn(api.ExecRequest{}),
				Answers: []Answer{{Status: http.StatusOK, Desc: "How the command ended (or, with stream=1, its events: one ExecEvent per line)", Content: []Content{
					{Media: echo.MIMEApplicationJSON, Type: api.ExecResult{}}, {Media: api.MediaNDJSON, Type: api.ExecEvent{}}}}},
				Errors: map[int]string{409: "The sandbox is not running"}}},
		// Resumes a streamed command that outlived its server (NDJSON from ?offset=).
		{Method: get, Path: "/api/v1/sandboxes/:id/execs/:exec_id/stream", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIResumeExec, Channel: "id",
			Doc: &Doc{Summary: "Resume a streamed command that outlived its server (a restart)", Tag: "sandboxes", Params: api.ResumeExecParams{},
				Answers: []Answer{{Status: http.StatusOK, Desc: `The events of stream=1 from the offset on, one ExecEvent per line; the started event's "offset" is where the output really starts (past the asked one when the agent's buffer dropped bytes)`,
					Content: []Content{{Media: api.MediaNDJSON, Type: api.ExecEvent{}}}}},
				Errors: map[int]string{404: "No such command, or its process is gone (its record says lost)",
					409: "The command ended (its record has how), this server streams it already, or the sandbox is not running"}}},
		// The process API (handlers/processes.go): detached processes named
		// by their pid in the sandbox, and a sandbox's remaining lifetime.
		{Method: post, Path: "/api/v1/sandboxes/:id/processes", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIStartProcess, Channel: "id",
			Doc: &Doc{Summary: "Start a process in a sandbox, detached: it runs until it exits, is killed or the sandbox ends", Tag: "processes",
				Body: jsonIn(api.StartProcess{}), Answers: []Answer{answer(http.StatusCreated, "The process, running, with its pid", api.Process{})},
				Errors: map[int]string{409: "The sandbox is not running", 422: "A bad command, size or timeout; the problem names the field",
					429: "The sandbox runs max_processes processes already (16 by default)"}}},
		{Method: get, Path: "/api/v1/sandboxes/:id/processes", Perm: tenants.PermSandboxesRead, API: true, Handler: h.APIProcesses, Channel: "id",
			Doc: &Doc{Summary: "List a sandbox's processes: running ones, then the latest ended", Tag: "processes", Answers: ok("The list", api.ProcessList{})}},
		{Method: get, Path: "/api/v1/sandboxes/:id/processes/:pid", Perm: tenants.PermSandboxesRead, API: true, Handler: h.APIProcess, Channel: "id",
			Doc: &Doc{Summary: "One process: its state, and exit code once it ended", Tag: "processes", Params: api.ProcessParams{},
				Answers: ok("The process", api.Process{}), Errors: map[int]string{404: "No process with that pid in the sandbox"}}},
		{Method: get, Path: "/api/v1/sandboxes/:id/processes/:pid/output", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIProcessOutput, Channel: "id",
			Doc: &Doc{Summary: "A process's output from an offset, streamed (chunked NDJSON); with follow=1 until it ends", Tag: "processes", Params: api.ProcessOutputQuery{},
				Answers: []Answer{{Status: http.StatusOK, Desc: "One ProcessEvent per line: stdout/stderr with their offsets, and last a status event with the process",
					Content: []Content{{Media: api.MediaNDJSON, Type: api.ProcessEvent{}}}}},
				Errors: map[int]string{404: "No process with that pid in the sandbox", 422: "An offset past its output",
					503: "It runs, and this server is re-attaching it (after a restart): retry shortly"}}},
		{Method: post, Path: "/api/v1/sandboxes/:id/processes/:pid/stdin", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIProcessStdin, Channel: "id",
			Doc: &Doc{Summary: "Write to a process's stdin (its terminal's input with tty)", Tag: "processes", Params: api.ProcessParams{}, Body: jsonIn(api.ProcessStdin{}),
				Answers: done, Errors: map[int]string{404: "No process with that pid", 409: "It ended", 422: "Its stdin is not open"}}},
		{Method: post, Path: "/api/v1/sandboxes/:id/processes/:pid/stdin/close", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIProcessCloseStdin, Channel: "id",
			Doc: &Doc{Summary: "Close a process's stdin (EOF; ^D on a terminal)", Tag: "processes", Params: api.ProcessParams{},
				Answers: done, Errors: map[int]string{404: "No process with that pid", 409: "It ended", 422: "Its stdin is not open"}}},
		{Method: post, Path: "/api/v1/sandboxes/:id/processes/:pid/signal", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIProcessSignal, Channel: "id",
			Doc: &Doc{Summary: "Send a signal to a process's process group (audited)", Tag: "processes", Params: api.ProcessParams{}, Body: jsonIn(api.ProcessSignal{}),
				Answers: done, Errors: map[int]string{404: "No process with that pid", 409: "It ended", 422: "An unknown signal"}}},
		{Method: post, Path: "/api/v1/sandboxes/:id/processes/:pid/resize", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIProcessResize, Channel: "id",
			Doc: &Doc{Summary: "Resize a process's terminal", Tag: "processes", Params: api.ProcessParams{}, Body: jsonIn(api.ProcessResize{}),
				Answers: done, Errors: map[int]string{404: "No process with that pid", 409: "It ended", 422: "It has no terminal, or a size out of range"}}},
		{Method: get, Path: "/api/v1/sandboxes/:id/processes/:pid/wait", Perm: tenants.PermSandboxesRead, API: true, Handler: h.APIProcessWait, Channel: "id",
			Doc: &Doc{Summary: "Wait for a process to end (at most timeout_seconds)", Tag: "processes", Params: api.ProcessWaitQuery{},
				Answers: ok("The process: ended, or still running when the wait ran out", api.Process{}), Errors: map[int]string{404: "No process with that pid"}}},
		{Method: post, Path: "/api/v1/sandboxes/:id/timeout", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APISetTimeout, Channel: "id",
			Doc: &Doc{Summary: "Set a running sandbox's remaining lifetime from now (extend or shorten), within the policy maximum", Tag: "sandboxes",
				Body: jsonIn(api.SetTimeout{}), Answers: ok("The sandbox with its new expires_at", api.Sandbox{}),
				Errors: map[int]string{409: "The sandbox is not running", 422: "timeout_seconds below 1 or above the tenant policy's lifetime.max_timeout_seconds (the problem names the bound)",
					503: "Its VM's agent is out of reach; nothing changed"}}},
		{Method: get, Path: "/api/v1/sandboxes/:id/files", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIReadFile, Channel: "id",
			Doc: &Doc{Summary: "Read a file of a sandbox as raw bytes", Tag: "sandboxes", Params: api.FileQuery{},
				Answers: []Answer{{Status: http.StatusOK, Desc: "The file's bytes", Content: []Content{{Media: api.MediaBytes, Schema: textSchema("", api.MediaBytes)}}}},
				Errors: map[int]string{403: "The sandbox user may not read the file", 409: "The sandbox is not running",
					413: "The file is larger than the per-file limit (STOCKADE_MAX_FILE_BYTES, or the tenant policy's filesystem.max_file_bytes); the problem names it",
					422: "The path is empty or climbs with '..'"}}},
		{Method: put, Path: FileUploadPath, Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIWriteFile, Channel: "id",
			Doc: &Doc{Summary: "Write a file of a sandbox from the raw request body; it appears whole or not at all", Tag: "sandboxes", Params: api.WriteFileQuery{},
				Body:    &Body{Content: []Content{{Media: api.MediaBytes, Schema: textSchema("", api.MediaBytes)}}},
				Answers: ok("The file written", api.File{}),
				Errors: map[int]string{403: "The sandbox user may not write there; nothing was written", 409: "The sandbox is not running",
					413: "The body is larger than the per-file limit (STOCKADE_MAX_FILE_BYTES, or the tenant policy's filesystem.max_file_bytes), which the problem names; nothing was written",
					507: "The sandbox's disk is full"}}},
		// The native file API beyond read and write (handlers/files.go).
		{Method: post, Path: FileUploadPath, Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIUploadFiles, Channel: "id",
			Doc: &Doc{Summary: "Upload files: the body as one file (octet-stream, streamed), or a multipart form whose parts' file names are the paths", Tag: "files",
				Params: api.UploadQuery{},
				Body: &Body{Content: []Content{{Media: api.MediaBytes, Schema: textSchema("the file ?path=", api.MediaBytes)},
					{Media: "multipart/form-data", Schema: textSchema("parts with a file name: each a file, its name the path (absolute, or relative to ?path= or /workspace); written in order, each whole or not at all", "multipart/form-data")}}},
				Answers: ok("The files written", api.Uploaded{}),
				Errors:  fileErrors(map[int]string{413: "A file is larger than the per-file limit, which the problem names; it was not written (earlier parts were)", 507: "The sandbox's disk is full"})}},
		{Method: get, Path: "/api/v1/sandboxes/:id/files/stat", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIStatFile, Channel: "id",
			Doc: &Doc{Summary: "One file, folder or symlink (a symlink as itself, with its target)", Tag: "files", Params: api.FilePathQuery{},
				Answers: ok("The entry", api.FileEntry{}), Errors: fileErrors(nil)}},
		{Method: get, Path: "/api/v1/sandboxes/:id/files/list", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIListFiles, Channel: "id",
			Doc: &Doc{Summary: "List a folder, depth levels deep", Tag: "files", Params: api.ListFilesQuery{},
				Answers: ok("The entries", api.FileList{}), Errors: fileErrors(map[int]string{422: "path is not a folder or climbs with '..', or depth is outside 1 to 16"})}},
		{Method: post, Path: "/api/v1/sandboxes/:id/files/mkdir", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIMakeDir, Channel: "id",
			Doc: &Doc{Summary: "Make a folder with its missing parents", Tag: "files", Body: jsonIn(api.MakeDir{}),
				Answers: []Answer{answer(http.StatusCreated, "Made", api.MadeDir{}), answer(http.StatusOK, "It was there already (created false)", api.MadeDir{})},
				Errors:  fileErrors(map[int]string{409: "A file is there, or the sandbox is not running"})}},
		{Method: del, Path: FileUploadPath, Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIRemoveFile, Channel: "id",
			Doc: &Doc{Summary: "Remove a file, symlink or folder (a folder with entries only with recursive=true)", Tag: "files", Params: api.RemoveFileQuery{},
				Answers: done, Errors: fileErrors(map[int]string{409: "A folder with entries without recursive=true, a mount point, or the sandbox is not running; nothing was removed",
					422: "path is the sandbox's root or climbs with '..'"})}},
		{Method: post, Path: "/api/v1/sandboxes/:id/files/move", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIMoveFile, Channel: "id",
			Doc: &Doc{Summary: "Move or rename a file, symlink or folder", Tag: "files", Body: jsonIn(api.MoveFile{}),
				Answers: ok("The entry at its new path", api.FileEntry{}),
				Errors:  fileErrors(map[int]string{422: "source or destination climbs with '..', is the root, destination is inside source, or they are on different file systems"})}},
		{Method: post, Path: "/api/v1/sandboxes/:id/files/chmod", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIChmodFile, Channel: "id",
			Doc: &Doc{Summary: "Set a file's or folder's permission bits", Tag: "files", Body: jsonIn(api.ChmodFile{}),
				Answers: ok("The entry", api.FileEntry{}), Errors: fileErrors(nil)}},
		{Method: get, Path: "/api/v1/sandboxes/:id/files/watch", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIWatchFiles, Channel: "id",
			Doc: &Doc{Summary: "Watch a folder's changes (inotify in the sandbox) as Server-Sent Events", Tag: "files", Params: api.WatchQuery{},
				Answers: []Answer{{Status: http.StatusOK, Desc: `Server-Sent Events: "start" ({"path"}) once watching, one "fs" per change (WatchEvent), ` +
					`": keepalive" comments every 15 s, and "end" (WatchEnd) when the folder or the sandbox goes. At most 1000 events a second; ` +
					`beyond that one "overflow" event says how many were dropped.`,
					Content: []Content{{Media: api.MediaEventStream, Type: api.WatchEvent{}}}}},
				Errors: fileErrors(map[int]string{422: "path is not a folder (a file, say) or climbs with '..'"})}},
		{Method: get, Path: "/api/v1/sandboxes/:id/files/archive", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIArchiveFiles, Channel: "id",
			Doc: &Doc{Summary: "Download a folder (or a file) as a tar stream", Tag: "files", Params: api.FilePathQuery{},
				Answers: []Answer{{Status: http.StatusOK, Desc: "A tar of the folder's entries, named relative to it (a file: one entry by its name); symlinks as symlinks, " +
					"FIFOs, devices and /proc, /sys left out. Streamed: a stream over the per-file limit (the whole tar counts) is cut short",
					Content: []Content{{Media: api.MediaTar, Schema: textSchema("", api.MediaTar)}}}},
				Errors: fileErrors(map[int]string{413: "Over the per-file limit (STOCKADE_MAX_FILE_BYTES, or the tenant policy's filesystem.max_file_bytes)"})}},
		// WebSocket: watching needs the route's permission; driving (no
		// ?watch=1) terminals.drive too, checked before the upgrade.
		{Method: get, Path: "/api/v1/sandboxes/:id/terminal", Perm: tenants.PermTerminalsWatch, API: true, Handler: h.TerminalSocket, Channel: "id",
			Also: []Check{driveTerminal},
			Doc: &Doc{Summary: "A terminal in a sandbox, over WebSocket", Tag: "terminals", Params: api.TerminalParams{},
				Answers: []Answer{{Status: http.StatusSwitchingProtocols, Desc: "WebSocket. Binary frames carry terminal data: output to the client, keystrokes from the driver. " +
					"Text frames carry TerminalControl JSON: first a hello (session, role, offset of the next output byte, size, who drives and watches); " +
					"then resize, role, presence, requested, error and finally end (reason, exit_code) before the server closes. " +
					"Clients send resize (driver), request, take (after request), release and cancel. A client too slow to read is closed with 1013: " +
					"reconnect with ?session=&offset= to resume.", Content: []Content{{Media: echo.MIMEApplicationJSON, Type: api.TerminalControl{}}}}},
				Errors: map[int]string{400: "Not a WebSocket handshake", 409: "The sandbox is not running, or the session ended",
					503: "The sandbox's VM agent is out of reach"}}},
		{Method: get, Path: "/api/v1/terminals", Perm: tenants.PermTerminalsWatch, API: true, Handler: h.APITerminals,
			Doc: &Doc{Summary: "List the tenant's terminal sessions, newest first, with who is on the live ones", Tag: "terminals",
				Params: api.TerminalQuery{}, Answers: ok("The list", api.TerminalList{})}},
		{Method: get, Path: "/api/v1/terminals/:id", Perm: tenants.PermTerminalsWatch, API: true, Handler: h.APITerminal,
			Doc: &Doc{Summary: "One terminal session", Tag: "terminals", Answers: ok("The session", api.Terminal{})}},
		{Method: get, Path: "/api/v1/terminals/:id/cast", Perm: tenants.PermTerminalsWatch, API: true, Handler: h.TerminalCast,
			Doc: &Doc{Summary: "A session's recording, asciicast v2 (a live session's so far)", Tag: "terminals",
				Answers: []Answer{{Status: http.StatusOK, Desc: "The recording", Content: []Content{{Media: api.MediaCast, Schema: textSchema("", "")}}}}}},
		// Egress decisions of the gateway (sandbox connections, allowed or denied).
		{Method: get, Path: "/api/v1/egress-events", Perm: tenants.PermSandboxesRead, API: true, Handler: h.APIEgressEvents,
			Doc: &Doc{Summary: "List the egress gateway's decisions for the tenant's sandboxes, newest first", Tag: "egress",
				Params: api.EgressQuery{}, Answers: ok("The list", api.EgressEventList{})}},
		// Usage and cost of the caller's tenant: the billing export (streamed,
		// audited), a summary for dashboards, and the quota with what is used.
		{Method: get, Path: "/api/v1/usage", Perm: tenants.PermUsageExport, API: true, Handler: h.APIUsageExport,
			Doc: &Doc{Summary: "Export the tenant's usage for a period as FOCUS rows, streamed (itself audited as usage.exported)", Tag: "usage",
				Params: api.UsageExportQuery{}, Answers: usageExport("One row per sandbox, ledger hour and meter (vcpu-allocated, memory-allocated, cpu-measured, egress), in hour order; Content-Disposition names a file"),
				Errors: map[int]string{400: "from, to or format is malformed (the field is named)"}}},
		{Method: get, Path: "/api/v1/usage/summary", Perm: tenants.PermUsageRead, API: true, Handler: h.APIUsageSummary,
			Doc: &Doc{Summary: "The tenant's usage for a period (default this month): totals, each UTC day, and the top 10 sandboxes, users and templates by cost", Tag: "usage",
				Params: api.UsagePeriod{}, Answers: ok("The summary", api.UsageSummary{}), Errors: map[int]string{400: "from or to is malformed (the field is named)"}}},
		{Method: get, Path: "/api/v1/quota", Perm: tenants.PermTenantView, API: true, Handler: h.APIQuota,
			Doc: &Doc{Summary: "The caller's tenant quota: each limit with what is held now (sandboxes, vCPUs, memory, VMs) or used this month (CPU-hours), warn from 80 %", Tag: "usage",
				Answers: ok("The quota lines", api.QuotaReport{})}},
		{Method: get, Path: "/api/v1/hosts", Perm: tenants.PermOperator, API: true, Handler: h.APIHosts,
			Doc: &Doc{Summary: "List the libvirt hosts (platform operators)", Tag: "operators", Answers: ok("The list", api.HostList{})}},
		// Several libvirt hosts (platform operators; audited host.*).
		{Method: get, Path: "/api/v1/operator/hosts", Perm: tenants.PermOperator, API: true, Handler: h.APIOperatorHosts,
			Doc: &Doc{Summary: "List the libvirt hosts with their state, labels and capacity (platform operators)", Tag: "operators", Answers: ok("The list", api.HostList{})}},
		{Method: post, Path: "/api/v1/operator/hosts", Perm: tenants.PermOperator, API: true, Handler: h.APIAddHost,
			Doc: &Doc{Summary: "Add a libvirt host, connected to first (platform operators, audited host.added)", Tag: "operators", Body: jsonIn(api.AddHost{}),
				Answers: []Answer{answer(http.StatusCreated, "The host", api.Host{})}, Errors: map[int]string{409: "The host is already there", 422: "The URI is malformed or does not answer (uri), or labels are malformed"}}},
		{Method: post, Path: "/api/v1/operator/hosts/cordon", Perm: tenants.PermOperator, API: true, Handler: h.APIHostAction("cordon"),
			Doc: &Doc{Summary: "Cordon a host: no new VMs there, what runs stays (platform operators, audited host.cordoned)", Tag: "operators", Body: jsonIn(api.HostAction{}),
				Answers: ok("The host", api.Host{}), Errors: map[int]string{404: "No such host", 409: "Already cordoned, or the last active host (force it)"}}},
		{Method: post, Path: "/api/v1/operator/hosts/uncordon", Perm: tenants.PermOperator, API: true, Handler: h.APIHostAction("uncordon"),
			Doc: &Doc{Summary: "Make a cordoned or draining host active again (platform operators, audited host.uncordoned)", Tag: "operators", Body: jsonIn(api.HostAction{}),
				Answers: ok("The host", api.Host{}), Errors: map[int]string{404: "No such host", 409: "Already active"}}},
		{Method: post, Path: "/api/v1/operator/hosts/drain", Perm: tenants.PermOperator, API: true, Handler: h.APIHostAction("drain"),
			Doc: &Doc{Summary: "Drain a host: no new VMs, its warm VMs refilled elsewhere, sandboxes left to end; state drained once empty (platform operators, audited host.drained)", Tag: "operators", Body: jsonIn(api.HostAction{}),
				Answers: ok("The host", api.Host{}), Errors: map[int]string{404: "No such host", 409: "Already draining, or the last active host (force it)"}}},
		{Method: post, Path: "/api/v1/operator/hosts/remove", Perm: tenants.PermOperator, API: true, Handler: h.APIHostAction("remove"),
			Doc: &Doc{Summary: "Remove a host with no active VM (platform operators, audited host.removed)", Tag: "operators", Body: jsonIn(api.HostAction{}),
				Answers: done, Errors: map[int]string{404: "No such host", 409: "VMs still run there: drain it first"}}},
		{Method: get, Path: "/api/v1/tenants/:id/host-constraint", Perm: tenants.PermOperator, API: true, Handler: h.APIHostConstraint,
			Doc: &Doc{Summary: "The labels a tenant's VMs need on their host (platform operators)", Tag: "operators", Answers: ok("The constraint", api.HostConstraint{})}},
		{Method: put, Path: "/api/v1/tenants/:id/host-constraint", Perm: tenants.PermOperator, API: true, Handler: h.APISetHostConstraint,
			Doc: &Doc{Summary: "Set the labels a tenant's new VMs need on their host, e.g. dedicated=acme; empty: any host (platform operators, audited host.constraint_set)", Tag: "operators",
				Body: jsonIn(api.HostConstraint{}), Answers: ok("The constraint saved", api.HostConstraint{}), Errors: map[int]string{422: "A label is malformed (labels)"}}},
		{Method: get, Path: "/api/v1/tenants", Perm: tenants.PermOperator, API: true, Handler: h.APITenants,
			Doc: &Doc{Summary: "List the tenants (platform operators)", Tag: "operators", Answers: ok("The list", api.TenantList{})}},
		{Method: post, Path: "/api/v1/tenants", Perm: tenants.PermOperator, API: true, Handler: h.APICreateTenant,
			Doc: &Doc{Summary: "Create a tenant, optionally with its first admin (platform operators)", Tag: "operators", Body: jsonIn(api.CreateTenant{}),
				Answers: []Answer{answer(http.StatusCreated, "The tenant", api.Tenant{})}, Errors: map[int]string{409: "The slug is taken"}}},
		{Method: get, Path: "/api/v1/tenants/:id/quota", Perm: tenants.PermOperator, API: true, Handler: h.APITenantQuota,
			Doc: &Doc{Summary: "A tenant's quota (platform operators)", Tag: "operators", Answers: ok("The quota", api.TenantQuota{})}},
		{Method: put, Path: "/api/v1/tenants/:id/quota", Perm: tenants.PermOperator, API: true, Handler: h.APISetTenantQuota,
			Doc: &Doc{Summary: "Replace a tenant's quota; every limit is required (platform operators, audited tenant.quota_updated)", Tag: "operators",
				Body: jsonIn(api.SetTenantQuota{}), Answers: ok("The quota saved", api.TenantQuota{})}},
		{Method: get, Path: "/api/v1/prices", Perm: tenants.PermOperator, API: true, Handler: h.APIPrices,
			Doc: &Doc{Summary: "The platform list price in force with its history, and the price every tenant pays now (platform operators)", Tag: "operators",
				Answers: ok("The price book", api.PriceBook{})}},
		{Method: post, Path: "/api/v1/prices", Perm: tenants.PermOperator, API: true, Handler: h.APISetPrice,
			Doc: &Doc{Summary: "Add a version to the platform's price book, or with tenant_id to a tenant's override (platform operators, audited usage.price_set)", Tag: "operators",
				Body: jsonIn(api.SetPrice{}), Answers: []Answer{answer(http.StatusCreated, "The version", api.PriceVersion{})}, Errors: map[int]string{404: "No such tenant"}}},
		// Every tenant's usage as FOCUS rows, streamed (audited, scope all).
		{Method: get, Path: "/api/v1/operator/usage", Perm: tenants.PermOperator, API: true, Handler: h.OperatorUsageExport,
			Doc: &Doc{Summary: "Export every tenant's usage for a period as FOCUS rows, streamed (platform operators; audited usage.exported, scope all)", Tag: "operators",
				Params: api.UsageExportQuery{}, Answers: usageExport("One row per sandbox, ledger hour and meter, every tenant (SubAccountId/SubAccountName name it); Content-Disposition names a file"),
				Errors: map[int]string{400: "from, to or format is malformed (the field is named)"}}},
		{Method: post, Path: "/api/v1/tenants/:id/freeze", Perm: tenants.PermOperator, API: true, Handler: h.APIFreezeTenant,
			Doc: &Doc{Summary: "Freeze a tenant (incident response, platform operators): destroy its sandboxes, refuse new sandboxes and VMs; recordings and logs stay", Tag: "operators",
				Body: jsonIn(api.FreezeRequest{}), Answers: ok("The freeze", api.Freeze{}), Errors: map[int]string{409: "Already frozen"}}},
		{Method: post, Path: "/api/v1/tenants/:id/unfreeze", Perm: tenants.PermOperator, API: true, Handler: h.APIUnfreezeTenant,
			Doc: &Doc{Summary: "Lift a tenant's freeze (platform operators)", Tag: "operators", Answers: ok("Unfrozen", api.Freeze{}), Errors: map[int]string{409: "Not frozen"}}},
		// The security checklist with its evidence; probe runs.
		{Method: get, Path: "/api/v1/compliance", Perm: tenants.PermComplianceRead, API: true, Handler: h.APICompliance,
			Doc: &Doc{Summary: "The tenant's security checklist: every item with its status, evidence, since and checked_at, and recent status changes", Tag: "compliance",
				Answers: ok("The checklist", api.Compliance{})}},
		{Method: post, Path: "/api/v1/compliance/probe", Perm: tenants.PermComplianceRun, API: true, Handler: h.APIRunComplianceProbe,
			Doc: &Doc{Summary: "Run the compliance probe now in a sandbox of the tenant (admins); answers once it is done", Tag: "compliance",
				Answers: []Answer{answer(http.StatusCreated, "The probe run", api.ProbeRun{})}, Errors: map[int]string{503: "No sandbox could be started for the probe"}}},
		{Method: get, Path: "/api/v1/compliance/probes", Perm: tenants.PermComplianceRead, API: true, Handler: h.APIComplianceProbes,
			Doc: &Doc{Summary: "The tenant's recent probe runs, newest first, without their output", Tag: "compliance", Answers: ok("The list", api.ProbeRunList{})}},
		{Method: get, Path: "/api/v1/compliance/probes/:id", Perm: tenants.PermComplianceRead, API: true, Handler: h.APIComplianceProbe,
			Doc: &Doc{Summary: "One probe run with its checks and output", Tag: "compliance", Answers: ok("The probe run", api.ProbeRun{})}},
		// Workflows (YAML definitions, JSON accepted too), their settings, and
		// runs. GitHub deliveries arrive on web.GitHubHookPath, outside this
		// table: they authenticate by signature, not session or token.
		// The MCP endpoint (MCPPath, web/mcp.go) is outside it too: a
		// protocol endpoint that takes an API token only (no session, so no
		// CSRF), whose tools each need their REST twin's permission here
		// (handlers/mcp's tool table; its tests check roles and tenants).
		// The E2B surface (web/e2b.go: E2BPrefix and envd's root paths) is
		// outside it as well, and outside our OpenAPI: it follows E2B's own
		// API (handlers/e2b checks each route's permission as here).
		// Recipe template builds (handlers/template_builds.go).
		{Method: get, Path: handlers.TemplateBuildPage, Perm: tenants.PermSandboxesWrite, Handler: h.TemplateBuildForm},
		{Method: post, Path: handlers.TemplateBuildPage, Perm: tenants.PermSandboxesWrite, Handler: h.BuildTemplate},
		{Method: get, Path: "/templates/:name/builds/:id", Perm: tenants.PermSandboxesRead, Handler: h.TemplateBuildShow},
		{Method: post, Path: "/api/v1/templates", Perm: tenants.PermSandboxesWrite, API: true, Handler: h.APIBuildTemplate,
			Doc: &Doc{Summary: "Build a tenant template from a recipe (YAML or JSON: base, packages, files, setup commands, env, user, workdir); every field is checked, each package against apt's index, before anything is written", Tag: "templates",
				Body: &Body{Content: []Content{
					{Media: api.MediaYAML, Schema: textSchema("the recipe (apiVersion stockade.dev/template/v1)", "")},
					{Media: echo.MIMEApplicationJSON, Schema: &openapi3.Schema{Type: types(openapi3.TypeObject)}}}},
				Answers: []Answer{answer(http.StatusAccepted, "The build, running; Location is its log", api.TemplateBuild{}),
					answer(http.StatusOK, "The same recipe was built before and its version is ready: that build (reused)", api.TemplateBuild{})},
				Errors: map[int]string{409: "The name is a built-in's or another source's template, or two builds run already",
					422: "A bad field, an unknown base or package; the problem names every failing field", 429: "The template storage quota"}}},
		{Method: get, Path: "/api/v1/templates/:name/builds", Perm: tenants.PermSandboxesRead, API: true, Handler: h.APITemplateBuilds,
			Doc: &Doc{Summary: "A template's recipe builds, newest first", Tag: "templates", Params: api.TemplateBuildsParams{},
				Answers: ok("The list", api.TemplateBuildList{}), Errors: map[int]string{404: "The caller's tenant never built a template of that name"}}},
		{Method: get, Path: "/api/v1/templates/:name/builds/:id", Perm: tenants.PermSandboxesRead, API: true, Handler: h.APITemplateBuild,
			Doc: &Doc{Summary: "One build: its state, step and error", Tag: "templates", Params: api.TemplateBuildParams{},
				Answers: ok("The build", api.TemplateBuild{}), Errors: map[int]string{404: "No such build of the caller's template"}}},
		{Method: get, Path: "/api/v1/templates/:name/builds/:id/log", Perm: tenants.PermSandboxesRead, API: true, Handler: h.APITemplateBuildLog,
			Doc: &Doc{Summary: "A build's log as text (at most 1 MiB kept); with follow=1 streamed until the build ends", Tag: "templates", Params: api.TemplateBuildLogQuery{},
				Answers: []Answer{{Status: http.StatusOK, Desc: "The log; with follow=1 and Accept: text/event-stream, events reset, log (text to append), step and end (TemplateBuild's state, step, error)",
					Content: []Content{{Media: api.MediaText, Schema: textSchema("the build log", api.MediaText)},
						{Media: api.MediaEventStream, Schema: textSchema("Server-Sent Events", api.MediaEventStream)}}}},
				Errors: map[int]string{404: "No such build of the caller's template"}}},
		{Method: get, Path: "/api/v1/workflows", Perm: tenants.PermWorkflowsRead, API: true, Handler: h.APIWorkflows,
			Doc: &Doc{Summary: "List the tenant's workflows (the newest version of each)", Tag: "workflows", Answers: ok("The list", api.WorkflowList{})}},
		{Method: get, Path: "/api/v1/workflows/:name", Perm: tenants.PermWorkflowsRead, API: true, Handler: h.APIWorkflow,
			Doc: &Doc{Summary: "The current version of a workflow, with its YAML source", Tag: "workflows", Params: api.WorkflowParams{},
				Answers: ok("The workflow", api.Workflow{}), Errors: map[int]string{404: "No such workflow in the caller's tenant"}}},
		{Method: put, Path: "/api/v1/workflows/:name", Perm: tenants.PermWorkflowsWrite, API: true, Handler: h.APIPutWorkflow,
			Doc: &Doc{Summary: "Save a new version of a workflow from its YAML (JSON is accepted too); a document failing the schema gets 422 naming every failing field and its line, and nothing is saved", Tag: "workflows",
				Params: api.PutWorkflowParams{}, Body: &Body{Content: []Content{
					{Media: api.MediaYAML, Schema: textSchema("the workflow (its JSON Schema: Workflow.definition)", "")},
					{Media: echo.MIMEApplicationJSON, Schema: &openapi3.Schema{Type: types(openapi3.TypeObject)}}}},
				Answers: ok("The new version", api.Workflow{}), Errors: map[int]string{409: "base_version is not the current version"}}},
		{Method: del, Path: "/api/v1/workflows/:name", Perm: tenants.PermWorkflowsWrite, API: true, Handler: h.APIDeleteWorkflow,
			Doc: &Doc{Summary: "Delete a workflow (its versions and runs stay)", Tag: "workflows", Params: api.WorkflowParams{}, Answers: done,
				Errors: map[int]string{404: "No such workflow in the caller's tenant"}}},
		{Method: post, Path: "/api/v1/workflows/:name/runs", Perm: tenants.PermRunsWrite, API: true, Handler: h.Idempotent(handlers.IdemRun, h.APIStartRun),
			Doc: &Doc{Summary: "Start a run by hand (the workflow needs a manual trigger); its sandbox is destroyed when it ends", Tag: "runs",
				Params: struct {
					api.WorkflowParams
					api.IdempotencyParams
				}{}, Body: &Body{Optional: true, Content: []Content{{Media: echo.MIMEApplicationJSON, Type: api.StartRun{}}}},
				Answers: []Answer{answer(http.StatusCreated, "The queued run", api.Run{})}, Errors: map[int]string{404: "No such workflow in the caller's tenant"}}},
		{Method: get, Path: "/api/v1/workflow-settings", Perm: tenants.PermWorkflowsRead, API: true, Handler: h.APIWorkflowSettings,
			Doc: &Doc{Summary: "The tenant's workflow settings", Tag: "workflows", Answers: ok("The settings", api.WorkflowSettings{})}},
		{Method: put, Path: "/api/v1/workflow-settings", Perm: tenants.PermWorkflowsWrite, API: true, Handler: h.APIPutWorkflowSettings,
			Doc: &Doc{Summary: "Name the tenant secret (scoped to github.com) that signs GitHub deliveries to /hooks/github/{tenant}; empty turns them off", Tag: "workflows",
				Body: jsonIn(api.SetWorkflowSettings{}), Answers: ok("The settings", api.WorkflowSettings{})}},
		{Method: get, Path: "/api/v1/runs", Perm: tenants.PermWorkflowsRead, API: true, Handler: h.APIRuns,
			Doc: &Doc{Summary: "List the tenant's runs, newest first", Tag: "runs", Params: api.RunQuery{}, Answers: ok("The list", api.RunList{})}},
		{Method: get, Path: "/api/v1/runs/:id", Perm: tenants.PermWorkflowsRead, API: true, Handler: h.APIRun,
			Doc: &Doc{Summary: "One run with its steps (exit codes, durations, bounded output) and artifacts", Tag: "runs", Answers: ok("The run", api.Run{})}},
		{Method: get, Path: "/api/v1/runs/:id/log", Perm: tenants.PermWorkflowsRead, API: true, Handler: h.APIRunLog,
			Doc: &Doc{Summary: "The run's log as text: live while it executes here (header X-Stockade-Log: live), else its steps' stored output (stored)", Tag: "runs",
				Params: api.RunLogQuery{}, Answers: []Answer{{Status: http.StatusOK, Desc: "The log", Content: []Content{{Media: api.MediaText, Schema: textSchema("", "")}}}}}},
		{Method: post, Path: "/api/v1/runs/:id/cancel", Perm: tenants.PermRunsWrite, API: true, Handler: h.APICancelRun,
			Doc: &Doc{Summary: "Cancel a queued or running run; its sandbox is destroyed", Tag: "runs", Answers: ok("The cancelled run", api.Run{}),
				Errors: map[int]string{409: "The run has already ended"}}},
		{Method: post, Path: "/api/v1/runs/:id/rerun", Perm: tenants.PermRunsWrite, API: true, Handler: h.Idempotent(handlers.IdemRun, h.APIRerun),
			Doc: &Doc{Summary: "Start a new run of the same workflow version and trigger", Tag: "runs", Params: api.IdempotencyParams{},
				Answers: []Answer{answer(http.StatusCreated, "The new run", api.Run{})}}},
	}
	routes = append(routes, portRoutes(h)...)
	routes = append(routes, templateRoutes(h)...)
	return routes
}

// routeOf is the route of the table that c was routed to.
func routeOf(routes []Route, c echo.Context) (Route, bool) {
	for _, r := range routes {
		if r.Path == c.Path() && r.Method == c.Request().Method {
			return r, true
		}
	}
	return Route{}, false
}
