package policy

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/stockade-dev/stockade/tenants"
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
// *tenants.FieldError whose Field is a JSON pointer ("/resources/max_vcpus").
// It wraps tenants.ErrInvalid through each of them.
type Errors []*tenants.FieldError

func (e Errors) Error() string {
	parts := make([]string, 0, len(e))
	for _, fe := range e {
		parts = append(parts, fe.Error())
	}
	return "policy does not match its schema: " + strings.Join(parts, "; ")
}

// Unwrap lets errors.Is find tenants.ErrInvalid and errors.As each field.
func (e Errors) Unwrap() []error {
	out := make([]error, 0, len(e))
	for _, fe := range e {
		out = append(out, fe)
	}
	return out
}

// Validator checks documents against the compiled schema.
type Validator struct {
	schema *jsonschema.Schema
	print  *message.Printer
}

// NewValidator compiles the schema.
func NewValidator() (*Validator, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, fmt.Errorf("read policy schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(SchemaURL, doc); err != nil {
		return nil, fmt.Errorf("load policy schema: %w", err)
	}
	sch, err := c.Compile(SchemaURL)
	if err != nil {
		return nil, fmt.Errorf("compile policy schema: %w", err)
	}
	return &Validator{schema: sch, print: message.NewPrinter(language.English)}, nil
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
	var errs Errors
	if err := v.schema.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return Doc{}, fmt.Errorf("validate policy: %w", err)
		}
		errs = v.collect(ve, errs)
	}
	if len(errs) > 0 {
		return Doc{}, sortErrors(errs)
	}
	var d Doc
	if err := json.Unmarshal(raw, &d); err != nil {
		return Doc{}, Errors{{Field: "/", Rule: "syntax", Detail: err.Error()}}
	}
	if errs := d.crossCheck(); len(errs) > 0 {
		return Doc{}, sortErrors(errs)
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

func sortErrors(errs Errors) Errors {
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Field < errs[j].Field })
	return errs
}

// collect appends the leaves of ve: the causes that say what is wrong.
func (v *Validator) collect(ve *jsonschema.ValidationError, errs Errors) Errors {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			errs = v.collect(c, errs)
		}
		return errs
	}
	path := pointer(ve.InstanceLocation)
	switch k := ve.ErrorKind.(type) {
	case *kind.Required:
		for _, m := range k.Missing {
			errs = append(errs, &tenants.FieldError{Field: join(path, m), Rule: "required", Detail: "is required"})
		}
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			errs = append(errs, &tenants.FieldError{Field: join(path, p), Rule: "unknown", Detail: "is not a policy setting"})
		}
	case *kind.Pattern:
		errs = append(errs, &tenants.FieldError{Field: path, Rule: "pattern", Detail: patternDetail(ve.InstanceLocation, k.Got)})
	default:
		rule := "schema"
		if kp := ve.ErrorKind.KeywordPath(); len(kp) > 0 {
			rule = kp[len(kp)-1]
		}
		errs = append(errs, &tenants.FieldError{Field: path, Rule: rule, Detail: ve.ErrorKind.LocalizedString(v.print)})
	}
	return errs
}

// patternDetail says in words what a pattern wants, by the field it is on.
func patternDetail(loc []string, got string) string {
	last := ""
	if len(loc) > 0 {
		last = loc[len(loc)-1]
	}
	switch {
	case last == "domain":
		return fmt.Sprintf("%q is not a domain: use a host like api.github.com or a wildcard like *.example.com, lowercase", truncate(got))
	case len(loc) >= 2 && loc[len(loc)-2] == "secrets":
		return fmt.Sprintf("%q is not a secret name: letters, digits and _, not starting with a digit", truncate(got))
	case len(loc) >= 2 && loc[len(loc)-2] == "notify_emails":
		return fmt.Sprintf("%q is not an email address", truncate(got))
	}
	return fmt.Sprintf("%q has the wrong form", truncate(got))
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// crossCheck holds the rules between fields.
func (d Doc) crossCheck() Errors {
	var errs Errors
	if d.Resources.DefaultMemoryMiB > d.Resources.MaxMemoryMiB {
		errs = append(errs, &tenants.FieldError{Field: "/resources/default_memory_mib", Rule: "max",
			Detail: fmt.Sprintf("must be at most max_memory_mib (%d)", d.Resources.MaxMemoryMiB)})
	}
	if d.Lifetime.DefaultTimeoutSeconds > d.Lifetime.MaxTimeoutSeconds {
		errs = append(errs, &tenants.FieldError{Field: "/lifetime/default_timeout_seconds", Rule: "max",
			Detail: fmt.Sprintf("must be at most max_timeout_seconds (%d)", d.Lifetime.MaxTimeoutSeconds)})
	}
	return errs
}

// pointer makes a JSON pointer (RFC 6901) of instance location tokens.
func pointer(tokens []string) string {
	if len(tokens) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteString("/")
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

func join(parent, name string) string {
	name = strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
	if parent == "/" {
		return "/" + name
	}
	return parent + "/" + name
}
