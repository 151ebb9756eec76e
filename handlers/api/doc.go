// Package api holds the wire types of Stockade's JSON API (/api/v1): the
// request and response bodies, query parameters and headers. The handlers
// decode into and encode from them, the CLI (cmd/stockade) sends and reads
// them, and the OpenAPI document (GET /api/v1/openapi.json) is generated
// from them and the route table, so the three cannot drift apart (coder's
// codersdk and incus's shared/api are the precedent).
//
// It imports only the standard library, so any client may import it.
//
// Struct tags, read by the document's generator (the names huma uses):
//
//	json:"name,omitempty"  the field; without omitempty it is required
//	doc:"..."              its description
//	enum:"a,b,c"           the values it takes
//	format:"date-time"     a string's format (date-time, date, uri, email)
//	minimum:"0" maximum:"500" minItems:"1" maxLength:"255" pattern:"^...$"
//	nonnull:"true"         a slice or map the server never sends as null
//	query:"name" path:"name" header:"Name"  a parameter (in a Params struct)
//
// A pointer field without omitempty may be null; one with omitempty is left
// out instead. Times are RFC 3339 strings in UTC.
package api

// IdempotencyHeader is the request header that makes a create idempotent:
// a retry with the same key within 24 h answers the first result and makes
// nothing new.
const IdempotencyHeader = "Idempotency-Key"

// ReplayedHeader marks an answer replayed from an earlier request with the
// same Idempotency-Key.
const ReplayedHeader = "Idempotent-Replayed"

// LogSourceHeader says where a run's log came from: live or stored.
const LogSourceHeader = "X-Stockade-Log"

// Media types of the API besides application/json.
const (
	MediaProblem   = "application/problem+json"
	MediaNDJSON    = "application/x-ndjson"
	MediaJSONLines = "application/jsonl"
	MediaCSV       = "text/csv"
	MediaYAML      = "application/yaml"
	MediaBytes     = "application/octet-stream"
	MediaCast      = "application/x-asciicast"
	MediaText      = "text/plain"
)

// Problem is an error answer: an RFC 9457 problem document.
type Problem struct {
	Type      string         `json:"type" doc:"a URI naming the kind of problem"`
	Title     string         `json:"title" doc:"short summary"`
	Status    int            `json:"status" doc:"the HTTP status"`
	Detail    string         `json:"detail,omitempty" doc:"what went wrong"`
	Instance  string         `json:"instance,omitempty" doc:"the request path"`
	RequestID string         `json:"request_id,omitempty" doc:"for the operator's logs"`
	Errors    []FieldProblem `json:"errors,omitempty" doc:"the fields (or quotas) at fault"`
}

// FieldProblem names one field at fault.
type FieldProblem struct {
	Field  string `json:"field" doc:"the field (or quota) at fault"`
	Rule   string `json:"rule,omitempty" doc:"the rule broken"`
	Detail string `json:"detail" doc:"why"`
}

// Status answers GET /healthz and /readyz.
type Status struct {
	Status string            `json:"status" doc:"ok, ready or unavailable" enum:"ok,ready,unavailable"`
	Error  string            `json:"error,omitempty" doc:"why not ready"`
	Checks map[string]string `json:"checks,omitempty" doc:"each check: ok, or why it failed"`
	// Replication: several replicas on PostgreSQL only.
	Replication *Replication `json:"replication,omitempty" doc:"leadership and lease health (several replicas on PostgreSQL)"`
}

// Me describes the caller: GET /api/v1/me.
type Me struct {
	Kind       string   `json:"kind" doc:"user or token" enum:"user,token"`
	Operator   bool     `json:"operator" doc:"platform operator"`
	User       *MeUser  `json:"user,omitempty" doc:"the person, when a session calls"`
	Token      *MeToken `json:"token,omitempty" doc:"the token, when one calls"`
	Tenant     *string  `json:"tenant" doc:"the tenant's slug; null: none selected"`
	TenantName string   `json:"tenant_name,omitempty"`
	Role       *string  `json:"role" doc:"the caller's role in the tenant; null: none" enum:"admin,manager,developer,auditor,billing"`
}

// MeUser is the person calling.
type MeUser struct {
	ID     string `json:"id"`
	Email  string `json:"email"`
	Name   string `json:"name"`
	Issuer string `json:"issuer" doc:"the identity provider"`
}

// MeToken is the token calling.
type MeToken struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Prefix    string `json:"prefix"`
	ExpiresAt string `json:"expires_at" format:"date-time"`
}

// IdempotencyParams is the header of a create that takes an Idempotency-Key.
type IdempotencyParams struct {
	Key string `header:"Idempotency-Key" maxLength:"255" doc:"a retry with the same key within 24 h answers the first result (Idempotent-Replayed: true) and creates nothing; the same key with another request is a 422, one still running a 409"`
}
