package policy

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/schema"
)

//go:embed schema.json
var schemaJSON []byte

// SchemaURL identifies the policy schema.
const SchemaURL = "https://stockade.dev/schemas/policy.json"

// Schema returns the JSON Schema of a policy document.
func Schema() []byte { return bytes.Clone(schemaJSON) }

// maxDocBytes bounds a document: the largest valid one is far smaller.
const maxDocBytes = 256 << 10

// Errors lists every failing path of a document, each a
// *errdefs.FieldError whose Field is a JSON pointer ("/resources/max_vcpus").
// It wraps errdefs.ErrInvalid through each of them.
type Errors = schema.Errors

// Validator checks documents against the compiled schema.
type Validator struct {
	schema *schema.Schema
}

// NewValidator compiles the schema.
func NewValidator() (*Validator, error) {
	sch, err := schema.Compile(SchemaURL, schemaJSON)
	if err != nil {
		return nil, fmt.Errorf("policy schema: %w", err)
	}
	return &Validator{schema: sch}, nil
}

// words say what is wrong in the policy's terms.
var words = schema.Words{
	Unknown: func(string) string { return "is not a policy setting" },
	Pattern: patternDetail,
}

// Parse checks raw against the schema and the rules a schema cannot say
// (a default above its maximum), and returns the document. A failure is
// Errors naming every failing path, sorted.
func (v *Validator) Parse(raw []byte) (Doc, error) {
	if len(raw) > maxDocBytes {
		return Doc{}, Errors{{Field: "/", Rule: "size", Detail: fmt.Sprintf("the document must be at most %d bytes", maxDocBytes)}}
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return Doc{}, Errors{{Field: "/", Rule: "syntax", Detail: "not valid JSON: " + err.Error()}}
	}
	errs, err := v.schema.Check(inst, words)
	if err != nil {
		return Doc{}, fmt.Errorf("validate policy: %w", err)
	}
	if len(errs) > 0 {
		return Doc{}, errs.Sort()
	}
	var d Doc
	if err := json.Unmarshal(raw, &d); err != nil {
		return Doc{}, Errors{{Field: "/", Rule: "syntax", Detail: err.Error()}}
	}
	if errs := d.crossCheck(); len(errs) > 0 {
		return Doc{}, errs.Sort()
	}
	d.normalize()
	return d, nil
}

// Check validates a document built in Go (the form editor) exactly as Parse
// validates its JSON.
func (v *Validator) Check(d Doc) (Doc, error) {
	d.normalize()
	raw, err := json.Marshal(d)
	if err != nil {
		return Doc{}, fmt.Errorf("encode policy: %w", err)
	}
	return v.Parse(raw)
}

// patternDetail says in words what a pattern wants, by the field it is on.
func patternDetail(loc []string, got string) string {
	last := ""
	if len(loc) > 0 {
		last = loc[len(loc)-1]
	}
	switch {
	case last == "domain":
		return fmt.Sprintf("%q is not a domain: use a host like api.github.com or a wildcard like *.example.com, lowercase", schema.Truncate(got))
	case len(loc) >= 2 && loc[len(loc)-2] == "secrets":
		return fmt.Sprintf("%q is not a secret name: letters, digits and _, not starting with a digit", schema.Truncate(got))
	case len(loc) >= 2 && loc[len(loc)-2] == "notify_emails":
		return fmt.Sprintf("%q is not an email address", schema.Truncate(got))
	}
	return fmt.Sprintf("%q has the wrong form", schema.Truncate(got))
}

// crossCheck holds the rules between fields.
func (d Doc) crossCheck() Errors {
	var errs Errors
	if d.Resources.DefaultMemoryMiB > d.Resources.MaxMemoryMiB {
		errs = append(errs, &errdefs.FieldError{Field: "/resources/default_memory_mib", Rule: "max",
			Detail: fmt.Sprintf("must be at most max_memory_mib (%d)", d.Resources.MaxMemoryMiB)})
	}
	if d.Lifetime.DefaultTimeoutSeconds > d.Lifetime.MaxTimeoutSeconds {
		errs = append(errs, &errdefs.FieldError{Field: "/lifetime/default_timeout_seconds", Rule: "max",
			Detail: fmt.Sprintf("must be at most max_timeout_seconds (%d)", d.Lifetime.MaxTimeoutSeconds)})
	}
	return errs
}
