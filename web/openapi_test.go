package web_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/stockade-dev/stockade/web"
	"github.com/stockade-dev/stockade/web/webtest"
)

// openAPIPath turns a route template into an OpenAPI path: /x/:id -> /x/{id}.
func openAPIPath(p string) string {
	return regexp.MustCompile(`:([A-Za-z_]+)`).ReplaceAllString(p, "{$1}")
}

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
		key := r.Method + " " + openAPIPath(r.Path)
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
	a, err := json.Marshal(web.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(web.OpenAPIDocument())
	if string(a) != string(b) {
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
	if err := doc.Validate(loader.Context, openapi3.EnableMultiError()); err != nil {
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
