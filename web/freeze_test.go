package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestFreezeTenant: an operator freezes a tenant through the API or the
// tenants page; while frozen, creating a sandbox is refused with a 409
// naming the freeze (before anything else is tried), the compliance page
// says so, and only operators may freeze. Unfreezing lifts it. Both are
// audited; the tenant's records stay. Destroying live sandboxes on real VMs
// is tested in sandbox/ (TestFreezeDestroysSandboxes).
func TestFreezeTenant(t *testing.T) {
	env := webtest.New(t, webtest.Options{Operators: []string{"op@platform.test"}})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	globex := env.TenantNamed(t, "globex", "Globex")
	env.Member(t, acme, "admin@acme.test", tenants.RoleAdmin)
	op := env.Login(t, "op@platform.test")
	admin := env.Login(t, "admin@acme.test")
	adminTok := env.WithToken(env.Token(t, acme, tenants.RoleAdmin))
	// A sandbox recorded earlier: its record and history are kept.
	kept := sandboxtest.RecordState(t, env.DB, acme.ID, "admin@acme.test", "destroyed")

	if s, body := admin.JSON(t, http.MethodPost, "/api/v1/tenants/"+acme.ID+"/freeze", map[string]string{"reason": "x"}, nil); s != http.StatusForbidden {
		t.Errorf("Got(tenant admin freezes) = %d %s; want 403: operators only", s, body)
	}
	if s, _ := op.JSON(t, http.MethodPost, "/api/v1/tenants/01900000-0000-7000-8000-000000000000/freeze", map[string]string{}, nil); s != http.StatusNotFound {
		t.Errorf("Got(freeze an unknown tenant) = %d; want 404", s)
	}

	var fr struct {
		TenantID string  `json:"tenant_id"`
		Frozen   bool    `json:"frozen"`
		FrozenAt *string `json:"frozen_at"`
		Reason   string  `json:"reason"`
	}
	if s, body := op.JSON(t, http.MethodPost, "/api/v1/tenants/"+acme.ID+"/freeze", map[string]string{"reason": "agent exfiltrating"}, &fr); s != http.StatusOK ||
		!fr.Frozen || fr.FrozenAt == nil || fr.Reason != "agent exfiltrating" || fr.TenantID != acme.ID {
		t.Fatalf("Got(freeze) = %d %+v %s; want 200, frozen, with the time and reason", s, fr, body)
	}
	if s, _ := op.JSON(t, http.MethodPost, "/api/v1/tenants/"+acme.ID+"/freeze", map[string]string{}, nil); s != http.StatusConflict {
		t.Errorf("Got(freeze again) = %d; want 409", s)
	}

	before := env.Counts(t)
	s, body, hdr := adminTok.Request(t, http.MethodPost, "/api/v1/sandboxes", "application/json", strings.NewReader(`{}`))
	if s != http.StatusConflict {
		t.Fatalf("Got(create a sandbox while frozen) = %d %s; want 409", s, body)
	}
	if p := webtest.Problem(t, hdr, body); !strings.Contains(p.Detail, "frozen") || !strings.Contains(p.Detail, "agent exfiltrating") {
		t.Errorf("Got(problem detail) = %q; want it to name the freeze and its reason", p.Detail)
	}
	env.Unchanged(t, before)

	// Pages: the operator's tenant list and the tenant's compliance page.
	_, page := op.GetPage(t, "/operator/tenants")
	if !strings.Contains(page, `action="/operator/tenants/`+acme.ID+`/unfreeze"`) || !strings.Contains(page, `action="/operator/tenants/`+globex.ID+`/freeze"`) {
		t.Errorf("Got(tenants page) without unfreeze for acme and freeze for globex; want both buttons")
	}
	var list struct {
		Tenants []struct {
			Slug     string  `json:"slug"`
			FrozenAt *string `json:"frozen_at"`
		} `json:"tenants"`
	}
	op.JSON(t, http.MethodGet, "/api/v1/tenants", nil, &list)
	for _, tn := range list.Tenants {
		if (tn.FrozenAt != nil) != (tn.Slug == acme.Slug) {
			t.Errorf("Got(tenant %s frozen_at) = %v; want it set for acme only", tn.Slug, tn.FrozenAt)
		}
	}
	if _, page := admin.GetPage(t, "/compliance"); !strings.Contains(page, `id="tenant-frozen"`) || !strings.Contains(page, "agent exfiltrating") {
		t.Errorf("Got(compliance page) without the freeze notice; want it")
	}
	if s, page := admin.GetPage(t, "/sandboxes/"+kept.ID); s != http.StatusOK || !strings.Contains(page, kept.ID) {
		t.Errorf("Got(a past sandbox while frozen) = %d; want its record kept and shown", s)
	}

	// The page buttons: freeze globex, unfreeze acme.
	if s, _, h := op.Post(t, "/operator/tenants/"+globex.ID+"/freeze", url.Values{"reason": {"drill"}, "confirm": {"yes"}}); s != http.StatusSeeOther || h.Get("Location") != "/operator/tenants" {
		t.Errorf("Got(freeze button) = %d %s; want 303 back to the list", s, h.Get("Location"))
	}
	if s, _, _ := op.Post(t, "/operator/tenants/"+acme.ID+"/unfreeze", nil); s != http.StatusSeeOther {
		t.Errorf("Got(unfreeze button) = %d; want 303", s)
	}
	_, page = op.GetPage(t, "/operator/tenants")
	if !strings.Contains(page, "is unfrozen") || !strings.Contains(page, `action="/operator/tenants/`+globex.ID+`/unfreeze"`) {
		t.Errorf("Got(tenants page after the buttons) without the flash or globex frozen; want both")
	}
	if s, body := adminTok.JSON(t, http.MethodPost, "/api/v1/sandboxes", map[string]any{}, nil); s == http.StatusConflict {
		t.Errorf("Got(create after unfreeze) = %d %s; want no longer the freeze (503 here: no VMs)", s, body)
	}
	if s, _ := op.JSON(t, http.MethodPost, "/api/v1/tenants/"+acme.ID+"/unfreeze", nil, nil); s != http.StatusConflict {
		t.Errorf("Got(unfreeze a tenant not frozen) = %d; want 409", s)
	}

	frozen, unfrozen := env.Events(t, audit.TypeTenantFrozen), env.Events(t, audit.TypeTenantUnfrozen)
	if len(frozen) != 2 || frozen[0].TenantID != acme.ID || frozen[0].ActorName != "op@platform.test" || frozen[1].TenantID != globex.ID {
		t.Errorf("Got(tenant.frozen events) = %+v; want acme's then globex's, by the operator", frozen)
	}
	if len(unfrozen) != 1 || unfrozen[0].TenantID != acme.ID {
		t.Errorf("Got(tenant.unfrozen events) = %+v; want acme's", unfrozen)
	}
}
