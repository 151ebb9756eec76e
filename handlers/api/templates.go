package api

// TemplateParams names a template in the path.
type TemplateParams struct {
	Name string `path:"name" doc:"the template's name (a built-in's or one of the tenant's own)"`
}

// TemplateDefaults are what a tenant template gives its sandboxes.
type TemplateDefaults struct {
	Env     map[string]string `json:"env" nonnull:"true" doc:"added under each sandbox's own env"`
	User    string            `json:"user" doc:"the user the image named (recorded; commands run as the sandbox user)"`
	Workdir string            `json:"workdir" doc:"the commands' default directory"`
}

// TemplateVersionEntry is one version of a tenant template as listings show it.
type TemplateVersionEntry struct {
	ID        string           `json:"id" doc:"what sandboxes record as template_version"`
	Seq       int              `json:"seq" doc:"1 for the first version"`
	State     string           `json:"state" enum:"building,ready,failed"`
	Reason    string           `json:"reason,omitempty" doc:"why it failed"`
	Source    string           `json:"source" enum:"recipe,oci"`
	SourceRef string           `json:"source_ref" doc:"the recipe's digest or the image's reference"`
	Digest    string           `json:"digest" doc:"sha256:<hex> of the template image once ready"`
	SizeBytes int64            `json:"size_bytes"`
	Defaults  TemplateDefaults `json:"defaults"`
	CreatedBy string           `json:"created_by"`
	CreatedAt string           `json:"created_at" format:"date-time"`
	ReadyAt   *string          `json:"ready_at" format:"date-time"`
}

// Template is a template the tenant can see: a built-in or its own.
type Template struct {
	Name    string `json:"name"`
	Source  string `json:"source" enum:"builtin,recipe,oci"`
	Builtin bool   `json:"builtin"`
	// Version is the version new sandboxes get: the built-in's version, or
	// the id of the newest ready version ("" when none is ready yet).
	Version   string                 `json:"version"`
	Digest    string                 `json:"digest"`
	SizeBytes int64                  `json:"size_bytes"`
	CreatedAt *string                `json:"created_at" format:"date-time"`
	CreatedBy string                 `json:"created_by"`
	InUse     int                    `json:"in_use" doc:"sandboxes that have not ended running one of its versions"`
	Versions  []TemplateVersionEntry `json:"versions" nonnull:"true" doc:"newest first (tenant templates; failed ones too)"`
}

// TemplateList is every template the tenant can see and its storage.
type TemplateList struct {
	Templates    []Template `json:"templates" nonnull:"true"`
	StorageBytes int64      `json:"storage_bytes" doc:"what the tenant's own templates hold (building ones at their estimate)"`
	QuotaMiB     int        `json:"quota_mib" doc:"the tenant's template storage quota (max_template_mib)"`
}
