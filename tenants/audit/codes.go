package audit

import "sort"

// Event types. The code of each type is fixed forever in codes below: add new
// types with new codes, never renumber, never reuse a retired code.
const (
	TypeLogin          = "auth.login"
	TypeLoginFailed    = "auth.login_failed"
	TypeLogout         = "auth.logout"
	TypeTenantSelected = "auth.tenant_selected"
	TypeTokenFailed    = "auth.token_failed"
	TypeAccessDenied   = "auth.access_denied"

	TypeTenantCreated = "tenant.created"
	TypeTenantUpdated = "tenant.updated"

	TypeMemberInvited     = "member.invited"
	TypeMemberActivated   = "member.activated"
	TypeMemberRoleChanged = "member.role_changed"
	TypeMemberRemoved     = "member.removed"

	TypeTokenCreated = "token.created"
	TypeTokenRevoked = "token.revoked"
	// TypeTokenRoleCapped: the token's creator got a lesser role, so the
	// token's role was lowered to it.
	TypeTokenRoleCapped = "token.role_capped"

	TypeAuditExported = "audit.exported"

	TypeUserCreated = "user.created"

	TypeQuotaUpdated = "tenant.quota_updated"

	TypeVMCreated     = "vm.created"
	TypeVMDestroyed   = "vm.destroyed"
	TypeVMRecycled    = "vm.recycled"
	TypeVMLost        = "vm.lost"
	TypeVMPoolUpdated = "vm.pool_updated"
	TypeVMStopped     = "vm.stopped"
	TypeVMFailed      = "vm.failed"

	TypeSandboxCreated     = "sandbox.created"
	TypeSandboxExec        = "sandbox.exec"
	TypeSandboxDestroyed   = "sandbox.destroyed"
	TypeSandboxFailed      = "sandbox.failed"
	TypeSandboxStopped     = "sandbox.stopped"
	TypeSandboxFileWritten = "sandbox.file_written"
	TypeSandboxFileRead    = "sandbox.file_read"
	// File system ops of the native file API (sandbox/fsops.go): details
	// name the path(s), never contents.
	TypeSandboxDirMade     = "sandbox.dir_made"
	TypeSandboxFileRemoved = "sandbox.file_removed"
	TypeSandboxFileMoved   = "sandbox.file_moved"
	TypeSandboxFileChmod   = "sandbox.file_mode_changed"
	TypeSandboxArchiveRead = "sandbox.archive_read"
	// The process API: a process started, a signal sent to one (details:
	// process_id, pid, signal), a running sandbox's lifetime set (details:
	// timeout_seconds, expires_at, previous_expires_at).
	TypeProcessStarted    = "process.started"
	TypeProcessSignaled   = "process.signaled"
	TypeSandboxTimeoutSet = "sandbox.timeout_set"
	// Preview links of a sandbox port (details: link id, port, expiry; never the token).
	TypeSandboxPreviewCreated = "sandbox.preview_created"
	TypeSandboxPreviewRevoked = "sandbox.preview_revoked"

	// Tenant templates (sandbox/templates): a version became ready
	// (details: name, version, seq, source, digest, size), a template was
	// deleted with its versions.
	TypeTemplateCreated = "template.created"
	TypeTemplateDeleted = "template.deleted"
	// An OCI image imported as a template version (sandbox/templates/oci;
	// details: name, version, source, source_ref, digest, size), or refused
	// (details: name, source, reason; never a credential).
	TypeTemplateImported     = "template.imported"
	TypeTemplateImportFailed = "template.import_failed"
	// Pause and resume (sandbox/pause.go); details name the actor's reason
	// when the system re-applied a recorded state.
	TypeSandboxPaused  = "sandbox.paused"
	TypeSandboxResumed = "sandbox.resumed"

	// A create served by a pre-started sandbox of its VM (sandbox/prestart.go),
	// written as it starts running; details: vm, claim_ms.
	TypeSandboxPrestartClaimed = "sandbox.prestart_claimed"

	TypeTerminalOpened       = "terminal.opened"
	TypeTerminalJoined       = "terminal.joined"
	TypeTerminalControlTaken = "terminal.control_taken"
	TypeTerminalClosed       = "terminal.closed"

	TypePolicyUpdated    = "policy.updated"
	TypePolicyRolledBack = "policy.rolled_back"

	// Secrets: details name the secret and its hosts, never its value.
	TypeSecretCreated   = "secret.created"
	TypeSecretRevoked   = "secret.revoked"
	TypeTenantCACreated = "secret.ca_created"
	// A secret's injection locations changed (details: from, to).
	TypeSecretUpdated = "secret.updated"

	// Usage and billing: an export (details: period, format, rows) and a
	// new price book version.
	TypeUsageExported = "usage.exported"
	TypePriceSet      = "usage.price_set"

	// Incident response: an operator froze or unfroze the tenant.
	TypeTenantFrozen   = "tenant.frozen"
	TypeTenantUnfrozen = "tenant.unfrozen"

	// Egress denials, at most one per sandbox and host a minute; details
	// count the ones folded in ("suppressed").
	TypeEgressDenied = "egress.denied"
	// A response carried a real secret value back towards a sandbox; the
	// gateway rewrote it to the placeholder. At most one per sandbox and
	// host a minute; details count the values rewritten and the events
	// folded in, and name the secrets (never their values).
	TypeEgressSecretReflected = "egress.secret_reflected"

	// Retention: events older than the policy's audit.retention_days were
	// deleted; details give the cutoff and the count.
	TypeAuditPruned = "audit.pruned"

	TypeComplianceExported = "compliance.exported"

	// Compliance: a probe run ended (details: the outcome of each check),
	// and a checklist item changed status (details: item, from, to).
	TypeComplianceProbeRun      = "compliance.probe_run"
	TypeComplianceStatusChanged = "compliance.status_changed"

	// Workflows: a definition saved or deleted (details: name, version),
	// the tenant's workflow settings changed (secret names only), a run
	// started by hand or re-run, a run cancelled.
	TypeWorkflowSaved           = "workflow.saved"
	TypeWorkflowDeleted         = "workflow.deleted"
	TypeWorkflowSettingsUpdated = "workflow.settings_updated"
	TypeWorkflowRunCreated      = "workflow.run_created"
	TypeWorkflowRunCancelled    = "workflow.run_cancelled"

	// Integrations: an outgoing webhook endpoint created, enabled or
	// disabled, deleted, or sent a test event (details: url, secret name,
	// event types; never the secret).
	TypeWebhookCreated = "integration.webhook_created"
	TypeWebhookUpdated = "integration.webhook_updated"
	TypeWebhookDeleted = "integration.webhook_deleted"
	TypeWebhookTested  = "integration.webhook_tested"

	// MCP: a tool called at /mcp (details: tool, sandbox_id, and error,
	// the kind of a refusal; never arguments or file contents). What the
	// tool did is audited as well, as its REST twin's (sandbox.exec, ...).
	TypeMCPToolCall = "mcp.tool_call"

	// Recipe template builds (details: template, build_id, recipe_digest;
	// failed adds error).
	TypeTemplateBuildStarted   = "template.build.started"
	TypeTemplateBuildSucceeded = "template.build.succeeded"
	TypeTemplateBuildFailed    = "template.build.failed"
	// Volumes (sandbox/volumes): created, resized, deleted (details: name,
	// size_gib), attached to or detached from a VM (details: name, vm,
	// read_only).
	TypeVolumeCreated  = "volume.created"
	TypeVolumeResized  = "volume.resized"
	TypeVolumeDeleted  = "volume.deleted"
	TypeVolumeAttached = "volume.attached"
	TypeVolumeDetached = "volume.detached"
	// Libvirt hosts (platform-level: tenant ""), and a tenant's host
	// constraint (its own tenant).
	TypeHostAdded         = "host.added"
	TypeHostCordoned      = "host.cordoned"
	TypeHostUncordoned    = "host.uncordoned"
	TypeHostDrained       = "host.drained"
	TypeHostDown          = "host.down"
	TypeHostUp            = "host.up"
	TypeHostRemoved       = "host.removed"
	TypeHostConstraintSet = "host.constraint_set"
)

// codes maps each event type to its stable code, teleport style:
// S + area letter + 4 digits + severity (I info, W warning, E error).
// Never mutated; read through Code and Types.
var codes = map[string]string{
	TypeLogin:          "SA1000I",
	TypeLoginFailed:    "SA1001W",
	TypeLogout:         "SA1002I",
	TypeTenantSelected: "SA1003I",
	TypeTokenFailed:    "SA1004W",
	TypeAccessDenied:   "SA1005W",

	TypeTenantCreated: "ST2000I",
	TypeTenantUpdated: "ST2001I",

	TypeMemberInvited:     "SM3000I",
	TypeMemberActivated:   "SM3001I",
	TypeMemberRoleChanged: "SM3002I",
	TypeMemberRemoved:     "SM3003I",

	TypeTokenCreated:    "SK4000I",
	TypeTokenRevoked:    "SK4001I",
	TypeTokenRoleCapped: "SK4002I",

	TypeAuditExported: "SX5000I",

	TypeUserCreated: "SU6000I",

	TypeQuotaUpdated: "ST2002I",

	TypeVMCreated:     "SV7000I",
	TypeVMDestroyed:   "SV7001I",
	TypeVMRecycled:    "SV7002I",
	TypeVMLost:        "SV7003W",
	TypeVMPoolUpdated: "SV7004I",
	TypeVMStopped:     "SV7005I",
	TypeVMFailed:      "SV7006E",

	TypeSandboxCreated:     "SS8000I",
	TypeSandboxExec:        "SS8001I",
	TypeSandboxDestroyed:   "SS8002I",
	TypeSandboxFailed:      "SS8003E",
	TypeSandboxStopped:     "SS8004W",
	TypeSandboxFileWritten: "SS8005I",
	TypeSandboxFileRead:    "SS8006I",
	TypeSandboxDirMade:     "SS8040I",
	TypeSandboxFileRemoved: "SS8041I",
	TypeSandboxFileMoved:   "SS8042I",
	TypeSandboxFileChmod:   "SS8043I",
	TypeSandboxArchiveRead: "SS8044I",
	TypeProcessStarted:     "SS8020I",
	TypeProcessSignaled:    "SS8021I",
	TypeSandboxTimeoutSet:  "SS8022I",

	TypeSandboxPreviewCreated: "SS8100I",
	TypeSandboxPreviewRevoked: "SS8101I",
	TypeSandboxPaused:         "SS8060I",
	TypeSandboxResumed:        "SS8061I",

	TypeSandboxPrestartClaimed: "SS8070I",

	TypeVolumeCreated:  "SL1000I",
	TypeVolumeResized:  "SL1001I",
	TypeVolumeDeleted:  "SL1002I",
	TypeVolumeAttached: "SL1003I",
	TypeVolumeDetached: "SL1004I",

	TypeTerminalOpened:       "SP9000I",
	TypeTerminalJoined:       "SP9001I",
	TypeTerminalControlTaken: "SP9002I",
	TypeTerminalClosed:       "SP9003I",

	TypePolicyUpdated:    "SY1100I",
	TypePolicyRolledBack: "SY1101I",

	TypeSecretCreated:   "SC1100I",
	TypeSecretRevoked:   "SC1101I",
	TypeTenantCACreated: "SC1102I",
	TypeSecretUpdated:   "SC1103I",

	TypeUsageExported: "SB1300I",
	TypePriceSet:      "SB1301I",

	TypeTenantFrozen:   "ST2003W",
	TypeTenantUnfrozen: "ST2004I",

	TypeEgressDenied:          "SE1200W",
	TypeEgressSecretReflected: "SE1201W",

	TypeAuditPruned: "SX5001I",

	TypeComplianceExported: "SX5002I",

	TypeComplianceProbeRun:      "SQ1400I",
	TypeComplianceStatusChanged: "SQ1401W",

	TypeWorkflowSaved:           "SW1500I",
	TypeWorkflowDeleted:         "SW1501I",
	TypeWorkflowSettingsUpdated: "SW1502I",
	TypeWorkflowRunCreated:      "SW1503I",
	TypeWorkflowRunCancelled:    "SW1504I",

	TypeWebhookCreated: "SI1600I",
	TypeWebhookUpdated: "SI1601I",
	TypeWebhookDeleted: "SI1602I",
	TypeWebhookTested:  "SI1603I",

	TypeMCPToolCall: "SG1700I",

	TypeTemplateCreated: "SL1800I",
	TypeTemplateDeleted: "SL1801I",

	TypeTemplateBuildStarted:   "SL1810I",
	TypeTemplateBuildSucceeded: "SL1811I",
	TypeTemplateBuildFailed:    "SL1812E",
	TypeTemplateImported:       "SL1820I",
	TypeTemplateImportFailed:   "SL1821W",
	TypeHostAdded:              "SH1800I",
	TypeHostCordoned:           "SH1801I",
	TypeHostUncordoned:         "SH1802I",
	TypeHostDrained:            "SH1803I",
	TypeHostDown:               "SH1804W",
	TypeHostUp:                 "SH1805I",
	TypeHostRemoved:            "SH1806I",
	TypeHostConstraintSet:      "SH1807I",
}

// Code returns the stable code of an event type.
func Code(eventType string) (string, bool) {
	c, ok := codes[eventType]
	return c, ok
}

// Types lists every known event type, sorted (for filter menus).
func Types() []string {
	out := make([]string, 0, len(codes))
	for t := range codes {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}
