// Package schema checks documents against embedded JSON Schemas and says
// what is wrong field by field: every failing leaf becomes a
// *errdefs.FieldError named by its JSON pointer. The policy and workflow
// documents use it.
package schema

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Errors lists every failing field of a document, each a
// *errdefs.FieldError whose Field is a JSON pointer ("/resources/max_vcpus").
// It wraps errdefs.ErrInvalid through each of them.
type Errors []*errdefs.FieldError

func (e Errors) Error() string {
	parts := make([]string, 0, len(e))
	for _, fe := range e {
		parts = append(parts, fe.Error())
	}
	return "the document does not match its schema: " + strings.Join(parts, "; ")
}

// Unwrap lets errors.Is find errdefs.ErrInvalid and errors.As each field.
func (e Errors) Unwrap() []error {
	out := make([]error, 0, len(e))
	for _, fe := range e {
		out = append(out, fe)
	}
	return out
}

// Sort orders errs by field.
func (e Errors) Sort() Errors {
	sort.SliceStable(e, func(i, j int) bool { return e[i].Field < e[j].Field })
	return e
}

// Words say in a document's own terms what is wrong.
type Words struct {
	// Unknown is the detail of a property the schema does not have.
	Unknown func(name string) string
	// Pattern is the detail of a value at loc (instance location tokens)
	// not matching its pattern.
	Pattern func(loc []string, got string) string
}

// Schema is a compiled schema.
type Schema struct {
	s     *jsonschema.Schema
	print *message.Printer
}

// Compile compiles the schema doc (JSON) known as url.
func Compile(url string, doc []byte) (*Schema, error) {
	d, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("read schema %s: %w", url, err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(url, d); err != nil {
		return nil, fmt.Errorf("load schema %s: %w", url, err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("compile schema %s: %w", url, err)
	}
	return &Schema{s: s, print: message.NewPrinter(language.English)}, nil
}

// Check validates inst (JSON values: as jsonschema.UnmarshalJSON makes
// them) and returns the failing leaves, or nil.
func (s *Schema) Check(inst any, w Words) (Errors, error) {
	err := s.s.Validate(inst)
	if err == nil {
		return nil, nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return nil, fmt.Errorf("validate: %w", err)
	}
	return s.collect(ve, w, nil), nil
}

// collect appends the leaves of ve: the causes that say what is wrong.
func (s *Schema) collect(ve *jsonschema.ValidationError, w Words, errs Errors) Errors {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			errs = s.collect(c, w, errs)
		}
		return errs
	}
	path := Pointer(ve.InstanceLocation)
	switch k := ve.ErrorKind.(type) {
	case *kind.Required:
		for _, m := range k.Missing {
			errs = append(errs, &errdefs.FieldError{Field: Join(path, m), Rule: "required", Detail: "is required"})
		}
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			detail := "is not a setting here"
			if w.Unknown != nil {
				detail = w.Unknown(p)
			}
			errs = append(errs, &errdefs.FieldError{Field: Join(path, p), Rule: "unknown", Detail: detail})
		}
	case *kind.Pattern:
		detail := fmt.Sprintf("%q has the wrong form", Truncate(k.Got))
		if w.Pattern != nil {
			detail = w.Pattern(ve.InstanceLocation, k.Got)
		}
		errs = append(errs, &errdefs.FieldError{Field: path, Rule: "pattern", Detail: detail})
	default:
		rule := "schema"
		if kp := ve.ErrorKind.KeywordPath(); len(kp) > 0 {
			rule = kp[len(kp)-1]
		}
		errs = append(errs, &errdefs.FieldError{Field: path, Rule: rule, Detail: ve.ErrorKind.LocalizedString(s.print)})
	}
	return errs
}

var escape = strings.NewReplacer("~", "~0", "/", "~1")

// Pointer makes a JSON pointer (RFC 6901) of instance location tokens.
func Pointer(tokens []string) string {
	if len(tokens) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteString("/")
		b.WriteString(escape.Replace(t))
	}
	return b.String()
}

// Join appends the property name to the pointer parent.
func Join(parent, name string) string {
	name = escape.Replace(name)
	if parent == "/" {
		return "/" + name
	}
	return parent + "/" + name
}

// Truncate shortens a value quoted back in a message.
func Truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
