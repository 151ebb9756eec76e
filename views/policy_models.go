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
	// RawReason is the raw editor's typed reason, RawReasonError its
	// refusal; RawFocus the id to focus after it.
	RawReason, RawReasonError, RawFocus string
	Versions                            []PolicyVersionRow
	// Saved names the version just saved (flash).
	Saved int
	// CanReadVMs says whether the link to the VM pool settings (the VMs
	// page) may be shown.
	CanReadVMs bool
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
	// ReasonError is the refusal of the reason (required, too long).
	ReasonError string
	// Focus is the id of the element that takes the focus when the page
	// loads after a refusal (the first field in error, the reason, the
	// section's error); "" for none.
	Focus string
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

// PolicyChange is one changed setting, in words: Label is the field's
// label, Old and New its values ("512 MiB"); a list (List) shows the
// entries it gains (Added) and loses (Removed) instead. Path (the JSON
// pointer) is only an attribute for scripts and tests.
type PolicyChange struct {
	Path           string
	Label          string
	List           bool
	Old, New       string
	Added, Removed []string
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

// PolicyRollbackView is the confirm step of a rollback: what it changes
// against the version in force, and the reason it needs.
type PolicyRollbackView struct {
	CSRF    string
	Target  PolicyVersionRow // the version whose document is copied
	Current PolicyVersionRow // the version in force the diff is against
	Changes []PolicyChange
	Notes   []string
	Reason  string
	// ReasonError is the refusal of the reason (required, too long).
	ReasonError string
	// Error is a refusal of the whole rollback (another version saved since).
	Error string
}
