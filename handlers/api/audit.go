package api

// AuditEvent is one exported audit event, with the tenant's slug so a line
// read on its own still says whose it is.
type AuditEvent struct {
	ID         string         `json:"id"`
	TenantID   string         `json:"tenant_id"`
	Time       string         `json:"time" format:"date-time"`
	Code       string         `json:"code" doc:"stable event code"`
	Type       string         `json:"type" doc:"e.g. sandbox.created"`
	ActorKind  string         `json:"actor_kind" doc:"user, token, system or anonymous"`
	ActorID    string         `json:"actor_id"`
	ActorName  string         `json:"actor_name"`
	TargetKind string         `json:"target_kind"`
	TargetID   string         `json:"target_id"`
	Outcome    string         `json:"outcome" enum:"success,failure,denied"`
	Details    map[string]any `json:"details" doc:"names and values, never secrets"`
	RemoteAddr string         `json:"remote_addr"`
	RequestID  string         `json:"request_id"`
	Tenant     string         `json:"tenant" doc:"the tenant's slug"`
}

// AuditQuery filters an audit export.
type AuditQuery struct {
	Format  string `query:"format" enum:"jsonl,csv,json" doc:"jsonl (default), csv or json"`
	Type    string `query:"type" doc:"one event type, e.g. sandbox.exec"`
	Actor   string `query:"actor" doc:"a user id or email, or a token id or prefix"`
	Outcome string `query:"outcome" enum:"success,failure,denied"`
	Since   string `query:"since" doc:"RFC 3339 time or date"`
	Until   string `query:"until" doc:"RFC 3339 time or date"`
	Q       string `query:"q" doc:"text search"`
	Limit   int    `query:"limit" minimum:"1" maximum:"1000"`
}
