package views

import "time"

// PolicyView is the policy page.
type PolicyView struct {
	CSRF    string
	CanEdit bool
	Current PolicyVersionRow
	// Sections are the per-section forms (read-only when !CanEdit).
	Sections []PolicySection
	// Raw is the JSON editor's text; RawErrors its failing paths.
	Raw       string
	RawErrors []PolicyPathError
	// RawPreview is set when the raw editor asked for a preview.
	RawPreview *PolicyPreview
	Versions   []PolicyVersionRow
	// Saved names the version just saved (flash).
	Saved int
}

// PolicySection is one section's form.
type PolicySection struct {
	Key    string // "resources"
	Title  string
	Help   string
	Fields []PolicyField
	// Preview is set after "Preview changes": Save appears with it.
	Preview *PolicyPreview
	// Error is a failure of the section as a whole (a stale base version).
	Error string
	// Reason is what the editor typed.
	Reason string
}

// Kinds of PolicyField.
const (
	FieldInt   = "int"
	FieldBool  = "bool"
	FieldEnum  = "enum"
	FieldLines = "lines"
	FieldText  = "text" // one line of free text (a URL)
)

// PolicyField is one input of a section form. Name is the setting's JSON
// pointer ("/resources/max_memory_mib").
type PolicyField struct {
	Name    string
	ID      string // HTML id derived from Name
	Label   string
	Help    string
	Kind    string
	Value   string
	Checked bool
	Options []string
	Error   string
}

// PolicyPreview shows what a change does before it is saved.
type PolicyPreview struct {
	Changes []PolicyChange
	Notes   []string
}

// PolicyChange is one changed setting.
type PolicyChange struct {
	Path string
	Old  string
	New  string
}

// PolicyPathError is one failing path of a document.
type PolicyPathError struct {
	Path   string
	Detail string
}

// PolicyVersionRow is one version in lists and headers.
type PolicyVersionRow struct {
	Version        int
	Author         string
	Reason         string
	RolledBackFrom int       // -1: an edit
	CreatedAt      time.Time // zero for version 0 (defaults)
	Current        bool
}

// PolicyVersionView is one version's page: its document and its diff
// against the version before it.
type PolicyVersionView struct {
	CSRF     string
	CanEdit  bool
	Version  PolicyVersionRow
	Previous int // -1: none
	Changes  []PolicyChange
	Doc      string
}
