package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestSecrets drives the secrets API and pages as admins, a developer and
// another tenant, and checks that no value ever comes back, in any answer,
// page or audit event, and that another tenant's secret is not found.
func TestSecrets(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) { testSecrets(t, d.DB) })
	}
}

type secretJSON struct {
	Name      string   `json:"name"`
	State     string   `json:"state"`
	Hosts     []string `json:"hosts"`
	CreatedBy string   `json:"created_by"`
	Inject    []string `json:"inject"`
}

func testSecrets(t *testing.T, db *gorm.DB) {
	env := webtest.New(t, webtest.Options{DB: db})
	a := env.TenantNamed(t, "alpha-sec", "Alpha")
	b := env.TenantNamed(t, "bravo-sec", "Bravo")
	env.Member(t, a, "admin@alpha-sec.test", tenants.RoleAdmin)
	env.Member(t, a, "dev@alpha-sec.test", tenants.RoleDeveloper)
	admin := env.Login(t, "admin@alpha-sec.test")
	dev := env.Login(t, "dev@alpha-sec.test")
	adminTok := env.WithToken(env.Token(t, a, tenants.RoleAdmin))
	devTok := env.WithToken(env.Token(t, a, tenants.RoleDeveloper))
	bTok := env.WithToken(env.Token(t, b, tenants.RoleAdmin))

	const apiValue = "ghp_apiValue_S3cr3t_0123456789"
	const formValue = "form-Value-S3cr3t-9876543210"
	const badValue = "bad-Form-Value-S3cr3t-5555"
	var seen []string // every answer body, searched for values at the end

	var created secretJSON
	s, body := adminTok.JSON(t, http.MethodPost, "/api/v1/secrets",
		map[string]any{"name": "GH_TOKEN", "value": apiValue, "hosts": []string{"api.github.com"}, "ttl": "24h"}, &created)
	seen = append(seen, body)
	if s != http.StatusCreated || created.Name != "GH_TOKEN" || created.State != "active" || fmt.Sprint(created.Hosts) != "[api.github.com]" {
		t.Fatalf("Got(POST /api/v1/secrets) = %d %s; want 201 with the secret", s, body)
	}

	t.Run("bad input", func(t *testing.T) {
		tests := []struct {
			name string
			in   any
			want int
			text string
		}{
			{"duplicate", map[string]any{"name": "GH_TOKEN", "value": "x", "hosts": []string{"a.example.com"}}, http.StatusConflict, ""},
			{"bad name", map[string]any{"name": "gh token", "value": "x", "hosts": []string{"a.example.com"}}, http.StatusUnprocessableEntity, "name"},
			{"bad host", map[string]any{"name": "X_TOKEN", "value": "x", "hosts": []string{"https://a.example.com/"}}, http.StatusUnprocessableEntity, "hosts"},
			{"no hosts", map[string]any{"name": "X_TOKEN", "value": "x"}, http.StatusUnprocessableEntity, "hosts"},
			{"unknown field", map[string]any{"name": "X_TOKEN", "value": "x", "hosts": []string{"a.example.com"}, "scope": "all"}, http.StatusBadRequest, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				before := env.Counts(t)
				s, body := adminTok.JSON(t, http.MethodPost, "/api/v1/secrets", tt.in, nil)
				if s != tt.want || !strings.Contains(body, tt.text) {
					t.Errorf("Got(POST %v) = %d %s; want %d naming %q", tt.in, s, body, tt.want, tt.text)
				}
				env.Unchanged(t, before)
			})
		}
	})

	t.Run("roles", func(t *testing.T) {
		var list struct{ Secrets []secretJSON }
		s, body := devTok.JSON(t, http.MethodGet, "/api/v1/secrets", nil, &list)
		seen = append(seen, body)
		if s != http.StatusOK || len(list.Secrets) != 1 || list.Secrets[0].Name != "GH_TOKEN" || len(list.Secrets[0].Hosts) != 0 {
			t.Errorf("Got(developer GET /api/v1/secrets) = %d %s; want the name only", s, body)
		}
		before := env.Counts(t)
		if s, body := devTok.JSON(t, http.MethodPost, "/api/v1/secrets", map[string]any{"name": "DEV", "value": "v", "hosts": []string{"a.example.com"}}, nil); s != http.StatusForbidden {
			t.Errorf("Got(developer POST) = %d %s; want 403", s, body)
		}
		if s, body := devTok.JSON(t, http.MethodDelete, "/api/v1/secrets/GH_TOKEN", nil, nil); s != http.StatusForbidden {
			t.Errorf("Got(developer DELETE) = %d %s; want 403", s, body)
		}
		env.Unchanged(t, before)

		s, page := dev.GetPage(t, "/settings/secrets")
		seen = append(seen, page)
		if s != http.StatusOK || !strings.Contains(page, "GH_TOKEN") || strings.Contains(page, "api.github.com") || strings.Contains(page, `name="value"`) {
			t.Errorf("Got(developer secrets page) = %d; want the name, no hosts, no form", s)
		}
		s, page = admin.GetPage(t, "/settings/secrets")
		seen = append(seen, page)
		if s != http.StatusOK || !strings.Contains(page, "api.github.com") || !strings.Contains(page, `name="value"`) {
			t.Errorf("Got(admin secrets page) = %d; want hosts and the form", s)
		}
	})

	t.Run("other tenant", func(t *testing.T) {
		before := env.Counts(t)
		if s, body := bTok.JSON(t, http.MethodDelete, "/api/v1/secrets/GH_TOKEN", nil, nil); s != http.StatusNotFound {
			t.Errorf("Got(B DELETE A's secret) = %d %s; want 404", s, body)
		}
		env.Unchanged(t, before)
		var list struct{ Secrets []secretJSON }
		if s, body := bTok.JSON(t, http.MethodGet, "/api/v1/secrets", nil, &list); s != http.StatusOK || len(list.Secrets) != 0 {
			t.Errorf("Got(B GET /api/v1/secrets) = %d %s; want none", s, body)
		}
		if _, ok, err := env.Secrets.ForHost(context.Background(), b.ID, "sb", "api.github.com"); ok || err != nil {
			t.Errorf("Got(ForHost in B) ok = %v, %v; want false", ok, err)
		}
	})

	t.Run("form", func(t *testing.T) {
		before := env.Counts(t)
		s, page, _ := admin.Post(t, "/settings/secrets", url.Values{"name": {"NPM_TOKEN"}, "value": {badValue}, "hosts": {"not a host"}, "ttl": {"7d"}, "inject": {"authorization"}})
		seen = append(seen, page)
		if s != http.StatusUnprocessableEntity || !strings.Contains(page, "must be a domain name") {
			t.Errorf("Got(bad form) = %d; want 422 with the host message", s)
		}
		env.Unchanged(t, before)
		s, page, _ = admin.Post(t, "/settings/secrets", url.Values{"name": {"NPM_TOKEN"}, "value": {badValue}, "hosts": {"registry.npmjs.org"}, "ttl": {"7d"}})
		seen = append(seen, page)
		if s != http.StatusUnprocessableEntity || !strings.Contains(page, "tick at least one place") {
			t.Errorf("Got(form with nowhere ticked) = %d; want 422 asking for a place", s)
		}
		env.Unchanged(t, before)
		s, page, _ = admin.Post(t, "/settings/secrets", url.Values{"name": {"NPM_TOKEN"}, "value": {formValue}, "hosts": {"registry.npmjs.org, *.npmjs.com"}, "ttl": {"7d"},
			"inject": {"authorization", "body"}, "headers": {"npm-otp"}})
		seen = append(seen, page)
		if s != http.StatusOK || !strings.Contains(page, "NPM_TOKEN saved") || !strings.Contains(page, "NPM_TOKEN may go in a URL or request body") {
			t.Errorf("Got(form create) = %d; want 200 saying it is saved, with the echo warning", s)
		}
		if got, err := env.Secrets.Get(context.Background(), a.ID, "NPM_TOKEN"); err != nil || fmt.Sprint(got.Hosts) != "[registry.npmjs.org *.npmjs.com]" ||
			fmt.Sprint(got.Inject) != "[authorization body header:Npm-Otp]" {
			t.Errorf("Got(stored NPM_TOKEN) = %+v, %v; want both hosts, authorization, body and Npm-Otp", got, err)
		}
		// Change where it goes: a bad header is a clear error, nothing written.
		before = env.Counts(t)
		s, page, _ = admin.Post(t, "/settings/secrets/NPM_TOKEN/inject", url.Values{"headers": {"Host"}})
		if s != http.StatusUnprocessableEntity || !strings.Contains(page, "never puts a secret in Host") || !strings.Contains(page, "<details open") {
			t.Errorf("Got(bad inject form) = %d; want 422 naming Host, its form open", s)
		}
		env.Unchanged(t, before)
		s, _, hdr := admin.Post(t, "/settings/secrets/NPM_TOKEN/inject", url.Values{"inject": {"authorization"}})
		if s != http.StatusSeeOther || hdr.Get("Location") != "/settings/secrets" {
			t.Errorf("Got(inject form) = %d %s; want 303 to the page", s, hdr.Get("Location"))
		}
		if got, _ := env.Secrets.Get(context.Background(), a.ID, "NPM_TOKEN"); fmt.Sprint(got.Inject) != "[authorization]" {
			t.Errorf("Got(NPM_TOKEN after the edit).Inject = %v; want [authorization]", got.Inject)
		}
		if s, _, _ := dev.Post(t, "/settings/secrets/NPM_TOKEN/inject", url.Values{"inject": {"body"}}); s != http.StatusForbidden {
			t.Errorf("Got(developer inject form) = %d; want 403", s)
		}
		s, _, hdr = admin.Post(t, "/settings/secrets/NPM_TOKEN/revoke", nil)
		if s != http.StatusSeeOther || hdr.Get("Location") != "/settings/secrets" {
			t.Errorf("Got(form revoke) = %d %s; want 303 to the page", s, hdr.Get("Location"))
		}
		if _, err := env.Secrets.Get(context.Background(), a.ID, "NPM_TOKEN"); err == nil {
			t.Errorf("Got(NPM_TOKEN after revoke) found; want revoked")
		}
	})

	t.Run("inject", func(t *testing.T) {
		var got secretJSON
		if s, body := adminTok.JSON(t, http.MethodPatch, "/api/v1/secrets/GH_TOKEN", map[string]any{"inject": []string{"header:x-api-key", "query"}}, &got); s != http.StatusOK ||
			fmt.Sprint(got.Inject) != "[header:X-Api-Key query]" {
			t.Errorf("Got(PATCH inject) = %d %s; want 200 with the locations", s, body)
		}
		before := env.Counts(t)
		tests := []struct {
			name   string
			client *webtest.Client
			path   string
			in     any
			want   int
			text   string
		}{
			{"bad location", adminTok, "/api/v1/secrets/GH_TOKEN", map[string]any{"inject": []string{"cookie"}}, http.StatusUnprocessableEntity, "inject"},
			{"unknown field", adminTok, "/api/v1/secrets/GH_TOKEN", map[string]any{"inject": []string{"body"}, "hosts": []string{"x.example.com"}}, http.StatusBadRequest, ""},
			{"developer", devTok, "/api/v1/secrets/GH_TOKEN", map[string]any{"inject": []string{"body"}}, http.StatusForbidden, ""},
			{"other tenant", bTok, "/api/v1/secrets/GH_TOKEN", map[string]any{"inject": []string{"body"}}, http.StatusNotFound, ""},
			{"missing", adminTok, "/api/v1/secrets/NOPE", map[string]any{"inject": []string{"body"}}, http.StatusNotFound, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s, body := tt.client.JSON(t, http.MethodPatch, tt.path, tt.in, nil)
				if s != tt.want || !strings.Contains(body, tt.text) {
					t.Errorf("Got(PATCH %v) = %d %s; want %d naming %q", tt.in, s, body, tt.want, tt.text)
				}
			})
		}
		env.Unchanged(t, before)
		var list struct{ Secrets []secretJSON }
		if s, body := devTok.JSON(t, http.MethodGet, "/api/v1/secrets", nil, &list); s != http.StatusOK || len(list.Secrets) == 0 || list.Secrets[0].Inject != nil {
			t.Errorf("Got(developer list) = %d %s; want no locations (admins only)", s, body)
		}
		s, body := adminTok.JSON(t, http.MethodPost, "/api/v1/secrets", map[string]any{"name": "X_TOKEN", "value": "x", "hosts": []string{"a.example.com"}, "inject": []string{"everywhere"}}, nil)
		if s != http.StatusUnprocessableEntity || !strings.Contains(body, "inject") {
			t.Errorf("Got(POST bad inject) = %d %s; want 422 naming inject", s, body)
		}
		env.Unchanged(t, before)
		if n := len(env.Events(t, "secret.updated")); n != 2 {
			t.Errorf("Got(secret.updated events) = %d; want 2 (the API's and the form's)", n)
		}
	})

	t.Run("revoke", func(t *testing.T) {
		if s, body := adminTok.JSON(t, http.MethodDelete, "/api/v1/secrets/GH_TOKEN", nil, nil); s != http.StatusNoContent {
			t.Fatalf("Got(DELETE) = %d %s; want 204", s, body)
		}
		if _, ok, err := env.Secrets.ForHost(context.Background(), a.ID, "sb", "api.github.com"); ok || err != nil {
			t.Errorf("Got(ForHost after revoke) ok = %v, %v; want false", ok, err)
		}
		if s, body := adminTok.JSON(t, http.MethodDelete, "/api/v1/secrets/GH_TOKEN", nil, nil); s != http.StatusNotFound {
			t.Errorf("Got(DELETE again) = %d %s; want 404", s, body)
		}
	})

	t.Run("values nowhere", func(t *testing.T) {
		for _, v := range []string{apiValue, formValue, badValue} {
			for i, b := range seen {
				if strings.Contains(b, v) {
					t.Errorf("Got(answer %d) contains a secret value", i)
				}
			}
			var n int64
			env.DB.Raw("SELECT count(*) FROM audit_events WHERE details LIKE ?", "%"+v[5:20]+"%").Scan(&n)
			if n != 0 {
				t.Errorf("Got(audit events holding a value) = %d; want 0", n)
			}
			env.DB.Raw("SELECT count(*) FROM secrets WHERE ciphertext LIKE ?", "%"+v[5:20]+"%").Scan(&n)
			if n != 0 {
				t.Errorf("Got(secrets rows holding a value in clear) = %d; want 0", n)
			}
		}
		if n := len(env.Events(t, "secret.created")); n != 2 {
			t.Errorf("Got(secret.created events) = %d; want 2", n)
		}
	})
}
