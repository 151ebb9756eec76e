package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/web/webtest"
)

// overLimit is one byte more than the server's 1 MiB body limit.
const overLimit = 1<<20 + 1

// bigJSON is a syntactically valid JSON object of n bytes or more.
func bigJSON(n int) string {
	return `{"email":"` + strings.Repeat("a", n) + `@acme.test","role":"developer"}`
}

// unsized hides a body's length, so the request goes out chunked and only
// reading it can find it too large.
type unsized struct{ io.Reader }

// TestBadInput: malformed, oversized and invalid requests are answered
// with the right problem and write nothing at all.
func TestBadInput(t *testing.T) {
	env := webtest.New(t, webtest.Options{Operators: []string{"operator@platform.test"}})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "admin@acme-corp.test", tenants.RoleAdmin)
	admin := env.Login(t, "admin@acme-corp.test")
	operator := env.Login(t, "operator@platform.test")
	token := env.WithToken(env.Token(t, acme, tenants.RoleAdmin))

	t.Run("api", func(t *testing.T) {
		tests := []struct {
			name        string
			client      *webtest.Client
			method      string
			path        string
			contentType string
			body        io.Reader
			status      int
			problemType string
			field, rule string
		}{
			{name: "oversized, with length", client: token, method: "POST", path: "/api/v1/members",
				body: strings.NewReader(bigJSON(overLimit)), status: 413, problemType: "too-large"},
			{name: "oversized, chunked", client: token, method: "POST", path: "/api/v1/members",
				body: unsized{strings.NewReader(bigJSON(overLimit))}, status: 413, problemType: "too-large"},
			{name: "oversized, session", client: admin, method: "POST", path: "/api/v1/tokens",
				body: strings.NewReader(`{"name":"` + strings.Repeat("n", overLimit) + `"}`), status: 413, problemType: "too-large"},
			{name: "oversized tenant, operator", client: operator, method: "POST", path: "/api/v1/tenants",
				body: unsized{strings.NewReader(`{"slug":"` + strings.Repeat("s", overLimit) + `"}`)}, status: 413, problemType: "too-large"},
			{name: "syntax error", client: token, method: "POST", path: "/api/v1/members",
				body: strings.NewReader(`{"email": "x@acme.test",`), status: 400, problemType: "malformed", field: "body"},
			{name: "not JSON at all", client: token, method: "POST", path: "/api/v1/tokens",
				body: strings.NewReader(`name=ci`), status: 400, problemType: "malformed", field: "body"},
			{name: "wrong type", client: token, method: "POST", path: "/api/v1/members",
				body: strings.NewReader(`{"email": 5, "role": "developer"}`), status: 400, problemType: "malformed", field: "email"},
			{name: "wrong type, PATCH", client: admin, method: "PATCH", path: "/api/v1/members/{member}",
				body: strings.NewReader(`{"role": ["admin"]}`), status: 400, problemType: "malformed", field: "role"},
			{name: "unknown field", client: token, method: "POST", path: "/api/v1/members",
				body: strings.NewReader(`{"email": "x@acme.test", "role": "developer", "superuser": true}`), status: 400, problemType: "malformed", field: "superuser"},
			{name: "trailing data", client: token, method: "POST", path: "/api/v1/members",
				body: strings.NewReader(`{"email": "x@acme.test", "role": "developer"} {"email": "y@acme.test"}`), status: 400, problemType: "malformed"},
			{name: "empty body", client: token, method: "POST", path: "/api/v1/tokens",
				body: strings.NewReader(``), status: 400, problemType: "malformed", field: "body"},
			{name: "not application/json", client: token, method: "POST", path: "/api/v1/members", contentType: "text/plain",
				body: strings.NewReader(`{"email": "x@acme.test", "role": "developer"}`), status: 400, problemType: "malformed", field: "Content-Type"},
			{name: "invalid email", client: token, method: "POST", path: "/api/v1/members",
				body: strings.NewReader(`{"email": "not-an-email", "role": "developer"}`), status: 422, problemType: "invalid", field: "email", rule: "email_format"},
			{name: "invalid email, session", client: admin, method: "POST", path: "/api/v1/members",
				body: strings.NewReader(`{"email": "Name <x@acme.test>", "role": "developer"}`), status: 422, problemType: "invalid", field: "email", rule: "email_format"},
			{name: "invalid role", client: token, method: "POST", path: "/api/v1/members",
				body: strings.NewReader(`{"email": "x@acme.test", "role": "root"}`), status: 422, problemType: "invalid", field: "role", rule: "role"},
			{name: "invalid slug", client: operator, method: "POST", path: "/api/v1/tenants",
				body: strings.NewReader(`{"slug": "Not A Slug!", "name": "Bad"}`), status: 422, problemType: "invalid", field: "slug", rule: "slug_format"},
			{name: "invalid admin email of a new tenant", client: operator, method: "POST", path: "/api/v1/tenants",
				body: strings.NewReader(`{"slug": "fine-slug", "admin_email": "nobody"}`), status: 422, problemType: "invalid", field: "admin_email", rule: "email_format"},
			{name: "invalid ttl", client: token, method: "POST", path: "/api/v1/tokens",
				body: strings.NewReader(`{"name": "ci", "role": "developer", "ttl": "forever"}`), status: 422, problemType: "invalid", field: "ttl", rule: "ttl_format"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				path := tc.path
				if strings.Contains(path, "{member}") {
					path = strings.Replace(path, "{member}", env.Invite(t, acme, "target@acme-corp.test", tenants.RoleDeveloper).ID, 1)
				}
				ct := tc.contentType
				if ct == "" {
					ct = "application/json"
				}
				var hdr []string
				if tc.client.Bearer == "" {
					hdr = []string{"X-CSRF-Token", tc.client.CSRF(t)}
				}
				before := env.Counts(t)
				status, body, h := tc.client.Request(t, tc.method, path, ct, tc.body, hdr...)
				if status != tc.status {
					t.Fatalf("Got(status) = %d; want %d: %.300s", status, tc.status, body)
				}
				p := webtest.Problem(t, h, body)
				if p.Status != tc.status || p.Type != "https://stockade.dev/problems/"+tc.problemType {
					t.Errorf("Got(problem) = %d %s; want %d %s", p.Status, p.Type, tc.status, tc.problemType)
				}
				if p.RequestID == "" || p.RequestID != h.Get("X-Request-Id") {
					t.Errorf("Got(problem request_id) = %q; want the X-Request-Id %q", p.RequestID, h.Get("X-Request-Id"))
				}
				if tc.field != "" {
					if len(p.Errors) != 1 || p.Errors[0].Field != tc.field || (tc.rule != "" && p.Errors[0].Rule != tc.rule) {
						t.Errorf("Got(problem errors) = %+v; want field %q rule %q", p.Errors, tc.field, tc.rule)
					}
				}
				env.Unchanged(t, before)
			})
		}
	})

	if _, err := env.Secrets.Create(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, acme.ID,
		secrets.NewSecret{Name: "TAKEN_NAME", Value: "v", Hosts: []string{"api.example.com"}}); err != nil {
		t.Fatal(err)
	}
	// A form that comes back with its errors answers the status the one
	// error mapper gives its error, as the API does for the same input:
	// 422 for an invalid field, 409 for a conflict shown next to a field.
	t.Run("forms", func(t *testing.T) {
		tests := []struct {
			name     string
			client   *webtest.Client
			path     string
			form     url.Values
			field    string
			contains string
			status   int // 0: 422
		}{
			{name: "invite: invalid email", client: admin, path: "/settings/members",
				form: url.Values{"email": {"not-an-email"}, "role": {"developer"}}, field: "email", contains: "email address"},
			{name: "invite: invalid role", client: admin, path: "/settings/members",
				form: url.Values{"email": {"fine@acme.test"}, "role": {"root"}}, field: "role", contains: "must be one of"},
			{name: "invite: already a member", client: admin, path: "/settings/members",
				form: url.Values{"email": {"admin@acme-corp.test"}, "role": {"developer"}}, field: "email", contains: "already a member", status: 409},
			{name: "token: no name", client: admin, path: "/settings/tokens",
				form: url.Values{"name": {""}, "role": {"developer"}, "ttl": {"30d"}}, field: "name", contains: "required"},
			{name: "token: invalid ttl", client: admin, path: "/settings/tokens",
				form: url.Values{"name": {"ci"}, "role": {"developer"}, "ttl": {"forever"}}, field: "ttl", contains: "duration"},
			{name: "tenant: invalid slug", client: operator, path: "/operator/tenants",
				form: url.Values{"slug": {"Not A Slug!"}, "name": {"Bad"}}, field: "slug", contains: "lowercase"},
			{name: "tenant: taken slug", client: operator, path: "/operator/tenants",
				form: url.Values{"slug": {acme.Slug}}, field: "slug", contains: "taken", status: 409},
			{name: "tenant: invalid admin email", client: operator, path: "/operator/tenants",
				form: url.Values{"slug": {"fine-slug"}, "admin_email": {"nobody"}}, field: "admin_email", contains: "email address"},
			{name: "secret: invalid name", client: admin, path: "/settings/secrets",
				form: url.Values{"name": {"lower case"}, "value": {"v"}, "hosts": {"api.example.com"}, "ttl": {"30d"}, "inject": {secrets.InjectAuthorization}}, field: "name", contains: "A-Z"},
			{name: "secret: taken name", client: admin, path: "/settings/secrets",
				form: url.Values{"name": {"TAKEN_NAME"}, "value": {"v"}, "hosts": {"api.example.com"}, "ttl": {"30d"}, "inject": {secrets.InjectAuthorization}}, field: "name", contains: "revoke it first", status: 409},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				before := env.Counts(t)
				want := tc.status
				if want == 0 {
					want = http.StatusUnprocessableEntity
				}
				status, body, _ := tc.client.Post(t, tc.path, tc.form)
				if status != want {
					t.Fatalf("Got(status) = %d; want %d: %.300s", status, want, body)
				}
				doc := webtest.ParseHTML(t, body)
				msg, ok := doc.FieldError(tc.field)
				if !ok || !strings.Contains(msg, tc.contains) {
					t.Errorf("Got(message next to %s) = %q, %v; want one containing %q", tc.field, msg, ok, tc.contains)
				}
				// What was typed is kept, so the person can fix it.
				if v := tc.form.Get(tc.field); v != "" && tc.field != "role" && tc.field != "ttl" && !strings.Contains(body, `value="`+htmlEscape(v)+`"`) {
					t.Errorf("Got(form) lost the value %q of %s; want it kept", v, tc.field)
				}
				env.Unchanged(t, before)
			})
		}
	})

	t.Run("editors", func(t *testing.T) {
		cur, err := env.Policies.Current(context.Background(), acme.ID)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(cur.Doc)
		if s, body, _ := token.Request(t, http.MethodPut, "/api/v1/workflows/stale-wf", "application/yaml",
			strings.NewReader("name: stale-wf\ntriggers:\n  - event: manual\nsteps:\n  - name: s\n    run: \"true\"\n")); s != http.StatusOK {
			t.Fatalf("Got(PUT workflow) = %d %s; want 200", s, body)
		}
		tests := []struct {
			name     string
			path     string
			form     url.Values
			status   int
			contains string
		}{
			{"policy editor: stale version", "/policy/raw", url.Values{"doc": {string(raw)}, "base_version": {strconv.Itoa(cur.Version + 7)},
				"op": {"save"}, "reason": {"stale"}}, 409, "reload"},
			{"policy editor: not JSON", "/policy/raw", url.Values{"doc": {"{"}, "base_version": {strconv.Itoa(cur.Version)},
				"op": {"save"}, "reason": {"broken"}}, 422, ""},
			// Before the one mapper this page answered 422 whatever the error.
			{"workflow editor: stale version", "/workflows", url.Values{"name": {"stale-wf"}, "base_version": {"0"},
				"source": {"name: stale-wf\ntriggers:\n  - event: manual\nsteps:\n  - name: s\n    run: \"false\"\n"}}, 409, "conflict"},
			{"workflow editor: invalid", "/workflows", url.Values{"name": {""}, "base_version": {"0"},
				"source": {"name: Not A Name\nsteps: []\n"}}, 422, ""},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				before := env.Counts(t)
				status, body, _ := admin.Post(t, tc.path, tc.form)
				if status != tc.status || !strings.Contains(body, tc.contains) {
					t.Errorf("Got(POST %s) = %d; want %d with %q: %.300s", tc.path, status, tc.status, tc.contains, body)
				}
				env.Unchanged(t, before)
			})
		}
	})

	t.Run("form: oversized", func(t *testing.T) {
		before := env.Counts(t)
		form := url.Values{"_csrf": {admin.CSRF(t)}, "email": {strings.Repeat("a", overLimit) + "@acme.test"}, "role": {"developer"}}
		status, body, _ := admin.Request(t, http.MethodPost, "/settings/members", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
		if status != http.StatusRequestEntityTooLarge {
			t.Errorf("Got(status) = %d; want 413: %.200s", status, body)
		}
		env.Unchanged(t, before)
	})

	t.Run("csrf", func(t *testing.T) {
		valid := url.Values{"email": {"csrf-victim@acme.test"}, "role": {"admin"}}
		_, target := env.NewToken(t, acme, "csrf-target", tenants.RoleDeveloper)
		tests := []struct {
			name string
			send func(t *testing.T) (int, string, http.Header)
		}{
			{"form without token", func(t *testing.T) (int, string, http.Header) {
				return admin.Request(t, http.MethodPost, "/settings/members", "application/x-www-form-urlencoded", strings.NewReader(valid.Encode()))
			}},
			{"form with a wrong token", func(t *testing.T) (int, string, http.Header) {
				f := url.Values{"_csrf": {"forged-token-value"}}
				for k, v := range valid {
					f[k] = v
				}
				return admin.Request(t, http.MethodPost, "/settings/members", "application/x-www-form-urlencoded", strings.NewReader(f.Encode()))
			}},
			{"cross-site form, even with the token", func(t *testing.T) (int, string, http.Header) {
				f := url.Values{"_csrf": {admin.CSRF(t)}}
				for k, v := range valid {
					f[k] = v
				}
				return admin.Request(t, http.MethodPost, "/settings/members", "application/x-www-form-urlencoded", strings.NewReader(f.Encode()),
					"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
			}},
			{"same-site form without token", func(t *testing.T) (int, string, http.Header) {
				return admin.Request(t, http.MethodPost, "/settings/members", "application/x-www-form-urlencoded", strings.NewReader(valid.Encode()),
					"Sec-Fetch-Site", "same-site")
			}},
			{"logout without token", func(t *testing.T) (int, string, http.Header) {
				return admin.Request(t, http.MethodPost, "/logout", "application/x-www-form-urlencoded", nil)
			}},
			{"operator form without token", func(t *testing.T) (int, string, http.Header) {
				return operator.Request(t, http.MethodPost, "/operator/tenants", "application/x-www-form-urlencoded", strings.NewReader("slug=csrf-tenant"))
			}},
			{"api with session, no header", func(t *testing.T) (int, string, http.Header) {
				return admin.Request(t, http.MethodPost, "/api/v1/members", "application/json", strings.NewReader(`{"email":"csrf-victim@acme.test","role":"admin"}`))
			}},
			{"api delete with session, no header", func(t *testing.T) (int, string, http.Header) {
				return admin.Request(t, http.MethodDelete, "/api/v1/tokens/"+target.ID, "", nil)
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				admin.CSRF(t) // the browser holds a CSRF cookie; the attacker's request lacks the token
				before := env.Counts(t)
				status, body, _ := tc.send(t)
				if status != http.StatusForbidden {
					t.Errorf("Got(status) = %d; want 403: %.200s", status, body)
				}
				if !strings.Contains(strings.ToLower(body), "csrf") {
					t.Errorf("Got(body) = %.200q; want it to name the CSRF token", body)
				}
				env.Unchanged(t, before)
			})
		}
		if got := env.APIToken(t, target.ID); got.RevokedAt != nil {
			t.Errorf("Got(token revoked by a forged DELETE) = %v; want not revoked", got.RevokedAt)
		}
		if s, _ := me(t, admin); s != http.StatusOK {
			t.Errorf("Got(session after the forged logout) = %d; want still signed in", s)
		}
	})
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}
