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

// idemParam makes a create idempotent (handlers.Idempotent).
var idemParam = obj{"name": "Idempotency-Key", "in": "header", "schema": obj{"type": "string", "maxLength": 255},
	"description": "a retry with the same key within 24 h answers the first result (Idempotent-Replayed: true) and creates nothing; " +
		"the same key with another request is a 422, one still running a 409"}

var nameParam = obj{"name": "name", "in": "path", "required": true, "schema": obj{"type": "string"}}

// injectField is where a secret may be injected (tenants/secrets.NormalizeInject).
var injectField = arrayOf(str("authorization (the default), header:<Name>, query, path or body; " +
	"query, path and body are opt-in: an upstream may echo or store what it gets there"))

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
		{method: "POST", path: "/api/v1/tokens", summary: "Create an API token; its secret is in this answer only (and in replays of it, sealed at rest)", tag: "tokens",
			params: []obj{idemParam},
			body: jsonBody(object([]string{"name", "role"}, obj{"name": str("what it is for"), "role": ref("Role"),
				"ttl": str("lifetime: 24h, 7d, 30d, 90d or 365d; default 30d")})),
			responses: obj{"201": jsonResponse("The token with its secret in token", ref("Token"))}},
		{method: "DELETE", path: "/api/v1/tokens/{id}", summary: "Revoke an API token", tag: "tokens", responses: noContent},

		{method: "GET", path: "/api/v1/secrets", summary: "List the tenant's secrets (never their values; hosts for admins only)", tag: "secrets",
			responses: list("secrets", "Secret")},
		{method: "POST", path: "/api/v1/secrets", summary: "Store a secret, encrypted; its value is never returned by anything", tag: "secrets",
			body: jsonBody(object([]string{"name", "value", "hosts"}, obj{"name": str("the environment variable sandboxes see, A-Z 0-9 _"),
				"value": str("the secret; one line of text"), "hosts": arrayOf(str("api.github.com or *.example.com")),
				"inject": injectField, "ttl": str("lifetime: 1h, 24h, 7d, 30d (default), 90d or 365d")})),
			responses: obj{"201": jsonResponse("The secret, without its value", ref("Secret")), "409": problem("A live secret has this name")}},
		{method: "PATCH", path: "/api/v1/secrets/{name}", summary: "Change where a live secret may be injected into requests to its hosts", tag: "secrets",
			params: []obj{nameParam}, body: jsonBody(object([]string{"inject"}, obj{"inject": injectField})),
			responses: obj{"200": jsonResponse("The secret, without its value", ref("Secret"))}},
		{method: "DELETE", path: "/api/v1/secrets/{name}", summary: "Revoke a secret: the gateway stops using it at once", tag: "secrets",
			params: []obj{nameParam}, responses: noContent},

		{method: "GET", path: "/api/v1/integrations/webhooks", summary: "List the tenant's outgoing webhook endpoints (secret names, never values)", tag: "integrations",
			responses: list("webhooks", "WebhookEndpoint")},
		{method: "POST", path: "/api/v1/integrations/webhooks", summary: "Add an outgoing webhook endpoint, signed per Standard Webhooks with a tenant secret's whsec_ key", tag: "integrations",
			body: jsonBody(object([]string{"url", "secret_name"}, obj{"url": str("https; private and loopback addresses are refused"),
				"secret_name": str("the tenant secret holding the whsec_ key, scoped to the URL's host"),
				"event_types": arrayOf(obj{"type": "string", "enum": []string{"sandbox.created", "sandbox.destroyed", "run.completed"}}),
				"description": str("at most 200 characters")})),
			responses: obj{"201": jsonResponse("The endpoint", ref("WebhookEndpoint")), "409": problem("The tenant has as many endpoints as allowed")}},
		{method: "PATCH", path: "/api/v1/integrations/webhooks/{id}", summary: "Enable or disable an endpoint: a disabled one gets no new events", tag: "integrations",
			body:      jsonBody(object([]string{"enabled"}, obj{"enabled": boolean("")})),
			responses: obj{"200": jsonResponse("The endpoint", ref("WebhookEndpoint"))}},
		{method: "DELETE", path: "/api/v1/integrations/webhooks/{id}", summary: "Delete an endpoint; its deliveries stay in the log", tag: "integrations",
			responses: noContent},
		{method: "POST", path: "/api/v1/integrations/webhooks/{id}/test", summary: "Queue a webhook.test event for the endpoint (even a disabled one)", tag: "integrations",
			responses: obj{"202": jsonResponse("Its delivery, pending", ref("WebhookDelivery"))}},
		{method: "GET", path: "/api/v1/integrations/deliveries", summary: "The tenant's recent webhook deliveries, newest first", tag: "integrations",
			params: []obj{{"name": "endpoint_id", "in": "query", "schema": obj{"type": "string"}, "description": "one endpoint only"},
				{"name": "limit", "in": "query", "schema": obj{"type": "integer", "minimum": 1, "maximum": 500}, "description": "default 100"}},
			responses: list("deliveries", "WebhookDelivery")},

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
				query("outcome", "success, failure or denied", obj{"type": "string", "enum": []string{"success", "failure", "denied"}}),
				query("since", "RFC 3339 time or date", obj{"type": "string"}),
				query("until", "RFC 3339 time or date", obj{"type": "string"}),
				query("q", "text search", obj{"type": "string"}),
				query("limit", "1 to 1000", obj{"type": "integer"}),
			},
			responses: obj{"200": obj{"description": "The events, oldest first: JSON Lines (one AuditEvent per line), a JSON array, or CSV", "content": obj{
				"application/jsonl": obj{"schema": ref("AuditEvent")},
				"application/json":  obj{"schema": arrayOf(ref("AuditEvent"))},
				"text/csv":          obj{"schema": obj{"type": "string"}},
			}}}},

		{method: "GET", path: "/api/v1/vms", summary: "List the tenant's VMs and whether the hypervisor is reachable", tag: "vms",
			responses: obj{"200": jsonResponse("The VMs", object([]string{"vms", "hypervisor"}, obj{"vms": arrayOf(ref("VM")),
				"hypervisor": object([]string{"available"}, obj{"available": boolean("a libvirt host is reachable"), "detail": str("why not")})}))}},
		{method: "POST", path: "/api/v1/vms", summary: "Boot a VM in the tenant's pool (no body, or {}); it boots in the background", tag: "vms",
			params: []obj{idemParam},
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
			params:    []obj{query("idempotency_key", "only the sandboxes made by creates with this Idempotency-Key", obj{"type": "string"})},
			responses: list("sandboxes", "Sandbox")},
		{method: "POST", path: "/api/v1/sandboxes", summary: "Create a sandbox; answers once it runs", tag: "sandboxes",
			params: []obj{idemParam},
			body:   jsonBody(ref("SandboxCreate")),
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
				`finally {"type":"exit","exec_id","exit_code","signal","reason","duration_ms"}, or {"type":"error","reason","detail","offset"} if the command could not be followed to its end `+
				`(reason "lost": its VM's agent session went and did not come back within the exec grace; "timeout": the client stopped reading for longer than the stream write timeout, and the command was killed). `+
				"A command outlives a server restart: resume it with GET /api/v1/sandboxes/{id}/execs/{exec_id}/stream?offset=. "+
				"A command refused before it starts (bad input, sandbox not running) gets a problem document as usual.",
				obj{"type": "string", "enum": []string{"0", "1"}})},
			body: jsonBody(ref("ExecRequest")),
			responses: obj{"200": obj{"description": "How the command ended (or, with stream=1, its events: one ExecEvent per line)", "content": obj{
				"application/json":     obj{"schema": ref("ExecResult")},
				"application/x-ndjson": obj{"schema": ref("ExecEvent")},
			}}, "409": problem("The sandbox is not running")}},
		{method: "GET", path: "/api/v1/sandboxes/{id}/execs/{exec_id}/stream", summary: "Resume a streamed command that outlived its server (a restart)", tag: "sandboxes",
			params: []obj{{"name": "exec_id", "in": "path", "required": true, "description": "the exec_id of the started event", "schema": obj{"type": "string"}},
				query("offset", "output bytes (stdout and stderr together, decoded) the client has; default 0: what the agent still buffers (up to 1 MiB)", obj{"type": "integer", "minimum": 0})},
			responses: obj{"200": obj{"description": `The events of stream=1 from the offset on, one ExecEvent per line; the started event's "offset" is where the output really starts (past the asked one when the agent's buffer dropped bytes)`,
				"content": obj{"application/x-ndjson": obj{"schema": ref("ExecEvent")}}},
				"404": problem("No such command, or its process is gone (its record says lost)"),
				"409": problem("The command ended (its record has how), this server streams it already, or the sandbox is not running")}},
		{method: "GET", path: "/api/v1/sandboxes/{id}/files", summary: "Read a file of a sandbox as raw bytes", tag: "sandboxes",
			params: []obj{filePath},
			responses: obj{"200": obj{"description": "The file's bytes", "content": obj{"application/octet-stream": obj{"schema": obj{"type": "string", "contentMediaType": "application/octet-stream"}}}},
				"403": problem("The sandbox user may not read the file"),
				"409": problem("The sandbox is not running"), "413": problem("The file is larger than the per-file limit (STOCKADE_MAX_FILE_BYTES, or the tenant policy's filesystem.max_file_bytes); the problem names it"),
				"422": problem("The path is empty or climbs with '..'")}},
		{method: "PUT", path: "/api/v1/sandboxes/{id}/files", summary: "Write a file of a sandbox from the raw request body; it appears whole or not at all", tag: "sandboxes",
			params: []obj{filePath, query("mode", "permission bits in octal, default 0644", obj{"type": "string", "pattern": "^[0-7]{1,4}$"})},
			body:   obj{"required": true, "content": obj{"application/octet-stream": obj{"schema": obj{"type": "string", "contentMediaType": "application/octet-stream"}}}},
			responses: obj{"200": jsonResponse("The file written", ref("File")), "403": problem("The sandbox user may not write there; nothing was written"),
				"409": problem("The sandbox is not running"),
				"413": problem("The body is larger than the per-file limit (STOCKADE_MAX_FILE_BYTES, or the tenant policy's filesystem.max_file_bytes), which the problem names; nothing was written"),
				"507": problem("The sandbox's disk is full")}},
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
		{method: "GET", path: "/api/v1/usage", summary: "Export the tenant's usage for a period as FOCUS rows, streamed (itself audited as usage.exported)", tag: "usage",
			params: []obj{
				query("from", "start: RFC 3339 time or date (UTC midnight); default the first day of this month", obj{"type": "string"}),
				query("to", "end: RFC 3339 time (exclusive) or date (inclusive of that whole day); default the end of from's month", obj{"type": "string"}),
				query("format", "csv (default) or json", obj{"type": "string", "enum": []string{"csv", "json"}}),
			},
			responses: obj{"200": obj{"description": "One row per sandbox, ledger hour and meter (vcpu-allocated, memory-allocated, cpu-measured, egress), in hour order; Content-Disposition names a file", "content": obj{
				"text/csv":         obj{"schema": obj{"type": "string", "description": "a header row with the FOCUS columns of UsageExportRow, in that order, then the rows"}},
				"application/json": obj{"schema": arrayOf(ref("UsageExportRow"))},
			}}, "400": problem("from, to or format is malformed (the field is named)")}},
		{method: "GET", path: "/api/v1/usage/summary", summary: "The tenant's usage for a period (default this month): totals, each UTC day, and the top 10 sandboxes, users and templates by cost", tag: "usage",
			params: []obj{
				query("from", "start: RFC 3339 time or date; default the first day of this month", obj{"type": "string"}),
				query("to", "end: RFC 3339 time (exclusive) or date (inclusive); at most 366 days after from", obj{"type": "string"}),
			},
			responses: obj{"200": jsonResponse("The summary", ref("UsageSummary")), "400": problem("from or to is malformed (the field is named)")}},
		{method: "GET", path: "/api/v1/quota", summary: "The caller's tenant quota: each limit with what is held now (sandboxes, vCPUs, memory, VMs) or used this month (CPU-hours), warn from 80 %", tag: "usage",
			responses: obj{"200": jsonResponse("The quota lines", object([]string{"tenant", "warn_at", "quotas"}, obj{
				"tenant": str("the tenant's slug"), "warn_at": obj{"type": "number", "description": "the share from which warn is set (0.8)"},
				"quotas": arrayOf(ref("QuotaLine"))}))}},

		{method: "GET", path: "/api/v1/hosts", summary: "List the libvirt hosts (platform operators)", tag: "operators", responses: list("hosts", "Host")},
		{method: "GET", path: "/api/v1/tenants", summary: "List the tenants (platform operators)", tag: "operators", responses: list("tenants", "Tenant")},
		{method: "POST", path: "/api/v1/tenants", summary: "Create a tenant, optionally with its first admin (platform operators)", tag: "operators",
			body:      jsonBody(object([]string{"slug"}, obj{"slug": str("3-40 of a-z, 0-9 and -"), "name": str("display name"), "admin_email": str("first admin, invited")})),
			responses: obj{"201": jsonResponse("The tenant", ref("Tenant")), "409": problem("The slug is taken")}},
		{method: "GET", path: "/api/v1/tenants/{id}/quota", summary: "A tenant's quota (platform operators)", tag: "operators",
			responses: ok("The quota", "TenantQuota")},
		{method: "PUT", path: "/api/v1/tenants/{id}/quota", summary: "Replace a tenant's quota; every limit is required (platform operators, audited tenant.quota_updated)", tag: "operators",
			body: jsonBody(object([]string{"max_vms", "max_vcpus", "max_memory_mib", "max_sandboxes", "max_cpu_hours_monthly"}, obj{
				"max_vms": integer("VMs at once, 0-1000"), "max_vcpus": integer("vCPUs held at once, 0-4096"),
				"max_memory_mib": integer("memory held at once, 0-4194304"), "max_sandboxes": integer("sandboxes running at once, 0-10000"),
				"max_cpu_hours_monthly": integer("CPU-hours measured per UTC calendar month, 0-10000000")})),
			responses: ok("The quota saved", "TenantQuota")},
		{method: "GET", path: "/api/v1/prices", summary: "The platform list price in force with its history, and the price every tenant pays now (platform operators)", tag: "operators",
			responses: obj{"200": jsonResponse("The price book", object([]string{"platform", "platform_history", "tenants"}, obj{
				"platform": ref("PriceVersion"), "platform_history": arrayOf(ref("PriceVersion")),
				"tenants": arrayOf(object([]string{"tenant_id", "slug", "override", "price"}, obj{"tenant_id": str(""), "slug": str(""),
					"override": boolean("the tenant's own version, not the platform's"), "price": ref("PriceVersion")}))}))}},
		{method: "POST", path: "/api/v1/prices", summary: "Add a version to the platform's price book, or with tenant_id to a tenant's override (platform operators, audited usage.price_set)", tag: "operators",
			body: jsonBody(object([]string{"currency", "vcpu_second", "gib_second", "cpu_second", "egress_gb"}, obj{
				"tenant_id": str("a tenant's override; absent: the platform list price"), "currency": str("ISO 4217, e.g. USD"),
				"vcpu_second":    obj{"type": "number", "description": "per vCPU held for a second, 0-1000"},
				"gib_second":     obj{"type": "number", "description": "per GiB of memory held for a second, 0-1000"},
				"cpu_second":     obj{"type": "number", "description": "per CPU-second measured, 0-1000"},
				"egress_gb":      obj{"type": "number", "description": "per 10^9 bytes through the egress gateway, 0-1000"},
				"effective_from": timeField("RFC 3339; default now")})),
			responses: obj{"201": jsonResponse("The version", ref("PriceVersion")), "404": problem("No such tenant")}},
		{method: "GET", path: "/api/v1/operator/usage", summary: "Export every tenant's usage for a period as FOCUS rows, streamed (platform operators; audited usage.exported, scope all)", tag: "operators",
			params: []obj{
				query("from", "start: RFC 3339 time or date (UTC midnight); default the first day of this month", obj{"type": "string"}),
				query("to", "end: RFC 3339 time (exclusive) or date (inclusive of that day); default the end of from's month", obj{"type": "string"}),
				query("format", "csv (default) or json", obj{"type": "string", "enum": []string{"csv", "json"}}),
			},
			responses: obj{"200": obj{"description": "One row per sandbox, ledger hour and meter, every tenant (SubAccountId/SubAccountName name it); Content-Disposition names a file", "content": obj{
				"text/csv":         obj{"schema": obj{"type": "string", "description": "a header row with the FOCUS columns, then the rows"}},
				"application/json": obj{"schema": arrayOf(ref("UsageExportRow"))},
			}}, "400": problem("from, to or format is malformed (the field is named)")}},
		{method: "POST", path: "/api/v1/tenants/{id}/freeze", summary: "Freeze a tenant (incident response, platform operators): destroy its sandboxes, refuse new sandboxes and VMs; recordings and logs stay", tag: "operators",
			body:      jsonBody(object(nil, obj{"reason": str("why, up to 500 characters; audited")})),
			responses: obj{"200": jsonResponse("The freeze", ref("Freeze")), "409": problem("Already frozen")}},
		{method: "POST", path: "/api/v1/tenants/{id}/unfreeze", summary: "Lift a tenant's freeze (platform operators)", tag: "operators",
			responses: obj{"200": jsonResponse("Unfrozen", ref("Freeze")), "409": problem("Not frozen")}},

		{method: "GET", path: "/api/v1/compliance", summary: "The tenant's security checklist: every item with its status, evidence, since and checked_at, and recent status changes", tag: "compliance",
			responses: ok("The checklist", "Compliance")},
		{method: "POST", path: "/api/v1/compliance/probe", summary: "Run the compliance probe now in a sandbox of the tenant (admins); answers once it is done", tag: "compliance",
			responses: obj{"201": jsonResponse("The probe run", ref("ProbeRun")), "503": problem("No sandbox could be started for the probe")}},
		{method: "GET", path: "/api/v1/compliance/probes", summary: "The tenant's recent probe runs, newest first, without their output", tag: "compliance",
			responses: list("probe_runs", "ProbeRun")},
		{method: "GET", path: "/api/v1/compliance/probes/{id}", summary: "One probe run with its checks and output", tag: "compliance",
			responses: ok("The probe run", "ProbeRun")},

		{method: "GET", path: "/api/v1/workflows", summary: "List the tenant's workflows (the newest version of each)", tag: "workflows",
			responses: list("workflows", "Workflow")},
		{method: "GET", path: "/api/v1/workflows/{name}", summary: "The current version of a workflow, with its YAML source", tag: "workflows",
			params: []obj{nameParam}, responses: obj{"200": jsonResponse("The workflow", ref("Workflow")), "404": problem("No such workflow in the caller's tenant")}},
		{method: "PUT", path: "/api/v1/workflows/{name}", summary: "Save a new version of a workflow from its YAML (JSON is accepted too); a document failing the schema gets 422 naming every failing field and its line, and nothing is saved", tag: "workflows",
			params: []obj{nameParam, query("base_version", "the version edited; a newer one saved meanwhile is a 409", obj{"type": "integer"})},
			body: obj{"required": true, "content": obj{
				"application/yaml": obj{"schema": obj{"type": "string", "description": "the workflow (its JSON Schema: Workflow.definition)"}},
				"application/json": obj{"schema": obj{"type": "object"}}}},
			responses: obj{"200": jsonResponse("The new version", ref("Workflow")), "409": problem("base_version is not the current version")}},
		{method: "DELETE", path: "/api/v1/workflows/{name}", summary: "Delete a workflow (its versions and runs stay)", tag: "workflows",
			params: []obj{nameParam}, responses: obj{"204": obj{"description": "Done"}, "404": problem("No such workflow in the caller's tenant")}},
		{method: "POST", path: "/api/v1/workflows/{name}/runs", summary: "Start a run by hand (the workflow needs a manual trigger); its sandbox is destroyed when it ends", tag: "runs",
			params:    []obj{nameParam, idemParam},
			body:      obj{"required": false, "content": obj{"application/json": obj{"schema": object(nil, obj{"ref": str("git ref to run at"), "sha": str("commit id")})}}},
			responses: obj{"201": jsonResponse("The queued run", ref("Run")), "404": problem("No such workflow in the caller's tenant")}},
		{method: "GET", path: "/api/v1/workflow-settings", summary: "The tenant's workflow settings", tag: "workflows",
			responses: ok("The settings", "WorkflowSettings")},
		{method: "PUT", path: "/api/v1/workflow-settings", summary: "Name the tenant secret (scoped to github.com) that signs GitHub deliveries to /hooks/github/{tenant}; empty turns them off", tag: "workflows",
			body:      jsonBody(object([]string{"github_secret_name"}, obj{"github_secret_name": str("a tenant secret name, or empty")})),
			responses: ok("The settings", "WorkflowSettings")},
		{method: "GET", path: "/api/v1/runs", summary: "List the tenant's runs, newest first", tag: "runs",
			params: []obj{query("workflow", "only this workflow's", obj{"type": "string"}),
				query("state", "only runs in this state", obj{"type": "string", "enum": []string{"queued", "running", "succeeded", "failed", "cancelled", "timed_out", "skipped"}}),
				query("before", "page: runs created before this run id", obj{"type": "string"}),
				query("limit", "at most this many (1-200, default 200)", obj{"type": "integer"})},
			responses: list("runs", "Run")},
		{method: "GET", path: "/api/v1/runs/{id}", summary: "One run with its steps (exit codes, durations, bounded output) and artifacts", tag: "runs",
			responses: ok("The run", "Run")},
		{method: "GET", path: "/api/v1/runs/{id}/log", summary: "The run's log as text: live while it executes here (header X-Stockade-Log: live), else its steps' stored output (stored)", tag: "runs",
			params:    []obj{query("follow", "1: stream the live log until the run ends", obj{"type": "string", "enum": []string{"1", "true"}})},
			responses: obj{"200": obj{"description": "The log", "content": obj{"text/plain": obj{"schema": obj{"type": "string"}}}}}},
		{method: "POST", path: "/api/v1/runs/{id}/cancel", summary: "Cancel a queued or running run; its sandbox is destroyed", tag: "runs",
			responses: obj{"200": jsonResponse("The cancelled run", ref("Run")), "409": problem("The run has already ended")}},
		{method: "POST", path: "/api/v1/runs/{id}/rerun", summary: "Start a new run of the same workflow version and trigger", tag: "runs",
			params:    []obj{idemParam},
			responses: obj{"201": jsonResponse("The new run", ref("Run"))}},
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
		"UsageTotals": object([]string{"cost", "currency"}, obj{
			"cost": obj{"type": "number", "description": "priced by the price book in force at each hour; an exact decimal, the sum of the export's BilledCost"}, "currency": str("ISO 4217"),
			"vcpu_seconds": obj{"type": "number", "description": "vCPUs held x seconds"}, "gib_seconds": obj{"type": "number", "description": "GiB of memory held x seconds"},
			"cpu_seconds": obj{"type": "number", "description": "CPU time the sandboxes' cgroups measured"}, "wall_seconds": obj{"type": "number", "description": "how long sandboxes held their allocation"},
			"egress_bytes": integer("through the egress gateway, both directions"), "egress_up_bytes": integer(""), "egress_down_bytes": integer(""),
			"memory_peak_bytes": integer("the highest a sandbox reached"),
		}),
		"UsageSummary": object([]string{"tenant", "from", "to", "totals", "sandboxes", "daily", "top"}, obj{
			"tenant": str("the tenant's slug"), "from": timeField("start of the period"), "to": timeField("end of the period (exclusive)"),
			"totals": ref("UsageTotals"), "sandboxes": integer("sandboxes that used anything in the period"),
			"daily": arrayOf(obj{"allOf": []obj{ref("UsageTotals"), object([]string{"day"}, obj{"day": str("YYYY-MM-DD, UTC")})}}),
			"top": object([]string{"sandboxes", "users", "templates"}, obj{
				"sandboxes": arrayOf(ref("UsageLine")), "users": arrayOf(ref("UsageLine")), "templates": arrayOf(ref("UsageLine"))}),
		}),
		"UsageLine": obj{"allOf": []obj{ref("UsageTotals"), object([]string{"key", "label"}, obj{
			"key": str("sandbox id, user (or token) id, or template name"), "label": str("for people: short id and template, the user's name")})}},
		"QuotaLine": object([]string{"name", "label", "used", "limit", "share", "warn", "over"}, obj{
			"name": str("max_sandboxes, max_vcpus, max_memory_mib, max_vms or max_cpu_hours_monthly"), "label": str("for people"),
			"used": obj{"type": "number"}, "limit": obj{"type": "number"}, "share": obj{"type": "number", "description": "used / limit"},
			"warn": boolean("at 80 % of the limit or more"), "over": boolean("at the limit: no more of it can be had"),
		}),
		"UsageExportRow": object([]string{"BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd", "ResourceId", "ResourceType",
			"ServiceName", "ConsumedQuantity", "ConsumedUnit", "ListUnitPrice", "BilledCost", "BillingCurrency", "Tags"}, obj{
			"BillingPeriodStart": timeField("first instant of the calendar month (UTC) of the charge"), "BillingPeriodEnd": timeField("first instant of the next month"),
			"ChargePeriodStart": timeField("the ledger hour"), "ChargePeriodEnd": timeField("one hour later"), "ChargeCategory": str("Usage"),
			"ChargeDescription": str("what was metered, in words"), "SubAccountId": str("the tenant's id"), "SubAccountName": str("the tenant's slug"),
			"ResourceId": str("the sandbox's id"), "ResourceType": str("Sandbox"), "ServiceName": str("Stockade Sandboxes"), "SkuId": obj{"type": "string", "enum": []string{"vcpu-allocated", "memory-allocated", "cpu-measured", "egress"}},
			"ConsumedQuantity": obj{"type": "number"}, "ConsumedUnit": obj{"type": "string", "enum": []string{"vCPU-Seconds", "GiB-Seconds", "CPU-Seconds", "GB"}},
			"ListUnitPrice": obj{"type": "number"}, "BilledCost": obj{"type": "number", "description": "ConsumedQuantity × ListUnitPrice, an exact decimal (no rounding)"}, "BillingCurrency": str("ISO 4217"),
			"Tags": obj{"type": "object", "description": "template, user, tenant", "additionalProperties": obj{"type": "string"}},
		}),
		"Me": object([]string{"kind", "operator"}, obj{"kind": str("user or token"), "operator": boolean("platform operator"),
			"user": obj{"type": "object"}, "token": obj{"type": "object"}, "tenant": obj{"type": []string{"string", "null"}},
			"tenant_name": str(""), "role": obj{"type": []string{"string", "null"}}}),
		"Member": object([]string{"id", "email", "role", "active"}, obj{"id": str(""), "email": str(""), "role": ref("Role"),
			"active": boolean("signed in since the invitation"), "invited_by": str(""), "created_at": timeField("")}),
		"Token": object([]string{"id", "name", "prefix", "role"}, obj{"id": str(""), "name": str(""), "prefix": str("visible start of the secret"),
			"role": ref("Role"), "created_at": timeField(""), "expires_at": timeField(""), "last_used_at": obj{"type": []string{"string", "null"}, "format": "date-time", "description": "null: never used"}, "revoked": boolean(""),
			"token": str("the secret: only in the answer to its creation")}),
		"Workflow": object([]string{"name", "version", "source", "definition"}, obj{"name": str(""), "version": integer("1 and up"),
			"source": str("the YAML as saved"), "definition": obj{"type": "object", "description": "the validated definition: triggers, repositories, sandbox, timeout_seconds, steps, artifacts, notify"},
			"author": str(""), "created_at": timeField("")}),
		"WorkflowSettings": object([]string{"github_secret_name"}, obj{"github_secret_name": str("the tenant secret that signs GitHub deliveries; empty: refused"),
			"updated_by": str(""), "updated_at": timeField("")}),
		"Run": object([]string{"id", "workflow", "workflow_version", "number", "state", "trigger", "created_at"}, obj{"id": str(""), "workflow": str(""),
			"workflow_version": integer("the version it runs"), "number": integer("1 and up, per workflow"),
			"state":        obj{"type": "string", "enum": []string{"queued", "running", "succeeded", "failed", "cancelled", "timed_out", "skipped"}},
			"state_reason": str("why it ended so"), "trigger": str("manual, rerun, push, pull_request or issue_comment"), "delivery_id": str("the GitHub delivery"),
			"repository": str("owner/name"), "ref": str(""), "sha": str(""), "pr_number": integer(""), "sender": str("who caused it on GitHub"),
			"trust": obj{"type": "string", "enum": []string{"trusted", "untrusted", "skipped"},
				"description": "untrusted: ran without secrets and checkout token (a fork's pull request); skipped: nothing ran"},
			"trust_reason": str("who or what the run's code came from"),
			"created_by":   str(""), "rerun_of": str("the run it repeats"), "sandbox_id": str("destroyed when the run ends"),
			"cost": obj{"type": "number", "description": "from the usage ledger"}, "duration_ms": integer(""),
			"created_at": timeField(""), "started_at": timeField(""), "ended_at": timeField(""),
			"artifacts": arrayOf(object([]string{"path"}, obj{"path": str(""), "size": integer(""), "sha256": str(""), "error": str("why it was not collected")})),
			"steps": arrayOf(object([]string{"index", "name", "state"}, obj{"index": integer(""), "name": str(""),
				"state":     obj{"type": "string", "enum": []string{"pending", "running", "succeeded", "failed", "skipped"}},
				"exit_code": integer(""), "duration_ms": integer(""), "output": str("bounded"), "truncated": boolean(""),
				"started_at": timeField(""), "ended_at": timeField("")}))}),
		"WebhookEndpoint": object([]string{"id", "url", "secret_name", "event_types", "enabled", "created_at"}, obj{"id": str(""),
			"url": str(""), "secret_name": str("the tenant secret holding the whsec_ key"), "event_types": arrayOf(str("empty: every event")),
			"description": str(""), "enabled": boolean(""), "created_by": str(""), "created_at": timeField(""), "updated_at": timeField("")}),
		"WebhookDelivery": object([]string{"id", "endpoint_id", "event_id", "event_type", "state", "attempts"}, obj{"id": str(""),
			"endpoint_id": str(""), "event_id": str("the event_id in the payload: the same across redeliveries"),
			"event_type": str("sandbox.created, sandbox.destroyed, run.completed or webhook.test"),
			"state":      obj{"type": "string", "enum": []string{"pending", "delivered", "failed"}},
			"attempts":   integer("requests made"), "status_code": integer("of the last answer; 0: none"), "error": str("why the last attempt failed"),
			"message_id": str("the webhook-id header"), "created_at": timeField(""), "updated_at": timeField("")}),
		"Secret": object([]string{"name", "state", "created_at"}, obj{"name": str(""), "state": str("active, expired or revoked"),
			"hosts": arrayOf(str("host pattern")), "inject": injectField, "created_by": str(""), "created_at": timeField(""), "expires_at": timeField(""),
			"revoked_at": timeField("")}),
		"PolicyVersion": object([]string{"version", "author", "reason", "created_at"}, obj{"version": integer("0 is the built-in defaults"),
			"author": object(nil, obj{"id": str(""), "name": str(""), "kind": str("user, token or system")}), "reason": str(""),
			"rolled_back_from": integer("the version a rollback copied"), "created_at": obj{"type": []string{"string", "null"}, "format": "date-time"},
			"policy":  obj{"type": "object", "description": "the document (its JSON Schema: GET /api/v1/policy/schema)"},
			"changes": arrayOf(ref("PolicyChange"))}),
		"PolicyEdit": object([]string{"policy", "reason"}, obj{"policy": obj{"type": "object", "description": "the whole document (GET /api/v1/policy/schema)"},
			"reason": str("why: kept with the version"), "base_version": integer("the version edited; a newer one saved meanwhile is a 409")}),
		"PolicyChange": object([]string{"path", "old", "new"}, obj{"path": str("JSON pointer of the setting"), "old": obj{}, "new": obj{}}),
		"AuditEvent": object([]string{"id", "tenant", "tenant_id", "time", "code", "type", "outcome", "actor_kind", "actor_id"}, obj{"id": str(""),
			"tenant": str("the tenant's slug"), "tenant_id": str(""), "time": timeField(""), "code": str("stable event code"),
			"type": str("e.g. sandbox.created"), "outcome": obj{"type": "string", "enum": []string{"success", "failure", "denied"}},
			"actor_kind": str("user, token, system or anonymous"), "actor_id": str(""), "actor_name": str(""),
			"target_kind": str(""), "target_id": str(""), "details": obj{"type": "object"}, "remote_addr": str(""), "request_id": str("")}),
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
		"PriceVersion": object([]string{"id", "currency", "vcpu_second", "gib_second", "cpu_second", "egress_gb", "effective_from"}, obj{
			"id": str("default: the built-in list price, never set"), "tenant_id": str("set on a tenant's override"), "currency": str("ISO 4217"),
			"vcpu_second": obj{"type": "number"}, "gib_second": obj{"type": "number"}, "cpu_second": obj{"type": "number"}, "egress_gb": obj{"type": "number"},
			"effective_from": timeField("in force from, until a later version of the same book"), "created_by": str(""), "created_at": timeField("")}),
		"TenantQuota": object([]string{"tenant_id", "max_vms", "max_vcpus", "max_memory_mib", "max_sandboxes", "max_cpu_hours_monthly"}, obj{
			"tenant_id": str(""), "max_vms": integer(""), "max_vcpus": integer(""), "max_memory_mib": integer(""), "max_sandboxes": integer(""),
			"max_cpu_hours_monthly": integer("per UTC calendar month, measured"), "updated_at": timeField(""), "updated_by": str("")}),
		"Tenant": object([]string{"id", "slug", "name"}, obj{"id": str(""), "slug": str(""), "name": str(""), "members": integer(""), "created_at": timeField(""),
			"frozen_at": timeField("set while an operator has frozen the tenant")}),
		"Freeze": object([]string{"tenant_id", "frozen", "sandboxes_destroyed"}, obj{"tenant_id": str(""), "frozen": boolean(""),
			"frozen_at": obj{"type": []string{"string", "null"}, "format": "date-time"}, "reason": str(""),
			"sandboxes_destroyed": integer("sandboxes the freeze destroyed (reason frozen)"),
			"error":               str("sandboxes that could not be destroyed yet; the freeze holds regardless")}),
		"Compliance": object([]string{"tenant", "checked_at", "summary", "items", "history"}, obj{
			"tenant": str("the tenant's slug"), "checked_at": obj{"type": []string{"string", "null"}, "format": "date-time", "description": "latest evaluation"},
			"summary": obj{"type": "object", "description": "items per status", "additionalProperties": obj{"type": "integer"}},
			"items":   arrayOf(ref("ComplianceItem")), "history": arrayOf(ref("ComplianceChange"))}),
		"ComplianceItem": object([]string{"id", "question", "status", "evidence", "checked_at", "since"}, obj{
			"id": str("stable item id, e.g. egress_restricted"), "question": str(""),
			"status":     obj{"type": "string", "enum": []string{"pass", "warn", "fail"}},
			"evidence":   arrayOf(object([]string{"kind", "text"}, obj{"kind": str("policy, platform, live, audit or probe"), "text": str(""), "link": str("a page of the web app showing it")})),
			"checked_at": timeField("when it was last evaluated"), "since": timeField("when its current status began")}),
		"ComplianceChange": object([]string{"item_id", "from", "to", "at"}, obj{"item_id": str(""), "from": str("previous status; empty for the first evaluation"),
			"to": str("new status"), "at": timeField("")}),
		"ProbeRun": object([]string{"id", "state", "started_at", "checks"}, obj{"id": str(""), "sandbox_id": str("the probe's sandbox, destroyed afterwards"),
			"state": obj{"type": "string", "enum": []string{"running", "completed", "failed"}}, "started_at": timeField(""),
			"ended_at": obj{"type": []string{"string", "null"}, "format": "date-time"},
			"checks": arrayOf(object([]string{"id", "name", "outcome"}, obj{"id": str(""), "name": str("the escape tried"),
				"outcome": obj{"type": "string", "enum": []string{"blocked", "escaped", "error"}}, "detail": str("")})),
			"output": str("what the probe printed (bounded)")}),
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
			"idempotency_key": str("the Idempotency-Key of the create that made it"),
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
			"offset": integer("started (resume): where the output starts; error: output bytes delivered, to resume from"),
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
			"suppressed": integer("connections of the sandbox since its previous event that the per-sandbox rate limit kept out of the log (metered all the same)"),
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
