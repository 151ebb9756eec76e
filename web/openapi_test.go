package web_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/web"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestOpenAPICoversRouteTable: the document served at /api/v1/openapi.json
// describes every API route of the route table, and nothing that is not one.
func TestOpenAPICoversRouteTable(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	status, body, hdr := env.Anonymous().Request(t, http.MethodGet, "/api/v1/openapi.json", "", nil)
	if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("Got(GET /api/v1/openapi.json without a token) = %d %s; want 200 application/json", status, hdr.Get("Content-Type"))
	}
	var doc struct {
		OpenAPI    string                                `json:"openapi"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("decode the document: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("Got(openapi) = %q; want 3.1.0", doc.OpenAPI)
	}

	documented := map[string]bool{}
	for p, ops := range doc.Paths {
		for m := range ops {
			documented[strings.ToUpper(m)+" "+p] = true
		}
	}
	inTable := map[string]bool{}
	for _, r := range env.App.RouteTable() {
		if !r.API {
			continue
		}
		key := r.Method + " " + web.OpenAPIPath(r.Path)
		inTable[key] = true
		if !documented[key] {
			t.Errorf("Got(%s in the document) = missing; want every API route of the route table documented", key)
		}
	}
	var extra []string
	for k := range documented {
		if !inTable[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		t.Errorf("Got(%s in the document) = documented; want only routes of the route table", k)
	}
	if len(inTable) < 30 {
		t.Errorf("Got(API routes) = %d; want the whole API (30 or more)", len(inTable))
	}

	// Every reference resolves, and the sandbox API documents its streaming exec.
	for _, m := range regexp.MustCompile(`"#/components/schemas/([A-Za-z]+)"`).FindAllStringSubmatch(body, -1) {
		if _, ok := doc.Components.Schemas[m[1]]; !ok {
			t.Errorf("Got(schema %s) = missing; want every $ref resolved", m[1])
		}
	}
	exec := string(doc.Paths["/api/v1/sandboxes/{id}/exec"]["post"])
	for _, want := range []string{"application/x-ndjson", "ExecEvent", `"stream"`} {
		if !strings.Contains(exec, want) {
			t.Errorf("Got(exec operation) without %s; want the streaming variant documented", want)
		}
	}
}

// TestOpenAPIDocumentIsStable: building the document twice gives the same
// JSON (no map of functions, nothing random).
func TestOpenAPIDocumentIsStable(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	build := func() string {
		doc, err := web.OpenAPIDocument(env.App.RouteTable())
		if err != nil {
			t.Fatalf("Got(build the document) = %v; want a document", err)
		}
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if a, b := build(), build(); a != b {
		t.Error("Got(two builds of the document) differ; want the same")
	}
}

// TestOpenAPIDocumentValidates: the document served at /api/v1/openapi.json
// is valid OpenAPI as a standard validator (kin-openapi) reads it, every
// error reported, not just the first.
func TestOpenAPIDocumentValidates(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	status, body, _ := env.Anonymous().Request(t, http.MethodGet, "/api/v1/openapi.json", "", nil)
	if status != http.StatusOK {
		t.Fatalf("Got(GET /api/v1/openapi.json) = %d; want 200", status)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData([]byte(body))
	if err != nil {
		t.Fatalf("Got(load the served document) = %v; want a document kin-openapi reads", err)
	}
	// The strictest options kin-openapi has: formats, patterns, defaults
	// and examples checked, no extension beside a $ref.
	if err := doc.Validate(loader.Context, openapi3.EnableMultiError(), openapi3.EnableSchemaFormatValidation(),
		openapi3.EnableSchemaPatternValidation(), openapi3.EnableSchemaDefaultsValidation(), openapi3.EnableExamplesValidation(),
		openapi3.ProhibitExtensionsWithRef()); err != nil {
		var me openapi3.MultiError
		if errors.As(err, &me) {
			for _, e := range me {
				t.Errorf("Got(validate) error: %v; want none", e)
			}
			return
		}
		t.Errorf("Got(validate) = %v; want a valid OpenAPI document", err)
	}
}

// TestOpenAPIOperationsFromTable: every operation documents each of its
// route's path parameters, every API route names what it answers, the
// terminal's drive check of the table is in its operation, and request
// bodies refuse fields the server does not know.
func TestOpenAPIOperationsFromTable(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	doc, err := web.OpenAPIDocument(env.App.RouteTable())
	if err != nil {
		t.Fatalf("Got(build the document) = %v; want a document", err)
	}
	for _, r := range env.App.RouteTable() {
		if !r.API {
			continue
		}
		if r.Doc == nil || r.Doc.Summary == "" || len(r.Doc.Answers) == 0 {
			t.Errorf("Got(%s %s Doc) = %+v; want a summary and its answers", r.Method, r.Path, r.Doc)
			continue
		}
		op := doc.Paths.Find(web.OpenAPIPath(r.Path)).GetOperation(r.Method)
		for _, m := range regexp.MustCompile(`:([A-Za-z_]+)`).FindAllStringSubmatch(r.Path, -1) {
			if p := op.Parameters.GetByInAndName("path", m[1]); p == nil || !p.Required {
				t.Errorf("Got(%s %s path parameter %s) = %v; want documented and required", r.Method, r.Path, m[1], p)
			}
		}
		for _, chk := range r.Also {
			if !strings.Contains(op.Description, string(chk.Perm)) {
				t.Errorf("Got(%s %s description) = %q; want its check for %s", r.Method, r.Path, op.Description, chk.Perm)
			}
		}
	}
	for _, name := range []string{"CreateSandbox", "ExecRequest", "CreateToken", "PolicyEdit"} {
		s := doc.Components.Schemas[name]
		if s == nil || s.Value.AdditionalProperties.Has == nil || *s.Value.AdditionalProperties.Has {
			t.Errorf("Got(schema %s additionalProperties) open; want false: the server refuses unknown fields", name)
		}
	}
	if s := doc.Components.Schemas["Sandbox"]; s == nil || !slices.Contains(s.Value.Required, "id") || slices.Contains(s.Value.Required, "vm_id") {
		t.Errorf("Got(Sandbox required) = %v; want id (no omitempty) and not vm_id (omitempty)", s)
	}
}

// jsonFields are the JSON names of t's fields, embedded structs' fields
// inlined as encoding/json does, sorted.
func jsonFields(t reflect.Type) []string {
	var out []string
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || (f.Anonymous && f.Type.Kind() == reflect.Struct) {
			continue
		}
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "-" {
			if name == "" {
				name = f.Name
			}
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// TestWireTypesDocumented: where a handler still encodes a type of its own
// or of a domain package (the terminal's control frames, policy versions),
// that type has the JSON fields of the api type the document describes, no
// more and no fewer.
func TestWireTypesDocumented(t *testing.T) {
	for _, tc := range []struct{ wire, doc any }{
		{terminal.Control{}, api.TerminalControl{}},
		{handlers.PolicyJSON{}, api.PolicyVersion{}},
		{handlers.PolicyAuthor{}, api.PolicyAuthor{}},
		{handlers.PolicyPreviewJSON{}, api.PolicyPreview{}},
		{handlers.PolicyDiffJSON{}, api.PolicyDiff{}},
		{policy.Change{}, api.PolicyChange{}},
	} {
		w, d := reflect.TypeOf(tc.wire), reflect.TypeOf(tc.doc)
		if got, want := jsonFields(w), jsonFields(d); !slices.Equal(got, want) {
			t.Errorf("Got(%s fields) = %v; want those of %s %v", w, got, d, want)
		}
	}
}

// TestProblemDocumented: an error answer decodes into api.Problem (what the
// CLI reads and the document describes) with no field left over.
func TestProblemDocumented(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.Tenant(t, "acme")
	cl := env.WithToken(env.Token(t, acme, tenants.RoleAdmin))
	status, body, hdr := cl.Request(t, http.MethodPost, "/api/v1/members", "application/json", strings.NewReader(`{"email":1,"role":"developer"}`))
	if status != http.StatusBadRequest || hdr.Get("Content-Type") != api.MediaProblem {
		t.Fatalf("Got(POST /api/v1/members with a number for email) = %d %s; want 400 %s", status, hdr.Get("Content-Type"), api.MediaProblem)
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	var p api.Problem
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("Got(decode the problem into api.Problem) = %v; want every field known: %s", err, body)
	}
	if p.Status != status || len(p.Errors) == 0 || p.Errors[0].Field != "email" {
		t.Errorf("Got(problem) = %+v; want status %d naming the field email", p, status)
	}
}
