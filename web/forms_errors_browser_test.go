package web_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestFormErrorsBrowser: each kind of form, submitted in headless Chromium
// with every field wrong, comes back with every field error at once, in
// the fields' order, each marked on its field (aria-invalid, and
// aria-describedby naming the message next to it), with what was typed
// kept; a secret's value is never sent back (the page asks for it again).
// The filters of /usage and /audit say the same in place. Desktop and
// phone screenshots of each go to test-artifacts/.
func TestFormErrorsBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	env := webtest.New(t, webtest.Options{Operators: []string{"admin@acme-corp.test"}})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "admin@acme-corp.test", tenants.RoleAdmin)
	css := webtest.CSS
	b.Login(t, env.URL+"/settings/members", "admin@acme-corp.test", `form[action="/settings/members"]`)

	const secretValue = "typed-secret-value-8f3a"
	long := strings.Repeat("x", 201)
	cases := []struct {
		name, page, form string
		// set are the values typed (checkbox groups: "" unticks all);
		// a "!" prefix on the name skips the maxlength the input has.
		set map[string]string
		// want are the fields at fault, in the form's order.
		want []string
		// kept are the values that must be back after the refusal.
		kept map[string]string
		// confirm: the form asks in a dialog first (destructive).
		confirm bool
	}{
		{name: "sandbox", page: "/sandboxes", form: `form[action="/sandboxes"]`,
			set:  map[string]string{"vcpus": "0", "memory_mib": "-5", "timeout_minutes": "999999"},
			want: []string{"vcpus", "memory_mib", "timeout_minutes"}, kept: map[string]string{"vcpus": "0", "memory_mib": "-5", "timeout_minutes": "999999"}},
		{name: "secret", page: "/settings/secrets", form: `form[action="/settings/secrets"]`,
			set:  map[string]string{"name": "9bad name", "value": secretValue, "hosts": "*.com", "inject": "", "headers": ""},
			want: []string{"name", "value", "hosts", "inject"}, kept: map[string]string{"name": "9bad name", "hosts": "*.com", "value": ""}},
		{name: "invite", page: "/settings/members", form: `form[action="/settings/members"]`,
			set:  map[string]string{"email": "not-an-email", "role": ""},
			want: []string{"email", "role"}, kept: map[string]string{"email": "not-an-email"}},
		{name: "token", page: "/settings/tokens", form: `form[action="/settings/tokens"]`,
			set:  map[string]string{"name": "", "role": ""},
			want: []string{"name", "role"}},
		{name: "integration", page: "/settings/integrations", form: `form[action="/settings/integrations"]`,
			set:  map[string]string{"url": "http://127.0.0.1/hook", "secret_name": "", "!description": long},
			want: []string{"url", "secret_name", "description"}, kept: map[string]string{"url": "http://127.0.0.1/hook", "description": long}},
		{name: "vm-pool", page: "/vms", form: `form[action="/vms/pool"]`,
			set:  map[string]string{"vcpus": "0", "memory_mib": "1", "max_vms": "-1", "warm_vms": "", "recycle_after_hours": "-5"},
			want: []string{"vcpus", "memory_mib", "max_vms", "warm_vms", "recycle_after_hours"}, kept: map[string]string{"vcpus": "0", "memory_mib": "1", "max_vms": "-1", "recycle_after_hours": "-5"}},
		{name: "freeze", page: "/operator/tenants", form: `form[action="/operator/tenants/` + acme.ID + `/freeze"]`,
			set: map[string]string{"reason": "   "}, want: []string{"reason"}, confirm: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b.Do(t, "open "+c.page, chromedp.EmulateViewport(1366, 900), chromedp.Navigate(env.URL+c.page), chromedp.WaitVisible(css(c.form)))
			set, _ := json.Marshal(c.set)
			// Typed by script (the refusals are the server's: the forms are
			// novalidate); a disabled Create (no VMs here) is enabled.
			webtest.Eval[bool](t, b, `(() => { const f = document.querySelector(`+webtest.JSString(c.form)+`), set = `+string(set)+`;
				for (let [name, v] of Object.entries(set)) {
					if (name.startsWith("!")) { name = name.slice(1); f.elements[name].removeAttribute("maxlength"); }
					const els = f.querySelectorAll("[name='" + name + "']");
					els.forEach(el => { if (el.type === "checkbox") { el.checked = v !== "" && el.value === v; } else { el.value = v; } });
				}
				const btn = f.querySelector('button[type="submit"]'); btn.disabled = false; btn.click(); return true; })()`)
			if c.confirm {
				b.Do(t, "the dialog", chromedp.WaitVisible(css(`dialog.confirm-dialog[open]`)))
				if got := b.Text(t, `dialog.confirm-dialog p`); !strings.Contains(got, "Freeze acme-corp? It has no live sandbox.") {
					t.Errorf("Got(dialog) = %q; want what the freeze does, counted", got)
				}
				shoot(t, b, "freeze-confirm-dialog")
				b.Do(t, "confirm in the dialog", chromedp.Click(css(`dialog.confirm-dialog [data-confirm-ok]`)))
			}
			b.Do(t, "wait for the refusal", chromedp.WaitVisible(css(c.form+` [aria-invalid="true"]`)))
			type fieldState struct{ Name, Message string }
			got := webtest.Eval[[]fieldState](t, b, `(() => { const f = document.querySelector(`+webtest.JSString(c.form)+`), seen = new Set(), out = [];
				f.querySelectorAll('[aria-invalid="true"]').forEach(el => {
					if (seen.has(el.name)) return; seen.add(el.name);
					const msg = (el.getAttribute("aria-describedby") || "").split(/\s+/).map(id => document.getElementById(id))
						.filter(n => n && n.classList.contains("field-error") && n.offsetParent !== null).map(n => n.textContent.trim()).join(" ");
					out.push({Name: el.name, Message: msg});
				});
				return out; })()`)
			var names []string
			for _, f := range got {
				names = append(names, f.Name)
				if f.Message == "" {
					t.Errorf("Got(field %s) marked invalid with no visible message it is described by; want its message next to it", f.Name)
				}
			}
			if strings.Join(names, ",") != strings.Join(c.want, ",") {
				t.Errorf("Got(fields marked invalid, in order) = %v; want %v: every error at once", names, c.want)
			}
			for name, want := range c.kept {
				if got := webtest.Eval[string](t, b, `document.querySelector(`+webtest.JSString(c.form)+`).elements[`+webtest.JSString(name)+`].value`); got != want {
					t.Errorf("Got(%s after the refusal) = %q; want %q kept", name, got, want)
				}
			}
			if c.name == "secret" {
				if webtest.Eval[bool](t, b, `document.documentElement.outerHTML.includes(`+webtest.JSString(secretValue)+`)`) {
					t.Errorf("Got(page after a refused secret) holding the typed value; want it never sent back")
				}
				if msg := b.Text(t, `#secret-value-error`); !strings.Contains(msg, "enter the value again") {
					t.Errorf("Got(value field message) = %q; want it to ask for the value again", msg)
				}
			}
			if c.confirm {
				// The freeze form is a row of the tenants table: its one
				// field says why; there is no summary above it.
			} else if msg := b.Text(t, `main .flash-error[role="alert"]`); msg == "" {
				t.Errorf("Got(no summary above the form); want one")
			}
			shoot(t, b, "form-errors-"+c.name)
		})
	}

	t.Run("workflow", func(t *testing.T) {
		src := "name: Bad Name!\non: {}\njobs: 7\n"
		b.Do(t, "open the editor", chromedp.EmulateViewport(1366, 900), chromedp.Navigate(env.URL+"/workflows/new"), chromedp.WaitVisible(css(`#workflow-source`)),
			chromedp.SetValue(css(`#workflow-source`), src), chromedp.Click(css(`#workflow-save`)), chromedp.WaitVisible(css(`#workflow-errors`)))
		if n := webtest.Eval[int](t, b, `document.querySelectorAll("#workflow-errors li").length`); n < 2 {
			t.Errorf("Got(%d workflow errors listed); want every one (at least 2)", n)
		}
		if b.Attr(t, `#workflow-source`, "aria-invalid") != "true" || b.Attr(t, `#workflow-source`, "aria-describedby") != "workflow-errors" {
			t.Errorf("Got(source not marked invalid and described by the errors); want it")
		}
		if got := b.Value(t, `#workflow-source`); got != src {
			t.Errorf("Got(source after the refusal) = %q; want %q kept", got, src)
		}
		shoot(t, b, "form-errors-workflow")
	})

	filters := []struct{ name, url, form, field, from, fromName string }{
		{"usage", "/usage?from=2026-11-20&to=2026-11-02", `form[action="/usage"]`, "to", "2026-11-20", "from"},
		{"audit", "/audit?since=2026-11-20&until=2026-11-02", `form[action="/audit"]`, "until", "2026-11-20", "since"},
	}
	for _, f := range filters {
		t.Run(f.name+"-filter", func(t *testing.T) {
			b.Do(t, "open "+f.url, chromedp.EmulateViewport(1366, 900), chromedp.Navigate(env.URL+f.url), chromedp.WaitVisible(css(f.form+` [aria-invalid="true"]`)))
			sel := f.form + ` [name="` + f.field + `"]`
			msg := webtest.Eval[string](t, b, `(() => { const el = document.querySelector(`+webtest.JSString(sel)+`);
				return (el.getAttribute("aria-describedby") || "").split(/\s+/).map(id => document.getElementById(id))
					.filter(n => n && n.classList.contains("field-error")).map(n => n.textContent.trim()).join(" "); })()`)
			if !strings.Contains(msg, "after") && !strings.Contains(msg, "before") {
				t.Errorf("Got(message next to %s) = %q; want it to say the period ends before it starts", f.field, msg)
			}
			if got := b.Value(t, f.form+` [name="`+f.fromName+`"]`); got != f.from {
				t.Errorf("Got(%s after the refusal) = %q; want %q kept", f.fromName, got, f.from)
			}
			shoot(t, b, "form-errors-"+f.name+"-filter")
		})
	}
	for _, p := range b.Problems() {
		if strings.Contains(p, "status of 422") || strings.Contains(p, "status of 400") {
			continue // the refused forms, on purpose
		}
		t.Errorf("Got(console problem) = %s; want none", p)
	}
}

// shoot saves desktop (1366x900) and phone (390x844) screenshots of the
// page as it is.
func shoot(t *testing.T, b *webtest.Browser, name string) {
	t.Helper()
	b.Screenshot(t, artifacts, name+"-desktop.png")
	b.Do(t, "phone width", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	b.Screenshot(t, artifacts, name+"-phone.png")
	b.Do(t, "desktop width", chromedp.EmulateViewport(1366, 900))
}
