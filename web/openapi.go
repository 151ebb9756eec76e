package web

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// The OpenAPI 3.1 document of the JSON API, built once from the operations
// below. openapi_test.go checks that every API route of the route table is
// documented and that nothing else is.

// obj is a JSON object of the document.
type obj = map[string]any

func ref(name string) obj { return obj{"$ref": "#/components/schemas/" + name} }

func arrayOf(items obj) obj { return obj{"type": "array", "items": items} }

func str(desc string) obj { return obj{"type": "string", "description": desc} }

func integer(desc string) obj { return obj{"type": "integer", "description": desc} }

func boolean(desc string) obj { return obj{"type": "boolean", "description": desc} }

func timeField(desc string) obj {
	return obj{"type": "string", "format": "date-time", "description": desc}
}

func object(required []string, props obj) obj {
	o := obj{"type": "object", "properties": props}
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

func jsonBody(schema obj) obj {
	return obj{"required": true, "content": obj{"application/json": obj{"schema": schema}}}
}

func jsonResponse(desc string, schema obj) obj {
	return obj{"description": desc, "content": obj{"application/json": obj{"schema": schema}}}
}

func problem(desc string) obj {
	return obj{"description": desc, "content": obj{"application/problem+json": obj{"schema": ref("Problem")}}}
}

var idParam = obj{"name": "id", "in": "path", "required": true, "schema": obj{"type": "string"}}

// op is one documented operation.
type op struct {
	method, path string
	summary      string
	tag          string
	public       bool // no authentication
	params       []obj
	body         obj
	responses    obj // success responses; the problem responses are added
}

func (o op) build() obj {
	resp := obj{}
	for k, v := range o.responses {
		resp[k] = v
	}
	resp["default"] = problem("An error, as an RFC 9457 problem document")
	if !o.public {
		resp["401"] = problem("No valid API token or session")
		resp["403"] = problem("The caller's role lacks the permission this operation requires")
	}
	if strings.Contains(o.path, "{id}") {
		resp["404"] = problem("No such object in the caller's tenant (another tenant's objects are not found either)")
	}
	if o.body != nil {
		resp["400"] = problem("The body is not the JSON object expected (the field at fault is named)")
		resp["422"] = problem("A field is invalid (named in errors[].field)")
	}
	out := obj{"summary": o.summary, "tags": []string{o.tag}, "responses": resp,
		"operationId": strings.ToLower(o.method) + strings.NewReplacer("/api/v1/", "_", "/", "_", "{", "", "}", "", "-", "_", ".", "_").Replace(o.path)}
	if o.public {
		out["security"] = []obj{}
	}
	params := o.params
	if strings.Contains(o.path, "{id}") {
		params = append([]obj{idParam}, params...)
	}
	if len(params) > 0 {
		out["parameters"] = params
	}
	if o.body != nil {
		out["requestBody"] = o.body
	}
	return out
}

func query(name, desc string, schema obj) obj {
	return obj{"name": name, "in": "query", "description": desc, "schema": schema}
}

func operations() []op {
	ok := func(desc, schema string) obj { return obj{"200": jsonResponse(desc, ref(schema))} }
	list := func(key, schema string) obj {
		return obj{"200": jsonResponse("The list", object([]string{key}, obj{key: arrayOf(ref(schema))}))}
	}
	noContent := obj{"204": obj{"description": "Done"}}
	status := object([]string{"status"}, obj{"status": str("ok, ready or unavailable"), "error": str("why not ready")})
	return []op{
		{method: "GET", path: "/healthz", summary: "Liveness: the process answers", tag: "health", public: true,
			responses: obj{"200": jsonResponse("Alive", status)}},
		{method: "GET", path: "/readyz", summary: "Readiness: the database and identity provider answer", tag: "health", public: true,
			responses: obj{"200": jsonResponse("Ready", status), "503": jsonResponse("Not ready, and why", status)}},
		{method: "GET", path: "/api/v1/openapi.json", summary: "This document", tag: "meta", public: true,
			responses: obj{"200": jsonResponse("The OpenAPI 3.1 document", obj{"type": "object"})}},
		{method: "GET", path: "/api/v1/me", summary: "Who the caller is: person or token, tenant and role", tag: "identity",
			responses: ok("The caller", "Me")},

		{method: "GET", path: "/api/v1/members", summary: "List the tenant's members and pending invitations", tag: "members",
			responses: list("members", "Member")},
		{method: "POST", path: "/api/v1/members", summary: "Invite a member by email with a role", tag: "members",
			body:      jsonBody(object([]string{"email", "role"}, obj{"email": str("their email"), "role": ref("Role")})),
			responses: obj{"201": jsonResponse("The invitation", ref("Member")), "409": problem("Already a member")}},
		{method: "PATCH", path: "/api/v1/members/{id}", summary: "Change a member's role", tag: "members",
			body: jsonBody(object([]string{"role"}, obj{"role": ref("Role")})), responses: noContent},
		{method: "DELETE", path: "/api/v1/members/{id}", summary: "Remove a member", tag: "members", responses: noContent},

		{method: "GET", path: "/api/v1/tokens", summary: "List the tenant's API tokens (never their secrets)", tag: "tokens",
			responses: list("tokens", "Token")},
		{method: "POST", path: "/api/v1/tokens", summary: "Create an API token; its secret is in this answer only", tag: "tokens",
			body: jsonBody(object([]string{"name", "role"}, obj{"name": str("what it is for"), "role": ref("Role"),
				"ttl": str("lifetime: 24h, 7d, 30d, 90d or 365d; default 30d")})),
			responses: obj{"201": jsonResponse("The token with its secret in token", ref("Token"))}},
		{method: "DELETE", path: "/api/v1/tokens/{id}", summary: "Revoke an API token", tag: "tokens", responses: noContent},

		{method: "GET", path: "/api/v1/secrets", summary: "List the tenant's secrets (never their values; hosts for admins only)", tag: "secrets",
			responses: list("secrets", "Secret")},
		{method: "POST", path: "/api/v1/secrets", summary: "Store a secret, encrypted; its value is never returned by anything", tag: "secrets",
			body: jsonBody(object([]string{"name", "value", "hosts"}, obj{"name": str("the environment variable sandboxes see, A-Z 0-9 _"),
				"value": str("the secret; one line of text"), "hosts": arrayOf(str("api.github.com or *.example.com")),
				"ttl": str("lifetime: 1h, 24h, 7d, 30d (default), 90d or 365d")})),
			responses: obj{"201": jsonResponse("The secret, without its value", ref("Secret")), "409": problem("A live secret has this name")}},
		{method: "DELETE", path: "/api/v1/secrets/{name}", summary: "Revoke a secret: the gateway stops using it at once", tag: "secrets",
			responses: noContent},

		{method: "GET", path: "/api/v1/policy", summary: "The tenant's policy now in force (version 0: the built-in strict defaults)", tag: "policy",
			responses: ok("The current version with its document", "PolicyVersion")},
		{method: "PUT", path: "/api/v1/policy", summary: "Save a new policy version; a document failing the schema gets 422 listing every failing path and nothing is saved", tag: "policy",
			body: jsonBody(ref("PolicyEdit")),
			responses: obj{"200": jsonResponse("The new version, with its changes against the one it replaced", ref("PolicyVersion")),
				"409": problem("base_version is not the current version: another change was saved meanwhile")}},
		{method: "POST", path: "/api/v1/policy/preview", summary: "Check a document and say what saving it would change for running and new sandboxes; nothing is saved", tag: "policy",
			body: jsonBody(ref("PolicyEdit")),
			responses: obj{"200": jsonResponse("The preview", object([]string{"base_version", "changes", "notes"}, obj{
				"base_version": integer("the version it was compared with"), "changes": arrayOf(ref("PolicyChange")), "notes": arrayOf(str("one sentence"))}))}},
		{method: "GET", path: "/api/v1/policy/schema", summary: "The JSON Schema policy documents are checked against", tag: "policy",
			responses: obj{"200": jsonResponse("A JSON Schema (draft 2020-12)", obj{"type": "object"})}},
		{method: "GET", path: "/api/v1/policy/diff", summary: "What changed between two versions", tag: "policy",
			params: []obj{query("from", "default: the version before to", obj{"type": "integer"}), query("to", "default: the current version", obj{"type": "integer"})},
			responses: obj{"200": jsonResponse("The changes", object([]string{"from", "to", "changes"}, obj{
				"from": integer(""), "to": integer(""), "changes": arrayOf(ref("PolicyChange"))})), "404": problem("No such version")}},
		{method: "POST", path: "/api/v1/policy/rollback", summary: "Save an older version's document as the newest version", tag: "policy",
			body:      jsonBody(object([]string{"version"}, obj{"version": integer("the version to copy"), "reason": str("default: roll back to version N")})),
			responses: obj{"200": jsonResponse("The new version", ref("PolicyVersion")), "404": problem("No such version")}},
		{method: "GET", path: "/api/v1/policy/versions", summary: "Every version of the tenant's policy, newest first (documents left out)", tag: "policy",
			responses: list("versions", "PolicyVersion")},
		{method: "GET", path: "/api/v1/policy/versions/{version}", summary: "One version with its document", tag: "policy",
			params:    []obj{{"name": "version", "in": "path", "required": true, "schema": obj{"type": "integer", "minimum": 0}}},
			responses: obj{"200": jsonResponse("The version", ref("PolicyVersion")), "404": problem("No such version in the caller's tenant")}},

		{method: "GET", path: "/api/v1/audit", summary: "Export the tenant's audit log (itself audited)", tag: "audit",
			params: []obj{
				query("format", "jsonl (default), csv or json", obj{"type": "string", "enum": []string{"jsonl", "csv", "json"}}),
				query("type", "one event type, e.g. sandbox.exec", obj{"type": "string"}),
				query("actor", "a user id or email, or a token id or prefix", obj{"type": "string"}),
				query("outcome", "success or failure", obj{"type": "string", "enum": []string{"success", "failure"}}),
				query("since", "RFC 3339 time or date", obj{"type": "string"}),
				query("until", "RFC 3339 time or date", obj{"type": "string"}),
				query("q", "text search", obj{"type": "string"}),
				query("limit", "1 to 1000", obj{"type": "integer"}),
			},
			responses: obj{"200": obj{"description": "The events, oldest first", "content": obj{
				"application/jsonl": obj{"schema": ref("AuditEvent"), "description": "one AuditEvent per line"},
				"application/json":  obj{"schema": arrayOf(ref("AuditEvent"))},
				"text/csv":          obj{"schema": obj{"type": "string"}},
			}}}},

		{method: "GET", path: "/api/v1/vms", summary: "List the tenant's VMs and whether the hypervisor is reachable", tag: "vms",
			responses: obj{"200": jsonResponse("The VMs", object([]string{"vms", "hypervisor"}, obj{"vms": arrayOf(ref("VM")),
				"hypervisor": object([]string{"available"}, obj{"available": boolean("a libvirt host is reachable"), "detail": str("why not")})}))}},
		{method: "POST", path: "/api/v1/vms", summary: "Boot a VM in the tenant's pool (no body, or {}); it boots in the background", tag: "vms",
			responses: obj{"202": jsonResponse("The VM, booting", ref("VM")), "429": problem("Over the pool's max_vms or the tenant quota"),
				"503": problem("No libvirt host reachable, or no guest image")}},
		{method: "GET", path: "/api/v1/vms/{id}", summary: "One VM with live CPU and guest numbers", tag: "vms", responses: ok("The VM", "VM")},
		{method: "DELETE", path: "/api/v1/vms/{id}", summary: "Destroy a VM at once", tag: "vms",
			responses: obj{"200": jsonResponse("The VM, stopped", ref("VM")), "409": problem("Already ended"), "503": problem("Its host is unreachable")}},
		{method: "POST", path: "/api/v1/vms/{id}/stop", summary: "Shut a running VM down through its agent", tag: "vms",
			responses: obj{"202": jsonResponse("The VM, stopping", ref("VM")), "409": problem("Not running")}},
		{method: "POST", path: "/api/v1/vms/{id}/recycle", summary: "Replace a running VM with a fresh one", tag: "vms",
			responses: obj{"202": jsonResponse("The old and the new VM", object(nil, obj{"recycled": ref("VM"), "replacement": ref("VM")})),
				"409": problem("Not running")}},
		{method: "GET", path: "/api/v1/vm-pool", summary: "The tenant's VM pool settings and quota", tag: "vms", responses: ok("The pool", "Pool")},
		{method: "PUT", path: "/api/v1/vm-pool", summary: "Replace the VM pool settings (checked against the quota)", tag: "vms",
			body: jsonBody(object([]string{"vcpus", "memory_mib", "max_vms", "warm_vms", "recycle_after_hours"}, obj{
				"vcpus": integer("per VM, 1-16"), "memory_mib": integer("per VM, 256-65536"), "max_vms": integer("0-100"),
				"warm_vms": integer("kept booted and idle, 0-max_vms"), "recycle_after_hours": integer("0 never")})),
			responses: obj{"200": jsonResponse("The pool", ref("Pool")), "429": problem("The pool grown to max_vms would not fit the quota")}},

		{method: "GET", path: "/api/v1/sandboxes", summary: "List the tenant's sandboxes: active ones, then recently ended", tag: "sandboxes",
			responses: list("sandboxes", "Sandbox")},
		{method: "POST", path: "/api/v1/sandboxes", summary: "Create a sandbox; answers once it runs", tag: "sandboxes",
			body: jsonBody(ref("SandboxCreate")),
			responses: obj{
				"201": jsonResponse("The sandbox, running", ref("Sandbox")),
				"429": problem("Over the tenant quota (errors[].field names it: max_sandboxes, max_vcpus, max_memory_mib) or the pool's max_vms"),
				"503": problem("No VM could take it: hypervisor unreachable, boot failed; a sandbox that was recorded is failed with the reason"),
			}},
		{method: "GET", path: "/api/v1/sandboxes/{id}", summary: "One sandbox with its timeline and, while it runs, its usage", tag: "sandboxes",
			responses: ok("The sandbox", "Sandbox")},
		{method: "DELETE", path: "/api/v1/sandboxes/{id}", summary: "Destroy a sandbox and everything it had", tag: "sandboxes",
			responses: obj{"200": jsonResponse("The sandbox, destroyed", ref("Sandbox")),
				"409": problem("Already ended, or still being created"), "503": problem("Its VM's agent is out of reach; nothing changed")}},
		{method: "POST", path: "/api/v1/sandboxes/{id}/exec", summary: "Run a command in a sandbox", tag: "sandboxes",
			params: []obj{query("stream", "1: answer newline-delimited JSON events (application/x-ndjson) as the command runs, "+
				"instead of one answer at its end. The events, one JSON object per line: "+
				`{"type":"started","exec_id","pid"}; then any number of {"type":"stdout"|"stderr","data"} (or "data_base64" for output that is not UTF-8); `+
				`finally {"type":"exit","exec_id","exit_code","signal","reason","duration_ms"}, or {"type":"error","detail"} if the command could not be followed to its end. `+
				"A command refused before it starts (bad input, sandbox not running) gets a problem document as usual.",
				obj{"type": "string", "enum": []string{"0", "1"}})},
			body: jsonBody(ref("ExecRequest")),
			responses: obj{"200": obj{"description": "How the command ended (or, with stream=1, its events)", "content": obj{
				"application/json":     obj{"schema": ref("ExecResult")},
				"application/x-ndjson": obj{"schema": ref("ExecEvent"), "description": "one ExecEvent per line"},
			}}, "409": problem("The sandbox is not running")}},
		{method: "GET", path: "/api/v1/sandboxes/{id}/files", summary: "Read a file of a sandbox as raw bytes", tag: "sandboxes",
			params: []obj{filePath},
			responses: obj{"200": obj{"description": "The file's bytes", "content": obj{"application/octet-stream": obj{"schema": obj{"type": "string", "contentMediaType": "application/octet-stream"}}}},
				"409": problem("The sandbox is not running"), "413": problem("The file is larger than the server's file limit"),
				"422": problem("The path is empty or climbs with '..'")}},
		{method: "PUT", path: "/api/v1/sandboxes/{id}/files", summary: "Write a file of a sandbox from the raw request body; it appears whole or not at all", tag: "sandboxes",
			params: []obj{filePath, query("mode", "permission bits in octal, default 0644", obj{"type": "string", "pattern": "^[0-7]{1,4}$"})},
			body:   obj{"required": true, "content": obj{"application/octet-stream": obj{"schema": obj{"type": "string", "contentMediaType": "application/octet-stream"}}}},
			responses: obj{"200": jsonResponse("The file written", ref("File")), "409": problem("The sandbox is not running"),
				"413": problem("The body is larger than the server's file limit; nothing was written"), "507": problem("The sandbox's disk is full")}},
		{method: "GET", path: "/api/v1/sandboxes/{id}/terminal", summary: "A terminal in a sandbox, over WebSocket (needs terminals.watch; driving also terminals.drive)", tag: "terminals",
			params: []obj{
				query("session", "join this live session instead of opening a new one", obj{"type": "string"}),
				query("watch", "1: join read-only (managers and auditors may only watch)", obj{"type": "string", "enum": []string{"0", "1"}}),
				query("offset", "resume after this many output bytes (the count received since the hello's offset); default: the current screen", obj{"type": "integer", "minimum": 0}),
				query("cols", "columns of a new terminal, 1-1000; default 80", obj{"type": "integer"}),
				query("rows", "rows of a new terminal, 1-1000; default 24", obj{"type": "integer"}),
				query("cmd", "the command of a new terminal, one argument per parameter; default a login shell", obj{"type": "string"}),
			},
			responses: obj{"101": obj{"description": "WebSocket. Binary frames carry terminal data: output to the client, keystrokes from the driver. " +
				"Text frames carry TerminalControl JSON: first a hello (session, role, offset of the next output byte, size, who drives and watches); " +
				"then resize, role, presence, requested, error and finally end (reason, exit_code) before the server closes. " +
				"Clients send resize (driver), request, take (after request), release and cancel. A client too slow to read is closed with 1013: " +
				"reconnect with ?session=&offset= to resume.", "content": obj{"application/json": obj{"schema": ref("TerminalControl")}}},
				"400": problem("Not a WebSocket handshake"), "409": problem("The sandbox is not running, or the session ended"),
				"503": problem("The sandbox's VM agent is out of reach")}},
		{method: "GET", path: "/api/v1/terminals", summary: "List the tenant's terminal sessions, newest first, with who is on the live ones", tag: "terminals",
			params:    []obj{query("sandbox", "only this sandbox's sessions", obj{"type": "string"})},
			responses: list("terminals", "Terminal")},
		{method: "GET", path: "/api/v1/terminals/{id}", summary: "One terminal session", tag: "terminals", responses: ok("The session", "Terminal")},
		{method: "GET", path: "/api/v1/terminals/{id}/cast", summary: "A session's recording, asciicast v2 (a live session's so far)", tag: "terminals",
			responses: obj{"200": obj{"description": "The recording", "content": obj{"application/x-asciicast": obj{"schema": obj{"type": "string"}}}}}},
		{method: "GET", path: "/api/v1/egress-events", summary: "List the egress gateway's decisions for the tenant's sandboxes, newest first", tag: "egress",
			params: []obj{query("sandbox", "only this sandbox's connections", obj{"type": "string"}),
				query("decision", "only allowed or only denied connections", obj{"type": "string", "enum": []string{"allow", "deny"}}),
				query("limit", "at most this many, 1-500; default 500", obj{"type": "integer", "minimum": 1, "maximum": 500})},
			responses: list("events", "EgressEvent")},

		{method: "GET", path: "/api/v1/hosts", summary: "List the libvirt hosts (platform operators)", tag: "operators", responses: list("hosts", "Host")},
		{method: "GET", path: "/api/v1/tenants", summary: "List the tenants (platform operators)", tag: "operators", responses: list("tenants", "Tenant")},
		{method: "POST", path: "/api/v1/tenants", summary: "Create a tenant, optionally with its first admin (platform operators)", tag: "operators",
			body:      jsonBody(object([]string{"slug"}, obj{"slug": str("3-40 of a-z, 0-9 and -"), "name": str("display name"), "admin_email": str("first admin, invited")})),
			responses: obj{"201": jsonResponse("The tenant", ref("Tenant")), "409": problem("The slug is taken")}},
	}
}

var filePath = obj{"name": "path", "in": "query", "required": true,
	"description": "absolute in the sandbox, or relative to /workspace; '..' is refused", "schema": obj{"type": "string"}}

func schemas() obj {
	return obj{
		"Problem": object([]string{"type", "title", "status"}, obj{
			"type": str("a URI naming the kind of problem"), "title": str("short summary"), "status": integer("the HTTP status"),
			"detail": str("what went wrong"), "instance": str("the request path"), "request_id": str("for the operator's logs"),
			"errors": arrayOf(object([]string{"field", "detail"}, obj{"field": str("the field (or quota) at fault"), "rule": str("the rule broken"), "detail": str("why")})),
		}),
		"Role": obj{"type": "string", "enum": []string{"admin", "manager", "developer", "auditor", "billing"}},
		"Me": object([]string{"kind", "operator"}, obj{"kind": str("user or token"), "operator": boolean("platform operator"),
			"user": obj{"type": "object"}, "token": obj{"type": "object"}, "tenant": obj{"type": []string{"string", "null"}},
			"tenant_name": str(""), "role": obj{"type": []string{"string", "null"}}}),
		"Member": object([]string{"id", "email", "role", "active"}, obj{"id": str(""), "email": str(""), "role": ref("Role"),
			"active": boolean("signed in since the invitation"), "invited_by": str(""), "created_at": timeField("")}),
		"Token": object([]string{"id", "name", "prefix", "role"}, obj{"id": str(""), "name": str(""), "prefix": str("visible start of the secret"),
			"role": ref("Role"), "created_at": timeField(""), "expires_at": timeField(""), "last_used_at": timeField(""), "revoked": boolean(""),
			"token": str("the secret: only in the answer to its creation")}),
		"Secret": object([]string{"name", "state", "created_at"}, obj{"name": str(""), "state": str("active, expired or revoked"),
			"hosts": arrayOf(str("host pattern")), "created_by": str(""), "created_at": timeField(""), "expires_at": timeField(""),
			"revoked_at": timeField("")}),
		"PolicyVersion": object([]string{"version", "author", "reason", "created_at"}, obj{"version": integer("0 is the built-in defaults"),
			"author": object(nil, obj{"id": str(""), "name": str(""), "kind": str("user, token or system")}), "reason": str(""),
			"rolled_back_from": integer("the version a rollback copied"), "created_at": obj{"type": []string{"string", "null"}, "format": "date-time"},
			"policy":  obj{"type": "object", "description": "the document (its JSON Schema: GET /api/v1/policy/schema)"},
			"changes": arrayOf(ref("PolicyChange"))}),
		"PolicyEdit": object([]string{"policy", "reason"}, obj{"policy": obj{"type": "object", "description": "the whole document (GET /api/v1/policy/schema)"},
			"reason": str("why: kept with the version"), "base_version": integer("the version edited; a newer one saved meanwhile is a 409")}),
		"PolicyChange": object([]string{"path", "old", "new"}, obj{"path": str("JSON pointer of the setting"), "old": obj{}, "new": obj{}}),
		"AuditEvent": object([]string{"id", "time", "code", "type"}, obj{"id": str(""), "time": timeField(""), "code": str("stable event code"),
			"type": str("e.g. sandbox.created"), "outcome": str(""), "actor_kind": str(""), "actor_id": str(""), "actor_name": str(""),
			"target_kind": str(""), "target_id": str(""), "details": obj{"type": "object"}}),
		"VM": object([]string{"id", "state"}, obj{"id": str(""), "state": str("booting, running, stopping, stopped, lost or failed"),
			"state_reason": str(""), "progress": obj{"type": "object"}, "host": str("libvirt URI"), "vcpus": integer(""), "memory_mib": integer(""),
			"image_version": str(""), "agent_version": str(""), "agent_connected": boolean(""), "boot_ms": integer(""),
			"cpu_time_ms": integer(""), "cpu_percent": obj{"type": []string{"number", "null"}}, "uptime_seconds": obj{"type": "number"},
			"acquired": boolean("handed out to sandboxes"), "sandboxes_served": integer(""), "guest": obj{"type": "object"},
			"created_at": timeField(""), "started_at": timeField(""), "ended_at": timeField(""), "recycle_after": timeField("")}),
		"Pool": object([]string{"vcpus", "memory_mib", "max_vms", "warm_vms", "recycle_after_hours", "quota"}, obj{
			"vcpus": integer(""), "memory_mib": integer(""), "max_vms": integer(""), "warm_vms": integer(""), "recycle_after_hours": integer(""),
			"updated_at": timeField(""), "quota": object(nil, obj{"max_vms": integer(""), "max_vcpus": integer(""), "max_memory_mib": integer(""), "max_sandboxes": integer("")})}),
		"Host": object([]string{"uri", "health"}, obj{"uri": str(""), "health": str("ok or unavailable"), "reason": str(""),
			"configured": boolean(""), "domain_type": str("kvm or qemu"), "cpus": integer(""), "memory_mib": integer(""),
			"free_memory_mib": integer(""), "vms": integer(""), "allocated_vcpus": integer(""), "allocated_memory_mib": integer(""), "last_seen_at": timeField("")}),
		"Tenant": object([]string{"id", "slug", "name"}, obj{"id": str(""), "slug": str(""), "name": str(""), "members": integer(""), "created_at": timeField("")}),
		"SandboxCreate": object(nil, obj{
			"template":             str("template name (see the sandboxes page); default debian, or the first built"),
			"vcpus":                integer("CPU cap in vCPUs; default 1, at most the tenant's VM size"),
			"memory_mib":           integer("memory limit, disk and workspace included; default 128, at most the VM's memory less what the guest keeps"),
			"timeout_seconds":      integer("wall-clock lifetime; default 3600, at most 604800; destroyed with reason timeout when it passes"),
			"idle_timeout_seconds": integer("stopped (reason idle) after this long without a command or file; 0 none"),
			"env":                  obj{"type": "object", "additionalProperties": obj{"type": "string"}, "description": "added to every command; values are kept in the VM only"},
			"metadata":             obj{"type": "object", "additionalProperties": obj{"type": "string"}, "description": "up to 32 labels of your own"},
		}),
		"Sandbox": object([]string{"id", "state", "template", "vcpus", "memory_mib", "created_at", "expires_at"}, obj{
			"id": str(""), "state": obj{"type": "string", "enum": []string{"creating", "running", "stopped", "failed", "destroyed"}},
			"state_reason": str("why it is in this state: requested, started, timeout, oom, idle, killed, vanished, ..."),
			"template":     str(""), "template_version": str(""), "vcpus": integer(""), "memory_mib": integer(""),
			"timeout_seconds": integer(""), "idle_timeout_seconds": integer(""), "vm_id": str("the VM it runs in"),
			"env_keys": arrayOf(str("")), "metadata": obj{"type": "object", "additionalProperties": obj{"type": "string"}},
			"created_by": str(""), "created_at": timeField(""), "started_at": timeField(""), "expires_at": timeField("when its lifetime ends"),
			"ended_at": timeField(""), "last_active_at": timeField(""), "create_ms": integer("request to running"),
			"guest_ready_ms": integer("the agent's own create time"), "execs": integer("commands run"), "policy_version": integer("the tenant policy version it started under (0: the defaults)"),
			"stats": object(nil, obj{"cpu_usage_ms": integer(""), "memory_current_bytes": integer(""), "memory_peak_bytes": integer(""),
				"memory_max_bytes": integer(""), "oom_kills": integer(""), "pids": integer(""), "pids_max": integer(""),
				"disk_used_bytes": integer(""), "disk_size_bytes": integer(""), "workspace_used_bytes": integer(""), "workspace_size_bytes": integer("")}),
			"events": arrayOf(object([]string{"state", "at"}, obj{"state": str(""), "reason": str(""), "actor": str(""), "at": timeField("")})),
		}),
		"ExecRequest": object([]string{"cmd"}, obj{
			"cmd":             obj{"type": "array", "items": obj{"type": "string"}, "minItems": 1, "description": "program and arguments; no shell unless you run one"},
			"cwd":             str("working directory: absolute, or relative to /workspace (the default)"),
			"env":             obj{"type": "object", "additionalProperties": obj{"type": "string"}},
			"stdin":           str("sent to the command, then closed"),
			"timeout_seconds": integer("kills the command's process group when it passes (reason timeout); default 600"),
		}),
		"ExecResult": object([]string{"exec_id", "exit_code", "reason", "duration_ms", "stdout", "stderr"}, obj{
			"exec_id": str(""), "exit_code": integer("or 128+signal"), "signal": str("e.g. KILL"),
			"reason": str("exited, timeout, oom or killed"), "duration_ms": integer(""),
			"stdout": str("up to 4 MiB; use stream=1 for more or for binary output"), "stderr": str(""),
			"stdout_truncated": boolean(""), "stderr_truncated": boolean(""),
		}),
		"ExecEvent": object([]string{"type"}, obj{
			"type": obj{"type": "string", "enum": []string{"started", "stdout", "stderr", "exit", "error"}},
			"data": str("output as text"), "data_base64": str("output that is not UTF-8"), "exec_id": str(""), "pid": integer(""),
			"exit_code": integer(""), "signal": str(""), "reason": str(""), "duration_ms": integer(""), "detail": str(""),
		}),
		"File": object([]string{"path", "size", "mode"}, obj{"path": str(""), "size": integer("bytes"), "mode": str("octal permission bits")}),
		"Terminal": object([]string{"id", "sandbox_id", "live", "started_at"}, obj{
			"id": str(""), "sandbox_id": str(""), "opened_by": str(""), "command": arrayOf(str("")), "cols": integer(""), "rows": integer(""),
			"started_at": timeField(""), "ended_at": timeField(""), "end_reason": str("e.g. the process exited with code 0, the sandbox was destroyed (requested)"),
			"exit_code": integer(""), "bytes_out": integer("terminal output"), "bytes_in": integer("keystrokes from drivers"),
			"record_input": boolean("keystrokes are recorded too"), "recording_bytes": integer(""),
			"recording_dropped_events": integer("events the recorder had to drop (marked in the recording)"), "watchers_cut": integer("clients cut off for being too slow"),
			"recording_url": str("absent once retention removed the recording"), "live": boolean(""),
			"driver": str("live: who holds control, '' for nobody"), "watchers": arrayOf(str("")), "control_requests": arrayOf(str("who asked for control")),
		}),
		"EgressEvent": object([]string{"id", "sandbox_id", "method", "host", "port", "decision", "rule", "started_at"}, obj{
			"id": str(""), "sandbox_id": str(""), "vm_id": str(""), "method": str("CONNECT, or the plain HTTP method"),
			"host": str("the name the sandbox asked for"), "port": integer(""),
			"decision": obj{"type": "string", "enum": []string{"allow", "deny"}},
			"rule":     str("what decided: e.g. 'allow *.github.com:443', 'default deny', 'blocked: cloud metadata address 169.254.169.254'"),
			"addr":     str("the address the gateway connected to (the one it checked)"), "policy_version": integer("the tenant policy version applied"),
			"intercepted": boolean("the gateway terminated TLS to swap credentials"), "status": integer("the proxy's or upstream's HTTP status"),
			"error": str("why an allowed connection failed"), "bytes_up": integer("bytes the sandbox sent"), "bytes_down": integer("bytes the sandbox received"),
			"started_at": timeField(""), "duration_ms": integer(""),
		}),
		"TerminalControl": object([]string{"type"}, obj{
			"type":    obj{"type": "string", "enum": []string{"hello", "resize", "role", "presence", "requested", "end", "error", "request", "take", "release", "cancel"}},
			"session": str(""), "sandbox": str(""), "role": obj{"type": "string", "enum": []string{"driver", "watcher"}}, "can_drive": boolean(""),
			"offset": integer("hello: offset of the next output byte"), "missed": integer("hello: bytes no longer held between the offset asked and the one given"),
			"cols": integer(""), "rows": integer(""), "driver": str(""), "watchers": arrayOf(str("")), "requests": arrayOf(str("")),
			"by": str("who asked for, or took, control; hello: the client itself as the others see it"), "reason": str("end: why"), "exit_code": integer(""), "message": str("error: why a message was refused"),
		}),
	}
}

// OpenAPIDocument returns the OpenAPI 3.1 document of the API.
func OpenAPIDocument() map[string]any {
	paths := obj{}
	for _, o := range operations() {
		item, _ := paths[o.path].(obj)
		if item == nil {
			item = obj{}
			paths[o.path] = item
		}
		item[strings.ToLower(o.method)] = o.build()
	}
	return obj{
		"openapi": "3.1.0",
		"info": obj{"title": "Stockade API", "version": "1",
			"description": "Run AI agents on untrusted code: each tenant in its own VMs, every task in a sandbox nested inside one. " +
				"Authenticate with an API token (Authorization: Bearer stk_...), made on the API tokens page; a token acts in its tenant with its role. " +
				"Errors are RFC 9457 problem documents. Objects of another tenant are not found (404)."},
		"servers":    []obj{{"url": "/"}},
		"security":   []obj{{"bearer": []string{}}},
		"paths":      paths,
		"components": obj{"schemas": schemas(), "securitySchemes": obj{"bearer": obj{"type": "http", "scheme": "bearer", "description": "an API token"}}},
	}
}

// openAPIHandler serves the document: GET /api/v1/openapi.json.
func openAPIHandler() echo.HandlerFunc {
	b, err := json.MarshalIndent(OpenAPIDocument(), "", "  ")
	if err != nil {
		panic(err) // a literal that cannot marshal is a programming error
	}
	return func(c echo.Context) error {
		c.Response().Header().Set("Cache-Control", "no-cache")
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b)
	}
}
