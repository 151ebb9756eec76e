package views

// NavTemplateImport marks the templates section (the import page is one
// of its pages).
const NavTemplateImport = "templates"

// TemplateImportForm is the image upload form, with its messages.
type TemplateImportForm struct {
	Name   string
	Errors map[string]string
	// MaxUpload is the upload's bound, in bytes.
	MaxUpload int64
}
