package api

// ImportTemplate is the JSON body of POST /api/v1/templates/import: an
// image to pull from a registry the operator allows.
type ImportTemplate struct {
	Name              string `json:"name" doc:"the template's name: 1-32 of a-z 0-9 _ -; a new template, or a new version of an imported one"`
	Image             string `json:"image" doc:"registry/repository:tag or registry/repository@sha256:…; the registry must be in STOCKADE_TEMPLATE_REGISTRIES"`
	CredentialsSecret string `json:"credentials_secret,omitempty" doc:"a tenant secret holding USER:PASSWORD (or a registry token), scoped to the registry's host; never logged or returned"`
}

// ImportTemplateQuery names the template of a raw application/x-tar upload.
type ImportTemplateQuery struct {
	Name string `query:"name" doc:"the template's name (uploads as application/x-tar)"`
}

// TemplateVersion is one version of a tenant template.
type TemplateVersion struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Seq       int               `json:"seq" doc:"the template's versions count from 1"`
	Source    string            `json:"source" doc:"oci or recipe"`
	SourceRef string            `json:"source_ref" doc:"for an import: the image's name and manifest digest (upload@sha256:… for an upload)"`
	Digest    string            `json:"digest" doc:"sha256 of the template's ext4 image"`
	SizeBytes int64             `json:"size_bytes"`
	State     string            `json:"state"`
	Env       map[string]string `json:"env,omitempty" doc:"defaults from the image config"`
	User      string            `json:"user,omitempty" doc:"the image's user; root maps to the sandbox user"`
	Workdir   string            `json:"workdir,omitempty"`
	CreatedBy string            `json:"created_by"`
	CreatedAt string            `json:"created_at" format:"date-time"`
}
