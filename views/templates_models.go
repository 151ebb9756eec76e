package views

import (
	"strings"
	"time"
)

// NavTemplates marks the Templates page; NavOperatorTemplates the
// operator's template storage page.
const (
	NavTemplates         = "templates"
	NavOperatorTemplates = "operator-templates"
)

// TemplatesView is the templates a tenant can start sandboxes from.
type TemplatesView struct {
	Rows []TemplateRow
	// CanDelete: the caller may delete the tenant's own templates.
	CanDelete bool
	// StorageBytes of QuotaMiB: what the tenant's own templates hold.
	StorageBytes int64
	QuotaMiB     int
	// Actions are links to other template pages (build from a recipe,
	// import an image) the caller may open; empty when none is there.
	Actions []NavItem
}

// TemplateRow is one template.
type TemplateRow struct {
	Name      string
	Source    string // builtin | recipe | oci
	Builtin   bool
	Version   string // the built-in's version, or "v<seq>" of the newest ready version
	State     string // ready, or the newest version's state when none is ready
	Digest    string
	SizeBytes int64
	CreatedAt *time.Time
	CreatedBy string
	InUse     int
	Versions  int
}

// ShortDigest is the digest's first 12 hex digits.
func (r TemplateRow) ShortDigest() string {
	d := strings.TrimPrefix(r.Digest, "sha256:")
	if len(d) > 12 {
		d = d[:12]
	}
	return d
}

// Size is the image's size for people.
func (r TemplateRow) Size() string { return showBytes(uint64(max(r.SizeBytes, 0))) }

// Storage says the tenant's usage against its quota.
func (v TemplatesView) Storage() string {
	return showBytes(uint64(max(v.StorageBytes, 0))) + " of " + showMiB(v.QuotaMiB)
}

// OperatorTemplatesView is every tenant's template storage.
type OperatorTemplatesView struct {
	Rows []OperatorTemplateRow
}

// OperatorTemplateRow is one tenant's template storage.
type OperatorTemplateRow struct {
	Tenant    string
	Templates int
	Versions  int
	Bytes     int64
	LimitMiB  int
}

// Used says the tenant's usage against its quota.
func (r OperatorTemplateRow) Used() string {
	return showBytes(uint64(max(r.Bytes, 0))) + " of " + showMiB(r.LimitMiB)
}

// Over reports a tenant past its quota (a quota lowered under its usage).
func (r OperatorTemplateRow) Over() bool { return r.Bytes > int64(r.LimitMiB)<<20 }
