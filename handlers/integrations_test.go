package handlers_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/integrations"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestIntegrationsAPI: admins create, disable, test and delete outgoing
// webhook endpoints; managers read; developers get 403; another tenant's
// endpoint is not found; a refused URL is a 422 naming the field and writes
// nothing; every change is audited.
func TestIntegrationsAPI(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme, other := env.Tenant(t, "acme"), env.Tenant(t, "other")
	admin := env.WithToken(env.Token(t, acme, tenants.RoleAdmin))
	manager := env.WithToken(env.Token(t, acme, tenants.RoleManager))
	dev := env.WithToken(env.Token(t, acme, tenants.RoleDeveloper))
	stranger := env.WithToken(env.Token(t, other, tenants.RoleAdmin))

	body := map[string]any{"url": "https://hooks.example.com/in", "secret_name": "HOOK_KEY", "event_types": []string{"sandbox.destroyed"}}
	if s, b := dev.JSON(t, http.MethodPost, "/api/v1/integrations/webhooks", body, nil); s != http.StatusForbidden {
		t.Errorf("Got(POST as developer) = %d %s; want 403", s, b)
	}
	before := env.Counts(t)
	bad := map[string]any{"url": "https://169.254.169.254/latest", "secret_name": "HOOK_KEY"}
	s, b := admin.JSON(t, http.MethodPost, "/api/v1/integrations/webhooks", bad, nil)
	if s != http.StatusUnprocessableEntity || !strings.Contains(b, `"url"`) {
		t.Errorf("Got(POST metadata address) = %d %s; want 422 naming url", s, b)
	}
	env.Unchanged(t, before)

	var ep struct {
		ID         string   `json:"id"`
		URL        string   `json:"url"`
		EventTypes []string `json:"event_types"`
		Enabled    bool     `json:"enabled"`
	}
	if s, b := admin.JSON(t, http.MethodPost, "/api/v1/integrations/webhooks", body, &ep); s != http.StatusCreated || ep.ID == "" ||
		!ep.Enabled || len(ep.EventTypes) != 1 {
		t.Fatalf("Got(POST) = %d %s; want 201 with an enabled endpoint", s, b)
	}
	var list struct {
		Webhooks []struct {
			ID string `json:"id"`
		} `json:"webhooks"`
	}
	if s, b := manager.JSON(t, http.MethodGet, "/api/v1/integrations/webhooks", nil, &list); s != http.StatusOK || len(list.Webhooks) != 1 {
		t.Errorf("Got(GET as manager) = %d %s; want 200 with 1", s, b)
	}
	if s, b := stranger.JSON(t, http.MethodGet, "/api/v1/integrations/webhooks", nil, &list); s != http.StatusOK || len(list.Webhooks) != 0 {
		t.Errorf("Got(GET from another tenant) = %d %s; want 200 with none", s, b)
	}
	for _, tt := range []struct{ method, path string }{
		{http.MethodPatch, "/api/v1/integrations/webhooks/" + ep.ID},
		{http.MethodPost, "/api/v1/integrations/webhooks/" + ep.ID + "/test"},
		{http.MethodDelete, "/api/v1/integrations/webhooks/" + ep.ID},
	} {
		if s, b := stranger.JSON(t, tt.method, tt.path, map[string]any{"enabled": false}, nil); s != http.StatusNotFound {
			t.Errorf("Got(%s %s from another tenant) = %d %s; want 404", tt.method, tt.path, s, b)
		}
	}
	if s, b := admin.JSON(t, http.MethodPatch, "/api/v1/integrations/webhooks/"+ep.ID, map[string]any{"enabled": false}, &ep); s != http.StatusOK || ep.Enabled {
		t.Errorf("Got(PATCH enabled=false) = %d %s; want 200 disabled", s, b)
	}
	var d struct {
		ID        string `json:"id"`
		State     string `json:"state"`
		EventType string `json:"event_type"`
	}
	if s, b := admin.JSON(t, http.MethodPost, "/api/v1/integrations/webhooks/"+ep.ID+"/test", nil, &d); s != http.StatusAccepted ||
		d.State != integrations.DeliveryPending || d.EventType != integrations.EventTest {
		t.Errorf("Got(POST test) = %d %s; want 202 with a pending webhook.test", s, b)
	}
	var dl struct {
		Deliveries []struct {
			ID string `json:"id"`
		} `json:"deliveries"`
	}
	if s, b := manager.JSON(t, http.MethodGet, "/api/v1/integrations/deliveries?endpoint_id="+ep.ID, nil, &dl); s != http.StatusOK ||
		len(dl.Deliveries) != 1 || dl.Deliveries[0].ID != d.ID {
		t.Errorf("Got(GET deliveries) = %d %s; want the test delivery", s, b)
	}
	if s, b := admin.JSON(t, http.MethodGet, "/api/v1/integrations/deliveries?limit=0", nil, nil); s != http.StatusUnprocessableEntity {
		t.Errorf("Got(GET deliveries?limit=0) = %d %s; want 422", s, b)
	}
	if s, b := admin.JSON(t, http.MethodDelete, "/api/v1/integrations/webhooks/"+ep.ID, nil, nil); s != http.StatusNoContent {
		t.Errorf("Got(DELETE) = %d %s; want 204", s, b)
	}
	for _, typ := range []string{audit.TypeWebhookCreated, audit.TypeWebhookUpdated, audit.TypeWebhookTested, audit.TypeWebhookDeleted} {
		if evs := env.Events(t, typ); len(evs) != 1 || evs[0].TenantID != acme.ID {
			t.Errorf("Got(audit %s) = %d events; want 1 in acme", typ, len(evs))
		}
	}
}

// TestIntegrationsPage: an admin adds an endpoint from the settings page; a
// refused URL shows the error next to the field and keeps what was typed;
// the endpoint then lists with its actions; a developer sees 403.
func TestIntegrationsPage(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.Tenant(t, "acme")
	env.Member(t, acme, "ann@acme.test", tenants.RoleAdmin)
	env.Member(t, acme, "dan@acme.test", tenants.RoleDeveloper)
	ann, dan := env.Login(t, "ann@acme.test"), env.Login(t, "dan@acme.test")
	if s, _ := dan.GetPage(t, "/settings/integrations"); s != http.StatusForbidden {
		t.Errorf("Got(GET /settings/integrations as developer) = %d; want 403", s)
	}
	// The signing secret is chosen from the tenant's live secrets: a name
	// that is none of them is refused next to the field.
	unknown := url.Values{"url": {"https://hooks.example.com/in"}, "secret_name": {"HOOK_KEY"}}
	if s, page, _ := ann.Post(t, "/settings/integrations", unknown); s != http.StatusUnprocessableEntity {
		t.Errorf("Got(POST with no such secret) = %d; want 422", s)
	} else if msg, ok := webtest.ParseHTML(t, page).FieldError("secret_name"); !ok || !strings.Contains(msg, "live secrets") {
		t.Errorf("Got(secret_name error) = %q, %t; want it to ask for one of the tenant's live secrets", msg, ok)
	}
	if _, err := env.Secrets.Create(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, acme.ID,
		secrets.NewSecret{Name: "HOOK_KEY", Value: "whsec_x", Hosts: []string{"hooks.example.com"}}); err != nil {
		t.Fatal(err)
	}
	form := url.Values{"url": {"ftp://hooks.example.com/in"}, "secret_name": {"HOOK_KEY"}, "description": {"ops pager"},
		"event_types": {"sandbox.created", "run.completed"}}
	s, page, _ := ann.Post(t, "/settings/integrations", form)
	doc := webtest.ParseHTML(t, page)
	if s != http.StatusUnprocessableEntity {
		t.Fatalf("Got(POST bad url) = %d; want 422", s)
	}
	if msg, ok := doc.FieldError("url"); !ok || !strings.Contains(msg, "https") {
		t.Errorf("Got(url field error) = %q, %t; want a message about https", msg, ok)
	}
	for _, kept := range []string{`value="ftp://hooks.example.com/in"`, `value="HOOK_KEY" selected`, `value="ops pager"`} {
		if !strings.Contains(page, kept) {
			t.Errorf("Got(page after a refused POST) without %s; want what was typed kept", kept)
		}
	}
	if !strings.Contains(page, `value="run.completed" checked`) || strings.Contains(page, `value="sandbox.destroyed" checked`) {
		t.Errorf("Got(event checkboxes after a refused POST) = not as ticked; want sandbox.created and run.completed only")
	}
	form.Set("url", "https://hooks.example.com/in")
	s, _, hdr := ann.Post(t, "/settings/integrations", form)
	if s != http.StatusSeeOther || hdr.Get("Location") != "/settings/integrations" {
		t.Fatalf("Got(POST) = %d to %q; want 303 to /settings/integrations", s, hdr.Get("Location"))
	}
	s, page = ann.GetPage(t, "/settings/integrations")
	if s != http.StatusOK || !strings.Contains(page, "https://hooks.example.com/in") || !strings.Contains(page, "run.completed, sandbox.created") ||
		!strings.Contains(page, "Send test event") || !strings.Contains(page, "Disable") {
		t.Fatalf("Got(GET /settings/integrations) = %d; want the endpoint with its events and actions", s)
	}
	list, err := env.Integrations.Endpoints(t.Context(), acme.ID)
	if err != nil || len(list) != 1 {
		t.Fatalf("Got(endpoints) = %v, %v; want 1", list, err)
	}
	if s, _, _ := ann.Post(t, "/settings/integrations/"+list[0].ID+"/test", nil); s != http.StatusSeeOther {
		t.Errorf("Got(POST test) = %d; want 303", s)
	}
	if s, _, _ := ann.Post(t, "/settings/integrations/"+list[0].ID+"/disable", nil); s != http.StatusSeeOther {
		t.Errorf("Got(POST disable) = %d; want 303", s)
	}
	s, page = ann.GetPage(t, "/settings/integrations")
	if !strings.Contains(page, "webhook.test") || !strings.Contains(page, ">disabled<") || !strings.Contains(page, ">Enable<") {
		t.Errorf("Got(page after test and disable) = %d; want the pending test delivery and a disabled endpoint", s)
	}
	if s, _, _ := ann.Post(t, "/settings/integrations/"+list[0].ID+"/enable", nil); s != http.StatusSeeOther {
		t.Errorf("Got(POST enable) = %d; want 303", s)
	}
	if s, _, _ := ann.Post(t, "/settings/integrations/"+list[0].ID+"/delete", nil); s != http.StatusSeeOther {
		t.Errorf("Got(POST delete) = %d; want 303", s)
	}
}
