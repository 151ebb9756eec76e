package api

// TemplateBuild is one recipe build of a tenant template
// (POST /api/v1/templates, GET /api/v1/templates/{name}/builds/{id}).
type TemplateBuild struct {
	ID           string  `json:"id"`
	Template     string  `json:"template" doc:"the template's name"`
	VersionID    string  `json:"version_id" doc:"the template version it makes (ready once the build succeeded)"`
	RecipeDigest string  `json:"recipe_digest" doc:"sha256 of the recipe's canonical JSON: the same recipe reuses its ready version"`
	State        string  `json:"state" enum:"running,succeeded,failed"`
	Step         int     `json:"step" minimum:"0" maximum:"5" doc:"the step reached: 1 base tree, 2 packages, 3 files, 4 setup commands, 5 pack (0: queued)"`
	Steps        int     `json:"steps" doc:"how many steps a build has (5)"`
	StepName     string  `json:"step_name"`
	Error        string  `json:"error,omitempty" doc:"why it failed"`
	LogBytes     int64   `json:"log_bytes" doc:"the size of its log so far (at most 1 MiB is kept)"`
	LogURL       string  `json:"log_url" doc:"its log, plain text; ?follow=1 streams it until the build ends"`
	Reused       bool    `json:"reused,omitempty" doc:"true: the recipe was built before and its version is still ready; nothing was built"`
	CreatedBy    string  `json:"created_by"`
	StartedAt    string  `json:"started_at" format:"date-time"`
	EndedAt      *string `json:"ended_at,omitempty" format:"date-time"`
}

// TemplateBuildList answers GET /api/v1/templates/{name}/builds.
type TemplateBuildList struct {
	Builds []TemplateBuild `json:"builds" nonnull:"true" doc:"newest first, at most 100"`
}

// TemplateBuildsParams names the template whose builds to list.
type TemplateBuildsParams struct {
	Name string `path:"name" doc:"the template's name"`
}

// TemplateBuildParams names a build of a template.
type TemplateBuildParams struct {
	Name string `path:"name" doc:"the template's name"`
	ID   string `path:"id" doc:"the build's id"`
}

// TemplateBuildLogQuery asks for a build's log.
type TemplateBuildLogQuery struct {
	Name   string `path:"name" doc:"the template's name"`
	ID     string `path:"id" doc:"the build's id"`
	Follow string `query:"follow" enum:"0,1,true,false" doc:"1: keep the response open and stream the log as it grows until the build ends (text/event-stream when the client accepts it, chunked text otherwise)"`
}
