package handlers_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/web/webtest"
)

// docMap is the defaults as a JSON object with fn applied.
func docMap(t *testing.T, fn func(m map[string]any)) map[string]any {
	t.Helper()
	raw, _ := json.Marshal(policy.Defaults())
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	fn(m)
	return m
}

func sub(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		m = m[k].(map[string]any)
	}
	return m
}

// TestPolicyAPI: read, save, list, diff and roll back through the API; a
// document failing the schema gets 422 naming every failing path and
// writes nothing; only admins write; another tenant's versions are not
// found.
func TestPolicyAPI(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme, other := env.Tenant(t, "acme"), env.Tenant(t, "other")
	admin := env.WithToken(env.Token(t, acme, tenants.RoleAdmin))
	dev := env.WithToken(env.Token(t, acme, tenants.RoleDeveloper))
	billing := env.WithToken(env.Token(t, acme, tenants.RoleBilling))
	stranger := env.WithToken(env.Token(t, other, tenants.RoleAdmin))

	var cur handlers.PolicyJSON
	if s, body := dev.JSON(t, http.MethodGet, "/api/v1/policy", nil, &cur); s != http.StatusOK || cur.Version != 0 || cur.Policy == nil ||
		!reflect.DeepEqual(*cur.Policy, policy.Defaults()) {
		t.Fatalf("Got(GET /api/v1/policy, new tenant) = %d v%d %s; want 200 version 0 with the defaults", s, cur.Version, body)
	}

	t.Run("schema failures list every path", func(t *testing.T) {
		bad := docMap(t, func(m map[string]any) {
			sub(m, "resources")["max_memory_mib"] = -64
			sub(m, "network", "egress")["allow"] = []any{map[string]any{"domain": "not a domain", "ports": []int{443}}}
			sub(m, "lifetime")["default_timeout_seconds"] = "soon"
			delete(sub(m, "audit"), "retention_days")
		})
		before := env.Counts(t)
		s, body := admin.JSON(t, http.MethodPut, "/api/v1/policy", map[string]any{"policy": bad, "reason": "bad"}, nil)
		if s != http.StatusUnprocessableEntity {
			t.Fatalf("Got(PUT bad policy) = %d %s; want 422", s, body)
		}
		var p struct {
			Errors []struct{ Field, Detail string } `json:"errors"`
		}
		_ = json.Unmarshal([]byte(body), &p)
		var fields []string
		for _, e := range p.Errors {
			fields = append(fields, e.Field)
		}
		sort.Strings(fields)
		want := []string{"/audit/retention_days", "/lifetime/default_timeout_seconds", "/network/egress/allow/0/domain", "/resources/max_memory_mib"}
		if !reflect.DeepEqual(fields, want) {
			t.Errorf("Got(422 errors[].field) = %v; want %v", fields, want)
		}
		env.Unchanged(t, before)
	})

	t.Run("missing policy", func(t *testing.T) {
		s, body := admin.JSON(t, http.MethodPut, "/api/v1/policy", map[string]any{"reason": "x"}, nil)
		if s != http.StatusUnprocessableEntity || !strings.Contains(body, `"field":"policy"`) {
			t.Errorf("Got(PUT without policy) = %d %s; want 422 naming policy", s, body)
		}
	})

	good := docMap(t, func(m map[string]any) {
		sub(m, "network", "egress")["allow"] = []any{map[string]any{"domain": "api.github.com", "ports": []int{443}}}
		sub(m, "resources")["max_memory_mib"] = 256
	})
	t.Run("only admins write", func(t *testing.T) {
		for _, c := range []*webtest.Client{dev, billing} {
			if s, body := c.JSON(t, http.MethodPut, "/api/v1/policy", map[string]any{"policy": good, "reason": "x"}, nil); s != http.StatusForbidden {
				t.Errorf("Got(PUT as non-admin) = %d %s; want 403", s, body)
			}
		}
		if s, _ := billing.JSON(t, http.MethodGet, "/api/v1/policy", nil, nil); s != http.StatusOK {
			t.Errorf("Got(GET as billing) = %d; want 200 (everyone reads the policy)", s)
		}
	})

	var v1 handlers.PolicyJSON
	if s, body := admin.JSON(t, http.MethodPut, "/api/v1/policy", map[string]any{"policy": good, "reason": "GitHub only", "base_version": 0}, &v1); s != http.StatusOK ||
		v1.Version != 1 || len(v1.Changes) != 2 || v1.Reason != "GitHub only" {
		t.Fatalf("Got(PUT good policy) = %d %s; want 200, version 1 with 2 changes", s, body)
	}
	if s, body := admin.JSON(t, http.MethodPut, "/api/v1/policy", map[string]any{"policy": docMap(t, func(map[string]any) {}), "reason": "stale", "base_version": 0}, nil); s != http.StatusConflict {
		t.Errorf("Got(PUT with stale base_version) = %d %s; want 409", s, body)
	}
	var preview handlers.PolicyPreviewJSON
	if s, body := admin.JSON(t, http.MethodPost, "/api/v1/policy/preview", map[string]any{"policy": docMap(t, func(map[string]any) {})}, &preview); s != http.StatusOK ||
		preview.BaseVersion != 1 || len(preview.Changes) != 2 || len(preview.Notes) == 0 {
		t.Errorf("Got(POST preview back to the defaults) = %d %s; want base 1, 2 changes and notes", s, body)
	}

	// A rollback needs a reason, like a save: without one, 422 naming it
	// and nothing saved.
	before := env.Counts(t)
	if s, body := admin.JSON(t, http.MethodPost, "/api/v1/policy/rollback", map[string]any{"version": 0}, nil); s != http.StatusUnprocessableEntity ||
		!strings.Contains(body, `"field":"reason"`) {
		t.Errorf("Got(POST rollback without a reason) = %d %s; want 422 naming reason", s, body)
	}
	env.Unchanged(t, before)
	var rb handlers.PolicyJSON
	if s, body := admin.JSON(t, http.MethodPost, "/api/v1/policy/rollback", map[string]any{"version": 0, "reason": "too strict"}, &rb); s != http.StatusOK ||
		rb.Version != 2 || rb.RolledBackFrom == nil || *rb.RolledBackFrom != 0 {
		t.Fatalf("Got(POST rollback to 0) = %d %s; want version 2", s, body)
	}
	var versions struct{ Versions []handlers.PolicyJSON }
	if s, body := dev.JSON(t, http.MethodGet, "/api/v1/policy/versions", nil, &versions); s != http.StatusOK || len(versions.Versions) != 3 || versions.Versions[0].Version != 2 {
		t.Errorf("Got(GET versions) = %d %s; want [2 1 0]", s, body)
	}
	var diff handlers.PolicyDiffJSON
	if s, body := dev.JSON(t, http.MethodGet, "/api/v1/policy/diff?from=0&to=1", nil, &diff); s != http.StatusOK || len(diff.Changes) != 2 ||
		diff.Changes[1].Path != "/resources/max_memory_mib" || string(diff.Changes[1].New) != "256" {
		t.Errorf("Got(GET diff 0..1) = %d %s; want max_memory_mib 512 -> 256 among 2 changes", s, body)
	}
	if s, _ := dev.JSON(t, http.MethodGet, "/api/v1/policy/versions/1", nil, nil); s != http.StatusOK {
		t.Errorf("Got(GET versions/1) = %d; want 200", s)
	}
	for _, path := range []string{"/api/v1/policy/versions/1", "/api/v1/policy/diff?from=0&to=1"} {
		if s, body := stranger.JSON(t, http.MethodGet, path, nil, nil); s != http.StatusNotFound {
			t.Errorf("Got(GET %s from another tenant) = %d %s; want 404", path, s, body)
		}
	}
	if s, _ := stranger.JSON(t, http.MethodPost, "/api/v1/policy/rollback", map[string]any{"version": 1}, nil); s != http.StatusNotFound {
		t.Errorf("Got(rollback to another tenant's version) = %d; want 404", s)
	}
	if got := env.Events(t, audit.TypePolicyUpdated); len(got) != 1 || got[0].TenantID != acme.ID {
		t.Errorf("Got(policy.updated events) = %d; want 1 in acme", len(got))
	}
	if got := env.Events(t, audit.TypePolicyRolledBack); len(got) != 1 || got[0].Details["rolled_back_from"] != float64(0) {
		t.Errorf("Got(policy.rolled_back events) = %+v; want 1 naming version 0", got)
	}
}

// TestPolicyPages: admins get forms, others read-only; a bad section
// input is shown next to its field and saves nothing; preview then save
// makes a version.
func TestPolicyPages(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.Tenant(t, "acme")
	env.Member(t, acme, "ann@acme.test", tenants.RoleAdmin)
	env.Member(t, acme, "dan@acme.test", tenants.RoleDeveloper)
	ann, dan := env.Login(t, "ann@acme.test"), env.Login(t, "dan@acme.test")

	s, page := dan.GetPage(t, "/policy")
	if s != http.StatusOK || !strings.Contains(page, `id="policy-readonly"`) || strings.Contains(page, `value="preview"`) {
		t.Errorf("Got(GET /policy as developer) = %d; want 200 read-only without preview buttons", s)
	}
	// The VM pool's settings live on the VMs page: linked for who may open
	// it, named without a link for who may not (no 403 from the page).
	env.Member(t, acme, "bill@acme.test", tenants.RoleBilling)
	if !strings.Contains(page, `href="/vms#pool-title"`) {
		t.Errorf("Got(policy page as developer) without the link to the VMs page's pool settings; want it")
	}
	if _, bpage := env.Login(t, "bill@acme.test").GetPage(t, "/policy"); strings.Contains(bpage, `href="/vms`) || !strings.Contains(bpage, `id="vm-pool"`) {
		t.Errorf("Got(policy page as billing) with a link to /vms (a 403 for billing) or without the VM pool card; want the card, no link")
	}
	if s, _, _ := dan.Post(t, "/policy", url.Values{"section": {"resources"}, "base_version": {"0"}}); s != http.StatusForbidden {
		t.Errorf("Got(POST /policy as developer) = %d; want 403", s)
	}

	form := url.Values{"section": {"resources"}, "base_version": {"0"}, "op": {"preview"},
		"/resources/max_vcpus": {"1"}, "/resources/max_memory_mib": {"-5"}, "/resources/default_memory_mib": {"128"},
		"/resources/max_pids": {"256"}, "/resources/max_disk_mib": {"lots"}}
	before := env.Counts(t)
	s, page, _ = ann.Post(t, "/policy", form)
	doc := webtest.ParseHTML(t, page)
	if s != http.StatusUnprocessableEntity {
		t.Fatalf("Got(POST bad resources) = %d; want 422", s)
	}
	for _, id := range []string{"p-resources-max_memory_mib-error", "p-resources-max_disk_mib-error"} {
		if !strings.Contains(page, `id="`+id+`"`) {
			t.Errorf("Got(page) without %s; want the error next to its field", id)
		}
	}
	_ = doc
	env.Unchanged(t, before)

	form.Set("/resources/max_memory_mib", "256")
	form.Set("/resources/max_disk_mib", "1024")
	s, page, _ = ann.Post(t, "/policy", form)
	if s != http.StatusOK || !strings.Contains(page, "resources-preview") || !strings.Contains(page, `value="save"`) {
		t.Fatalf("Got(POST preview) = %d; want 200 with a preview and a save button", s)
	}
	form.Set("op", "save")
	form.Set("reason", "smaller sandboxes")
	s, _, hdr := ann.Post(t, "/policy", form)
	if s != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/policy?saved=1") {
		t.Fatalf("Got(POST save) = %d %s; want 303 to /policy?saved=1", s, hdr.Get("Location"))
	}
	s, page = ann.GetPage(t, "/policy/versions/1")
	if s != http.StatusOK || !strings.Contains(page, ">Max memory<") || !strings.Contains(page, ">256 MiB<") || !strings.Contains(page, "smaller sandboxes") {
		t.Errorf("Got(GET /policy/versions/1) = %d; want the diff in words (Max memory, 256 MiB) and the reason", s)
	}

	// A form or editor loaded before version 1 is a conflict, previewed
	// or saved: the store says so, and nothing is written.
	defaults, _ := json.Marshal(docMap(t, func(map[string]any) {}))
	before = env.Counts(t)
	for _, op := range []string{"preview", "save"} {
		form.Set("op", op)
		form.Set("/resources/max_pids", "128")
		if s, page, _ := ann.Post(t, "/policy", form); s != http.StatusConflict || !strings.Contains(page, "since version 0 was loaded") {
			t.Errorf("Got(POST section %s on version 0 after version 1) = %d; want 409 saying the version changed", op, s)
		}
		raw := url.Values{"base_version": {"0"}, "op": {op}, "reason": {"stale"}, "doc": {string(defaults)}}
		if s, page, _ := ann.Post(t, "/policy/raw", raw); s != http.StatusConflict || !strings.Contains(page, "since version 0 was loaded") {
			t.Errorf("Got(POST raw %s on version 0 after version 1) = %d; want 409 saying the version changed", op, s)
		}
	}
	env.Unchanged(t, before)
	// The raw editor on the current version previews the changes back to
	// the defaults, then saves them with the reason.
	raw := url.Values{"base_version": {"1"}, "op": {"preview"}, "doc": {string(defaults)}}
	if s, page, _ := ann.Post(t, "/policy/raw", raw); s != http.StatusOK || !strings.Contains(page, ">Max memory<") || !strings.Contains(page, ">512 MiB<") {
		t.Errorf("Got(POST raw preview back to the defaults) = %d; want 200 listing Max memory back to 512 MiB", s)
	}
	raw.Set("op", "save")
	raw.Set("reason", "back to the defaults")
	if s, _, hdr := ann.Post(t, "/policy/raw", raw); s != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/policy?saved=2") {
		t.Errorf("Got(POST raw save) = %d %s; want 303 to /policy?saved=2", s, hdr.Get("Location"))
	}

	// Rollback from the page: the confirm step saves nothing; a missing
	// reason is 422 on the reason; a version saved since the confirm is a
	// conflict; then it saves, on the version the diff was shown against.
	before = env.Counts(t)
	rb := url.Values{"version": {"1"}, "op": {"confirm"}}
	if s, page, _ := ann.Post(t, "/policy/rollback", rb); s != http.StatusOK || !strings.Contains(page, `id="rollback-preview"`) ||
		!strings.Contains(page, ">Max memory<") || !strings.Contains(page, `name="base_version" value="2"`) {
		t.Errorf("Got(POST rollback confirm) = %d; want 200 with the diff against version 2 and its base_version", s)
	}
	rb.Set("op", "rollback")
	rb.Set("base_version", "2")
	if s, page, _ := ann.Post(t, "/policy/rollback", rb); s != http.StatusUnprocessableEntity || !strings.Contains(page, `id="rollback-reason-error"`) {
		t.Errorf("Got(POST rollback without a reason) = %d; want 422 with the reason marked", s)
	}
	rb.Set("reason", "back to 256")
	rb.Set("base_version", "1")
	if s, page, _ := ann.Post(t, "/policy/rollback", rb); s != http.StatusConflict || !strings.Contains(page, `id="rollback-error"`) {
		t.Errorf("Got(POST rollback on a stale version) = %d; want 409 shown on the confirm page", s)
	}
	env.Unchanged(t, before)
	rb.Set("base_version", "2")
	if s, _, hdr := ann.Post(t, "/policy/rollback", rb); s != http.StatusSeeOther || hdr.Get("Location") != "/policy?saved=3" {
		t.Errorf("Got(POST rollback) = %d %s; want 303 to /policy?saved=3", s, hdr.Get("Location"))
	}
}
