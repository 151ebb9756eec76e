package webtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// maxCheckedBody bounds the response body kept for the check; a longer
// one is checked for its status and content type only.
const maxCheckedBody = 8 << 20

// OpenAPIChecked wraps the app's handler so that every response to a
// request the served OpenAPI document describes (/api/v1/openapi.json, read
// through next once) is checked against it with kin-openapi's
// openapi3filter: the status must be one the operation documents (a
// success only when listed, not by its "default"), the content type one it
// documents for that status, and a JSON body (problem documents included,
// and each line of JSON Lines and NDJSON streams) must validate against its
// schema. A mismatch fails t naming the route, the status and the schema
// error. Streams pass through as they are written; WebSocket upgrades are
// not checked.
func OpenAPIChecked(t testing.TB, next http.Handler) http.Handler {
	return &openAPICheck{t: t, next: next}
}

type openAPICheck struct {
	t      testing.TB
	next   http.Handler
	once   sync.Once
	router routers.Router
	err    error
}

// load reads the served document through the app itself.
func (c *openAPICheck) load() {
	rec := httptest.NewRecorder()
	c.next.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/openapi.json", nil))
	if rec.Code != http.StatusOK {
		c.err = fmt.Errorf("GET /api/v1/openapi.json answered %d", rec.Code)
		return
	}
	doc, err := openapi3.NewLoader().LoadFromData(rec.Body.Bytes())
	if err != nil {
		c.err = fmt.Errorf("load the served OpenAPI document: %w", err)
		return
	}
	doc.Servers = nil // "/" only: match paths on any host of the test server
	if c.router, err = legacy.NewRouter(doc); err != nil {
		c.err = fmt.Errorf("route the served OpenAPI document: %w", err)
		return
	}
	if !usesJSONSchema2020(doc) {
		// kin-openapi compiles each schema anew for every 3.1 answer, then
		// falls back to its own visitor for schemas with references and no
		// JSON Schema 2020 keyword: with none in the document, the verdicts
		// are the visitor's either way, at a fraction of the cost.
		doc.OpenAPI = "3.0.3"
		// In 3.1 a schema without a type ({}, any JSON value) takes null
		// too; the 3.0 visitor needs to be told.
		anyTakesNull(doc)
	}
}

// anyTakesNull marks every schema of doc without a type nullable.
func anyTakesNull(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(r *openapi3.SchemaRef)
	walk = func(r *openapi3.SchemaRef) {
		if r == nil || r.Value == nil || seen[r.Value] {
			return
		}
		s := r.Value
		seen[s] = true
		if s.Type == nil || len(*s.Type) == 0 {
			if len(s.AllOf) == 0 && len(s.AnyOf) == 0 && len(s.OneOf) == 0 {
				s.Nullable = true
			}
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		walk(s.AdditionalProperties.Schema)
		for _, l := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
			for _, x := range l {
				walk(x)
			}
		}
	}
	if doc.Components != nil {
		for _, r := range doc.Components.Schemas {
			walk(r)
		}
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				for _, mt := range op.RequestBody.Value.Content {
					walk(mt.Schema)
				}
			}
			for _, resp := range op.Responses.Map() {
				if resp.Value == nil {
					continue
				}
				for _, mt := range resp.Value.Content {
					walk(mt.Schema)
				}
			}
		}
	}
}

func (c *openAPICheck) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead || r.Method == http.MethodOptions {
		c.next.ServeHTTP(w, r)
		return
	}
	tw := &teeWriter{ResponseWriter: w}
	c.next.ServeHTTP(tw, r)
	if tw.hijacked || !tw.wrote && tw.buf.Len() == 0 && tw.status == 0 {
		return // a WebSocket, or nothing answered
	}
	if tw.status == 0 {
		tw.status = http.StatusOK
	}
	c.once.Do(c.load)
	if c.err != nil {
		c.t.Errorf("OpenAPI check: %v", c.err)
		return
	}
	route, params, err := c.router.FindRoute(r)
	if err != nil {
		// Not a documented operation: a page, or an API path that is no
		// route at all (404). A routed API answer must be documented.
		if strings.HasPrefix(r.URL.Path, "/api/") && tw.status != http.StatusNotFound && tw.status != http.StatusMethodNotAllowed {
			c.t.Errorf("OpenAPI: %s %s answered %d but the document has no such operation (%v)", r.Method, r.URL.Path, tw.status, err)
		}
		return
	}
	if err := check(r, route, params, tw); err != nil {
		c.t.Errorf("OpenAPI: %s %s (%s) answered %d %s: %v", r.Method, route.Path, r.URL.Path, tw.status, tw.Header().Get("Content-Type"), err)
	}
}

// usesJSONSchema2020 reports whether a response schema of doc uses a
// keyword only JSON Schema 2020-12 validates (kin-openapi's own list).
func usesJSONSchema2020(doc *openapi3.T) bool {
	found := errors.New("found")
	walk := func(ref *openapi3.SchemaRef) bool {
		return ref != nil && errors.Is(ref.WalkSubtree(func(_ string, r *openapi3.SchemaRef) error {
			s := r.Value
			if s != nil && (s.Const != nil || len(s.PrefixItems) != 0 || s.Contains != nil || len(s.PatternProperties) != 0 ||
				len(s.DependentSchemas) != 0 || s.PropertyNames != nil || s.UnevaluatedItems.Has != nil || s.UnevaluatedItems.Schema != nil ||
				s.UnevaluatedProperties.Has != nil || s.UnevaluatedProperties.Schema != nil || s.If != nil || s.Then != nil || s.Else != nil ||
				len(s.DependentRequired) != 0 || len(s.Defs) != 0 || s.ContentSchema != nil) {
				return found
			}
			return nil
		}), found)
	}
	if doc.Components != nil {
		for _, ref := range doc.Components.Schemas {
			if walk(ref) {
				return true
			}
		}
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, resp := range op.Responses.Map() {
				if resp.Value == nil {
					continue
				}
				for _, media := range resp.Value.Content {
					if walk(media.Schema) {
						return true
					}
				}
			}
		}
	}
	return false
}

// check validates one answer against its operation.
func check(r *http.Request, route *routers.Route, params map[string]string, tw *teeWriter) error {
	op := route.Operation
	if tw.status < 400 && op.Responses.Status(tw.status) == nil {
		return fmt.Errorf("status %d is not documented (a success must be listed, not left to \"default\")", tw.status)
	}
	resp := op.Responses.Status(tw.status)
	if resp == nil {
		resp = op.Responses.Default()
	}
	if resp == nil || resp.Value == nil {
		return fmt.Errorf("status %d is not documented", tw.status)
	}
	ct := tw.Header().Get("Content-Type")
	if len(resp.Value.Content) == 0 {
		if tw.buf.Len() > 0 {
			return fmt.Errorf("the document says no body, got %d bytes of %q", tw.buf.Len(), ct)
		}
		return nil
	}
	media := resp.Value.Content.Get(ct)
	if media == nil {
		return fmt.Errorf("content type %q is not documented for status %d", ct, tw.status)
	}
	if tw.over || media.Schema == nil {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(ct)
	switch {
	case mt == "application/jsonl" || mt == "application/x-ndjson":
		return checkLines(route.Spec, media.Schema.Value, tw.buf.Bytes())
	case mt != "application/json" && mt != "application/problem+json":
		return nil // CSV, text, downloads: the content type is what is documented
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
		Status: tw.status, Header: tw.Header(),
		Options: &openapi3filter.Options{MultiError: true},
	}
	in.SetBodyBytes(tw.buf.Bytes())
	return openapi3filter.ValidateResponse(context.WithoutCancel(r.Context()), in)
}

// checkLines validates each line of a JSON Lines or NDJSON body.
func checkLines(doc *openapi3.T, schema *openapi3.Schema, body []byte) error {
	var opts []openapi3.SchemaValidationOption
	if doc.IsOpenAPI31OrLater() {
		opts = append(opts, openapi3.EnableJSONSchema2020())
	}
	opts = append(opts, openapi3.VisitAsResponse(), openapi3.MultiErrors())
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, maxCheckedBody)
	var errs []error
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var v any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			errs = append(errs, fmt.Errorf("line %d: not JSON: %w", n, err))
			continue
		}
		if err := schema.VisitJSON(v, opts...); err != nil {
			errs = append(errs, fmt.Errorf("line %d (%.200s): %w", n, sc.Bytes(), err))
		}
	}
	return errors.Join(errs...)
}

// teeWriter passes a response through and keeps a copy of its body.
type teeWriter struct {
	http.ResponseWriter
	status   int
	wrote    bool
	buf      bytes.Buffer
	over     bool // the body passed maxCheckedBody
	hijacked bool
}

func (w *teeWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *teeWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	if !w.over {
		if w.buf.Len()+len(p) > maxCheckedBody {
			w.over = true
			w.buf.Reset()
		} else {
			w.buf.Write(p)
		}
	}
	return w.ResponseWriter.Write(p)
}

// Flush keeps streams (NDJSON, Server-Sent Events) streaming.
func (w *teeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack lets WebSocket upgrades through; they are not checked.
func (w *teeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("hijack: the server's response writer cannot")
	}
	w.hijacked = true
	return h.Hijack()
}

// Unwrap serves http.ResponseController.
func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
