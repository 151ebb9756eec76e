package views

// TemplateBuildFormView is the "Build from a recipe" form: the recipe as
// typed and, after a refused post, every failing field.
type TemplateBuildFormView struct {
	Source string
	// Errors are the refused fields (JSON pointers into the recipe, "/" for
	// the whole document) with what is wrong, or FormError.
	Errors map[string]string
}

// TemplateBuildView is one build's page: its progress and its log, live
// while it runs.
type TemplateBuildView struct {
	ID, Template, VersionID, State string
	Step, Steps                    int
	StepName, Error                string
	StartedAt, EndedAt, CreatedBy  string
	Log                            string
	// EventsURL streams the log (Server-Sent Events) while it runs.
	EventsURL string
	Ended     bool
}
