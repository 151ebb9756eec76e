package webtest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stockade-dev/stockade/web"
	"github.com/stockade-dev/stockade/web/webtest"
)

// recordingTB keeps what the check reports instead of failing.
type recordingTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestOpenAPIChecked: the check passes answers as documented and reports
// each kind of mismatch, naming the route, the status and what is wrong.
func TestOpenAPIChecked(t *testing.T) {
	doc := servedDocument(t)
	answer := func(status int, ctype, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ctype)
			w.WriteHeader(status)
			io.WriteString(w, body)
		}
	}
	const problem = `{"type":"about:blank","title":"Not Found","status":404,"detail":"no such sandbox"}`
	for _, tc := range []struct {
		name, method, path string
		handler            http.HandlerFunc
		want               string // in the report; "" for none
	}{
		{"as documented", "GET", "/healthz", answer(200, "application/json", `{"status":"ok"}`), ""},
		{"a problem as documented", "GET", "/api/v1/sandboxes/abc", answer(404, "application/problem+json", problem), ""},
		{"no body as documented", "DELETE", "/api/v1/tokens/abc", answer(204, "", ""), ""},
		{"an ndjson stream as documented", "POST", "/api/v1/sandboxes/abc/exec?stream=1",
			answer(200, "application/x-ndjson", `{"type":"started","exec_id":"x","pid":3}`+"\n"+`{"type":"exit","exec_id":"x","exit_code":0}`+"\n"), ""},
		{"a page is no API operation", "GET", "/sandboxes", answer(200, "text/html", "<html></html>"), ""},
		{"wrong type", "GET", "/healthz", answer(200, "application/json", `{"status":5}`), `GET /healthz (/healthz) answered 200 application/json: response body doesn't match`},
		{"required field missing", "GET", "/healthz", answer(200, "application/json", `{}`), "missing"},
		{"success not documented", "GET", "/healthz", answer(201, "application/json", `{"status":"ok"}`), "status 201 is not documented"},
		{"content type not documented", "GET", "/healthz", answer(200, "text/plain", "ok"), `content type "text/plain" is not documented`},
		{"bad problem document", "GET", "/api/v1/sandboxes/abc", answer(404, "application/problem+json", `{"title":"x"}`), "answered 404"},
		{"bad stream line", "POST", "/api/v1/sandboxes/abc/exec?stream=1",
			answer(200, "application/x-ndjson", `{"type":"started"}`+"\n"+`{"type":"bogus"}`+"\n"), "line 2"},
		{"body where none is documented", "DELETE", "/api/v1/tokens/abc", answer(204, "application/json", `{}`), "says no body"},
		{"API path not in the document", "GET", "/api/v1/nothing", answer(200, "application/json", `{}`), "has no such operation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("GET /api/v1/openapi.json", answer(200, "application/json", string(doc)))
			mux.Handle("/", tc.handler)
			rec := &recordingTB{TB: t}
			srv := httptest.NewServer(webtest.OpenAPIChecked(rec, mux))
			defer srv.Close()
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			srv.Close() // the check has run when the handler returned
			got := strings.Join(rec.errs, "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("Got(report) = %s; want none", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("Got(report) = %q; want it to contain %q", got, tc.want)
			}
		})
	}
}

// BenchmarkOpenAPIChecked measures what the check adds to one answer (a
// list of 50 secrets): run with and without it, -bench OpenAPIChecked.
func BenchmarkOpenAPIChecked(b *testing.B) {
	doc := servedDocument(b)
	var list strings.Builder
	list.WriteString(`{"secrets":[`)
	for i := range 50 {
		if i > 0 {
			list.WriteString(",")
		}
		fmt.Fprintf(&list, `{"id":"s%d","name":"SECRET_%d","hosts":["api.example.com"],"inject":["authorization"],"created_by":"x","created_at":"2026-01-01T00:00:00Z","expires_at":null,"state":"active"}`, i, i)
	}
	list.WriteString(`]}`)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/openapi.json", func(w http.ResponseWriter, r *http.Request) { w.Write(doc) })
	mux.HandleFunc("GET /api/v1/secrets", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, list.String())
	})
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"plain", mux}, {"checked", webtest.OpenAPIChecked(b, mux)}} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/api/v1/secrets", nil)
			for b.Loop() {
				bc.h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}

// servedDocument is the OpenAPI document an app of the harness serves.
func servedDocument(tb testing.TB) []byte {
	tb.Helper()
	env := webtest.New(tb, webtest.Options{})
	d, err := web.OpenAPIDocument(env.App.RouteTable())
	if err != nil {
		tb.Fatal(err)
	}
	doc, err := json.Marshal(d)
	if err != nil {
		tb.Fatal(err)
	}
	return doc
}
