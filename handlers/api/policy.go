package api

import "encoding/json"

// PolicyVersion is a version of the tenant's policy.
type PolicyVersion struct {
	Version        int            `json:"version" doc:"0 is the built-in defaults"`
	Author         PolicyAuthor   `json:"author"`
	Reason         string         `json:"reason"`
	RolledBackFrom *int           `json:"rolled_back_from,omitempty" doc:"the version a rollback copied"`
	CreatedAt      *string        `json:"created_at" format:"date-time" doc:"null for version 0, the built-in defaults"`
	Policy         any            `json:"policy,omitempty" doc:"the document (its JSON Schema: GET /api/v1/policy/schema)"`
	Changes        []PolicyChange `json:"changes,omitempty" doc:"a save: what changed against the version it replaced"`
}

// PolicyAuthor is who saved a version.
type PolicyAuthor struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Kind string `json:"kind" doc:"user, token or system"`
}

// PolicyChange is one setting changed between two versions.
type PolicyChange struct {
	Path string          `json:"path" doc:"JSON pointer of the setting"`
	Old  json.RawMessage `json:"old" doc:"its value before (null: unset)"`
	New  json.RawMessage `json:"new" doc:"its value after (null: unset)"`
}

// PolicyEdit is the body of PUT /api/v1/policy and POST .../preview. The
// document stays raw so the schema, not the decoder, judges it: every
// failing path is listed.
type PolicyEdit struct {
	Policy      json.RawMessage `json:"policy" doc:"the whole document (GET /api/v1/policy/schema)"`
	Reason      string          `json:"reason" doc:"why: kept with the version"`
	BaseVersion *int            `json:"base_version,omitempty" doc:"the version edited; a newer one saved meanwhile is a 409"`
}

// PolicyPreview says what saving a document would change.
type PolicyPreview struct {
	BaseVersion int            `json:"base_version" doc:"the version it was compared with"`
	Changes     []PolicyChange `json:"changes"`
	Notes       []string       `json:"notes" doc:"one sentence each: what it means for running and new sandboxes"`
}

// PolicyDiff is the difference between two versions.
type PolicyDiff struct {
	From    int            `json:"from"`
	To      int            `json:"to"`
	Changes []PolicyChange `json:"changes" nonnull:"true"`
}

// PolicyDiffQuery names the versions compared.
type PolicyDiffQuery struct {
	From int `query:"from" minimum:"0" doc:"default: the version before to"`
	To   int `query:"to" minimum:"0" doc:"default: the current version"`
}

// PolicyRollback is the body of POST /api/v1/policy/rollback.
type PolicyRollback struct {
	Version *int   `json:"version" doc:"the version to copy"`
	Reason  string `json:"reason,omitempty" doc:"why (required, as for a save): kept with the version and audited"`
}

// PolicyVersionList answers GET /api/v1/policy/versions (documents left out).
type PolicyVersionList struct {
	Versions []PolicyVersion `json:"versions" nonnull:"true"`
}

// PolicyVersionParams names a version in the path.
type PolicyVersionParams struct {
	Version int `path:"version" minimum:"0" doc:"the version number"`
}
