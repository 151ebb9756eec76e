package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestConfirmStep: a destructive form posted without confirm=yes (no
// script to show the dialog) changes nothing and answers a page saying
// what it will do, counted by the server (a freeze names how many live
// sandboxes it destroys), with a button posting the same form confirmed;
// another tenant's object is still not found. The tenants page's freeze
// form carries the same count for the script's dialog, and a freeze
// without a reason is refused next to its field, as typed.
func TestConfirmStep(t *testing.T) {
	env := webtest.New(t, webtest.Options{Operators: []string{"op@platform.test"}})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	globex := env.TenantNamed(t, "globex", "Globex")
	env.Member(t, acme, "admin@acme.test", tenants.RoleAdmin)
	env.Member(t, globex, "admin@globex.test", tenants.RoleAdmin)
	op, admin, other := env.Login(t, "op@platform.test"), env.Login(t, "admin@acme.test"), env.Login(t, "admin@globex.test")
	live := sandboxtest.RecordState(t, env.DB, acme.ID, "admin@acme.test", "running")
	sandboxtest.RecordState(t, env.DB, acme.ID, "admin@acme.test", "running")
	sandboxtest.RecordState(t, env.DB, acme.ID, "admin@acme.test", "destroyed") // not live: not counted
	member := env.Invite(t, acme, "leaver@acme.test", tenants.RoleDeveloper)
	_, tok := env.NewToken(t, acme, "ci-runner", tenants.RoleDeveloper)

	if _, page := op.GetPage(t, "/operator/tenants"); !strings.Contains(page, "Freeze acme-corp? This destroys its 2 live sandboxes now") {
		t.Errorf("Got(tenants page) without the freeze form's counted summary; want it in data-confirm")
	}
	cases := []struct {
		name   string
		client *webtest.Client
		path   string
		form   url.Values
		want   []string
	}{
		{"freeze", op, "/operator/tenants/" + acme.ID + "/freeze", url.Values{"reason": {"agent exfiltrating"}},
			[]string{"destroys its 2 live sandboxes", "Reason: agent exfiltrating", `name="reason" value="agent exfiltrating"`}},
		{"remove member", admin, "/settings/members/" + member.ID + "/remove", nil, []string{"Removing leaver@acme.test (developer)", "ends their access at once"}},
		{"revoke token", admin, "/settings/tokens/" + tok.ID + "/revoke", nil, []string{"Revoking ci-runner", "stops it working at once"}},
		{"destroy sandbox", admin, "/sandboxes/" + live.ID + "/destroy", nil, []string{"ends its processes and deletes its files for good", "recordings, command records and usage stay"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := env.Counts(t)
			s, page, _ := c.client.Post(t, c.path, c.form)
			if s != http.StatusOK {
				t.Fatalf("Got(POST %s unconfirmed) = %d; want 200, the confirm step", c.path, s)
			}
			env.Unchanged(t, before)
			for _, w := range append(c.want, `name="confirm" value="yes"`, `action="`+c.path+`"`) {
				if !strings.Contains(page, w) {
					t.Errorf("Got(confirm page) without %q; want it", w)
				}
			}
		})
	}
	// Another tenant's token and member: not found, not a confirm page.
	for _, path := range []string{"/settings/members/" + member.ID + "/remove", "/settings/tokens/" + tok.ID + "/revoke", "/sandboxes/" + live.ID + "/destroy"} {
		if s, _, _ := other.Post(t, path, nil); s != http.StatusNotFound {
			t.Errorf("Got(POST %s as another tenant's admin) = %d; want 404", path, s)
		}
	}
	// A freeze needs a reason: refused next to the field, nothing frozen.
	before := env.Counts(t)
	s, page, _ := op.Post(t, "/operator/tenants/"+acme.ID+"/freeze", url.Values{"reason": {"  "}, "confirm": {"yes"}})
	if s != http.StatusUnprocessableEntity {
		t.Errorf("Got(freeze without a reason) = %d; want 422", s)
	}
	if msg, ok := webtest.ParseHTML(t, page).FieldError("reason"); !ok || msg != "required" {
		t.Errorf("Got(reason field error) = %q, %t; want required", msg, ok)
	}
	env.Unchanged(t, before)
	// Confirmed, it acts.
	if s, _, hdr := admin.Post(t, "/settings/tokens/"+tok.ID+"/revoke", url.Values{"confirm": {"yes"}}); s != http.StatusSeeOther || hdr.Get("Location") != "/settings/tokens" {
		t.Errorf("Got(revoke confirmed) = %d %s; want 303 to /settings/tokens", s, hdr.Get("Location"))
	}
}
