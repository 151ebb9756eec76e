package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/tenants"
)

// The OpenAPI 3.1 document of the JSON API is generated from the route
// table (each API route's Doc: summary, parameters, body and answers, as Go
// types of handlers/api) and from those types by reflection: a field's JSON
// name and omitempty give the property and whether it is required, its tags
// (doc, enum, format, minimum ...; see handlers/api) the rest. Nothing of
// it is written by hand, so the handlers, the CLI and the document share
// one set of types. openapi_test.go validates it with kin-openapi.

// Doc documents an API route: its operation in the OpenAPI document.
type Doc struct {
	Summary string
	Tag     string
	// Params is a struct of the route's parameters (path, query and header
	// tags); path parameters it leaves out are documented as strings.
	Params any
	// Body is the request body, nil for none.
	Body *Body
	// Answers are the successful answers; the problem answers every route
	// may give (401, 403, 404, 400, 422, default) are added.
	Answers []Answer
	// Errors are further problem answers of this route: status -> when.
	Errors map[int]string
}

// Body is a request body.
type Body struct {
	Optional bool
	Content  []Content
}

// Answer is one answer of an operation.
type Answer struct {
	Status  int
	Desc    string
	Content []Content // none: no body
}

// Content is one media type of a body or answer: Type is a value of the Go
// type it holds (api.Sandbox{}), or Schema one written out (raw bytes, a
// stream of lines).
type Content struct {
	Media  string
	Type   any
	Schema *openapi3.Schema
}

// jsonIn is a required JSON request body of type v.
func jsonIn(v any) *Body {
	return &Body{Content: []Content{{Media: echo.MIMEApplicationJSON, Type: v}}}
}

// answer is a JSON answer of type v.
func answer(status int, desc string, v any) Answer {
	return Answer{Status: status, Desc: desc, Content: []Content{{Media: echo.MIMEApplicationJSON, Type: v}}}
}

// ok is a 200 JSON answer of type v.
func ok(desc string, v any) []Answer { return []Answer{answer(http.StatusOK, desc, v)} }

// done is a 204 answer.
var done = []Answer{{Status: http.StatusNoContent, Desc: "Done"}}

// textSchema is a schema of a text (or bytes) body.
func textSchema(desc, media string) *openapi3.Schema {
	return &openapi3.Schema{Type: &openapi3.Types{openapi3.TypeString}, Description: desc, ContentMediaType: media}
}

// docInfo is the document's head.
const docInfo = "Run AI agents on untrusted code: each tenant in its own VMs, every task in a sandbox nested inside one. " +
	"Authenticate with an API token (Authorization: Bearer stk_...), made on the API tokens page; a token acts in its tenant with its role. " +
	"Errors are RFC 9457 problem documents. Objects of another tenant are not found (404)."

// OpenAPIDocument builds the OpenAPI 3.1 document of the API routes of
// routes.
func OpenAPIDocument(routes []Route) (*openapi3.T, error) {
	g := &schemaGen{components: openapi3.Schemas{}}
	problem := g.schema(reflect.TypeFor[api.Problem]())
	paths := openapi3.NewPaths()
	for _, r := range routes {
		if !r.API {
			continue
		}
		if r.Doc == nil {
			return nil, fmt.Errorf("openapi: %s %s: an API route without Doc", r.Method, r.Path)
		}
		op, err := g.operation(r, problem)
		if err != nil {
			return nil, fmt.Errorf("openapi: %s %s: %w", r.Method, r.Path, err)
		}
		p := OpenAPIPath(r.Path)
		item := paths.Value(p)
		if item == nil {
			item = &openapi3.PathItem{}
			paths.Set(p, item)
		}
		item.SetOperation(r.Method, op)
	}
	return &openapi3.T{
		OpenAPI:  "3.1.0",
		Info:     &openapi3.Info{Title: "Stockade API", Version: "1", Description: docInfo},
		Servers:  openapi3.Servers{{URL: "/"}},
		Security: openapi3.SecurityRequirements{{"bearer": []string{}}},
		Paths:    paths,
		Components: &openapi3.Components{
			Schemas: g.components,
			SecuritySchemes: openapi3.SecuritySchemes{"bearer": &openapi3.SecuritySchemeRef{
				Value: &openapi3.SecurityScheme{Type: "http", Scheme: "bearer", Description: "an API token"}}},
		},
	}, nil
}

var pathParam = regexp.MustCompile(`:([A-Za-z_]+)`)

// OpenAPIPath turns a route path into an OpenAPI path: /x/:id -> /x/{id}.
// A trailing /* (the port proxy) is /{path}.
func OpenAPIPath(p string) string {
	return pathParam.ReplaceAllString(strings.Replace(p, "/*", "/{path}", 1), "{$1}")
}

// operation documents route r.
func (g *schemaGen) operation(r Route, problem *openapi3.SchemaRef) (*openapi3.Operation, error) {
	d := r.Doc
	op := &openapi3.Operation{Summary: d.Summary, Tags: []string{d.Tag}, OperationID: operationID(r.Method, r.Path)}
	switch r.Perm {
	case tenants.PermPublic:
		op.Description = "Public: no token needed."
	case tenants.PermSignedIn:
		op.Description = "Any caller signed in or with a token."
	case tenants.PermOperator:
		op.Description = "Platform operators only."
	default:
		op.Description = "Needs the " + string(r.Perm) + " permission."
	}
	for _, c := range r.Also {
		op.Description += " " + c.Doc + " needs " + string(c.Perm) + " as well."
	}
	params, err := g.parameters(r.Path, d.Params)
	if err != nil {
		return nil, err
	}
	op.Parameters = params
	if d.Body != nil {
		content, err := g.content(d.Body.Content, true)
		if err != nil {
			return nil, err
		}
		op.RequestBody = &openapi3.RequestBodyRef{Value: &openapi3.RequestBody{Required: !d.Body.Optional, Content: content}}
	}
	resp := openapi3.NewResponses()
	for _, a := range d.Answers {
		content, err := g.content(a.Content, false)
		if err != nil {
			return nil, err
		}
		desc := a.Desc
		resp.Set(strconv.Itoa(a.Status), &openapi3.ResponseRef{Value: &openapi3.Response{Description: &desc, Content: content}})
	}
	problems := map[int]string{}
	if r.Perm != tenants.PermPublic {
		problems[http.StatusUnauthorized] = "No valid API token or session"
		problems[http.StatusForbidden] = "The caller's role lacks the permission this operation requires"
	}
	if strings.Contains(r.Path, ":") {
		problems[http.StatusNotFound] = "No such object in the caller's tenant (another tenant's objects are not found either)"
	}
	if d.Body != nil {
		problems[http.StatusBadRequest] = "The body is not what is expected (the field at fault is named)"
		problems[http.StatusUnprocessableEntity] = "A field is invalid (named in errors[].field)"
	}
	for status, why := range d.Errors {
		problems[status] = why
	}
	pc := openapi3.Content{api.MediaProblem: &openapi3.MediaType{Schema: problem}}
	for status, why := range problems {
		resp.Set(strconv.Itoa(status), &openapi3.ResponseRef{Value: &openapi3.Response{Description: &why, Content: pc}})
	}
	anyErr := "An error, as an RFC 9457 problem document"
	resp.Set("default", &openapi3.ResponseRef{Value: &openapi3.Response{Description: &anyErr, Content: pc}})
	op.Responses = resp
	if r.Perm == tenants.PermPublic {
		op.Security = &openapi3.SecurityRequirements{}
	}
	return op, nil
}

func operationID(method, path string) string {
	return strings.ToLower(method) + strings.NewReplacer("/api/v1/", "_", "/", "_", ":", "", "-", "_", ".", "_", "*", "path").Replace(path)
}

// content documents the media types of a body or an answer. Request
// bodies are closed (the server refuses unknown fields).
func (g *schemaGen) content(cs []Content, request bool) (openapi3.Content, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	out := openapi3.Content{}
	for _, c := range cs {
		var s *openapi3.SchemaRef
		switch {
		case c.Schema != nil:
			s = &openapi3.SchemaRef{Value: c.Schema}
		case c.Type != nil:
			t := reflect.TypeOf(c.Type)
			s = g.schema(t)
			if request {
				g.close(t)
			}
		default:
			return nil, fmt.Errorf("content %s: neither Type nor Schema", c.Media)
		}
		out[c.Media] = &openapi3.MediaType{Schema: s}
	}
	return out, nil
}

// parameters documents the path parameters of path and the fields of
// params (a struct with path, query and header tags).
func (g *schemaGen) parameters(path string, params any) (openapi3.Parameters, error) {
	var out openapi3.Parameters
	declared := map[string]bool{}
	if params != nil {
		t := reflect.TypeOf(params)
		if t.Kind() != reflect.Struct {
			return nil, fmt.Errorf("params %s: not a struct", t)
		}
		for _, f := range reflect.VisibleFields(t) {
			if f.Anonymous {
				continue // its fields are visible too
			}
			p := &openapi3.Parameter{Description: f.Tag.Get("doc")}
			switch {
			case f.Tag.Get("path") != "":
				p.In, p.Name, p.Required = openapi3.ParameterInPath, f.Tag.Get("path"), true
				if !strings.Contains(path, ":"+p.Name) {
					return nil, fmt.Errorf("params: path parameter %s is not in the path", p.Name)
				}
				declared[p.Name] = true
			case f.Tag.Get("query") != "":
				p.In, p.Name, p.Required = openapi3.ParameterInQuery, f.Tag.Get("query"), f.Tag.Get("required") == "true"
			case f.Tag.Get("header") != "":
				p.In, p.Name = openapi3.ParameterInHeader, f.Tag.Get("header")
			default:
				return nil, fmt.Errorf("params: field %s has no path, query or header tag", f.Name)
			}
			s := g.schema(f.Type)
			g.constrain(s.Value, f.Tag)
			s.Value.Description = "" // the parameter's
			p.Schema = s
			out = append(out, &openapi3.ParameterRef{Value: p})
		}
	}
	var missing []*openapi3.ParameterRef
	for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
		if !declared[m[1]] {
			missing = append(missing, &openapi3.ParameterRef{Value: &openapi3.Parameter{In: openapi3.ParameterInPath, Name: m[1], Required: true,
				Description: "the object's id", Schema: &openapi3.SchemaRef{Value: &openapi3.Schema{Type: &openapi3.Types{openapi3.TypeString}}}}})
		}
	}
	if strings.HasSuffix(path, "/*") {
		missing = append(missing, &openapi3.ParameterRef{Value: &openapi3.Parameter{In: openapi3.ParameterInPath, Name: "path", Required: true,
			Description: "the rest of the path, passed on", Schema: &openapi3.SchemaRef{Value: &openapi3.Schema{Type: &openapi3.Types{openapi3.TypeString}}}}})
	}
	return append(missing, out...), nil
}

// schemaGen makes JSON Schemas (draft 2020-12, as OpenAPI 3.1 has them) of
// Go types. Named structs of handlers/api become components.
type schemaGen struct {
	components openapi3.Schemas
}

var (
	apiPkg      = reflect.TypeFor[api.Problem]().PkgPath()
	numberType  = reflect.TypeFor[json.Number]()
	rawJSONType = reflect.TypeFor[json.RawMessage]()
)

// schema is the schema of t: a $ref for an api struct, else inline.
func (g *schemaGen) schema(t reflect.Type) *openapi3.SchemaRef {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct && t.PkgPath() == apiPkg && t.Name() != "" {
		if _, ok := g.components[t.Name()]; !ok {
			g.components[t.Name()] = nil // cycles end here
			g.components[t.Name()] = &openapi3.SchemaRef{Value: g.object(t)}
		}
		return &openapi3.SchemaRef{Ref: "#/components/schemas/" + t.Name()}
	}
	return &openapi3.SchemaRef{Value: g.inline(t)}
}

func types(ts ...string) *openapi3.Types { t := openapi3.Types(ts); return &t }

func (g *schemaGen) inline(t reflect.Type) *openapi3.Schema {
	switch {
	case t == numberType:
		return &openapi3.Schema{Type: types(openapi3.TypeNumber)}
	case t == rawJSONType:
		return &openapi3.Schema{}
	}
	switch t.Kind() {
	case reflect.String:
		return &openapi3.Schema{Type: types(openapi3.TypeString)}
	case reflect.Bool:
		return &openapi3.Schema{Type: types(openapi3.TypeBoolean)}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &openapi3.Schema{Type: types(openapi3.TypeInteger)}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		zero := 0.0
		s := &openapi3.Schema{Type: types(openapi3.TypeInteger), Min: &zero}
		if t.Kind() == reflect.Uint16 {
			m := 65535.0
			s.Max = &m
		}
		return s
	case reflect.Float32, reflect.Float64:
		return &openapi3.Schema{Type: types(openapi3.TypeNumber)}
	case reflect.Slice, reflect.Array:
		return &openapi3.Schema{Type: types(openapi3.TypeArray), Items: g.schema(t.Elem())}
	case reflect.Map:
		return &openapi3.Schema{Type: types(openapi3.TypeObject), AdditionalProperties: openapi3.AdditionalProperties{Schema: g.schema(t.Elem())}}
	case reflect.Struct:
		return g.object(t)
	}
	return &openapi3.Schema{} // interfaces: any JSON value
}

// object is the schema of struct t, its embedded structs' fields inlined
// as encoding/json does.
func (g *schemaGen) object(t reflect.Type) *openapi3.Schema {
	s := &openapi3.Schema{Type: types(openapi3.TypeObject), Properties: openapi3.Schemas{}}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || (f.Anonymous && f.Type.Kind() == reflect.Struct) {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omitempty := slices.Contains(strings.Split(opts, ","), "omitempty")
		if !omitempty {
			s.Required = append(s.Required, name)
		}
		s.Properties[name] = g.field(f, omitempty)
	}
	if len(s.Properties) == 0 {
		s.Properties = nil
	}
	return s
}

// field is the schema of a struct field: its type's, with its tags, and
// null allowed where encoding/json may send it.
func (g *schemaGen) field(f reflect.StructField, omitempty bool) *openapi3.SchemaRef {
	t := f.Type
	nullable := false
	switch t.Kind() {
	case reflect.Pointer:
		nullable = !omitempty
	case reflect.Slice, reflect.Map:
		nullable = !omitempty && f.Tag.Get("nonnull") != "true" && t != rawJSONType
	}
	s := g.schema(t)
	if s.Ref != "" {
		// A component: described, or made nullable, around its $ref.
		if !nullable && f.Tag.Get("doc") == "" {
			return s
		}
		w := &openapi3.Schema{Description: f.Tag.Get("doc")}
		if nullable {
			w.AnyOf = openapi3.SchemaRefs{s, {Value: &openapi3.Schema{Type: types(openapi3.TypeNull)}}}
		} else {
			w.AllOf = openapi3.SchemaRefs{s}
		}
		return &openapi3.SchemaRef{Value: w}
	}
	g.constrain(s.Value, f.Tag)
	if nullable && s.Value.Type != nil {
		*s.Value.Type = append(*s.Value.Type, openapi3.TypeNull)
		if s.Value.Enum != nil {
			s.Value.Enum = append(s.Value.Enum, nil)
		}
	}
	return s
}

// constrain applies a field's tags to its (inline) schema s.
func (g *schemaGen) constrain(s *openapi3.Schema, tag reflect.StructTag) {
	s.Description = tag.Get("doc")
	s.Format = tag.Get("format")
	s.Pattern = tag.Get("pattern")
	if e := tag.Get("enum"); e != "" {
		target := s
		if s.Items != nil && s.Items.Value != nil {
			target = s.Items.Value // a list of enumerated strings
		}
		for _, v := range strings.Split(e, ",") {
			target.Enum = append(target.Enum, v)
		}
	}
	num := func(name string) *float64 {
		v, err := strconv.ParseFloat(tag.Get(name), 64)
		if err != nil {
			return nil
		}
		return &v
	}
	if v := num("minimum"); v != nil {
		s.Min = v
	}
	if v := num("maximum"); v != nil {
		s.Max = v
	}
	if v := num("minItems"); v != nil {
		s.MinItems = uint64(*v)
	}
	if v := num("maxLength"); v != nil {
		n := uint64(*v)
		s.MaxLength = &n
	}
}

// close marks request type t as taking no other fields.
func (g *schemaGen) close(t reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if c := g.components[t.Name()]; c != nil && c.Value != nil && t.PkgPath() == apiPkg {
		no := false
		c.Value.AdditionalProperties = openapi3.AdditionalProperties{Has: &no}
	}
}

// openAPIHandler serves the document doc builds: GET /api/v1/openapi.json.
func openAPIHandler(doc func() ([]byte, error)) echo.HandlerFunc {
	return func(c echo.Context) error {
		b, err := doc()
		if err != nil {
			return err
		}
		c.Response().Header().Set("Cache-Control", "no-cache")
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b)
	}
}
