package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestSecretsBrowser: an admin adds a secret in headless Chromium, the
// Authorization header ticked by default and the echo warning beside the
// query, path and body boxes; ticking body saves it with the warning; the
// table shows where each secret goes, and its "Change" form narrows it.
// Screenshots of the form and the list.
func TestSecretsBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "admin@example.com", tenants.RoleAdmin)
	css := webtest.CSS
	checked := func(sel string) bool {
		t.Helper()
		ok, err := chromedp.Run(b.Ctx, chromedp.Evaluate[bool](fmt.Sprintf("document.querySelector(%q).checked", sel)))
		if err != nil {
			t.Fatalf("checked of %s: %v", sel, err)
		}
		return ok
	}

	b.Login(t, env.URL+"/settings/secrets", "admin@example.com", `form[action="/settings/secrets"] input[name="name"]`)
	if !checked(`#secret-inject-authorization`) || checked(`#secret-inject-body`) || checked(`#secret-inject-query`) || checked(`#secret-inject-path`) {
		t.Errorf("Got(default ticks) not Authorization only; want Authorization ticked, query, path and body not")
	}
	if w := b.Text(t, `#secret-inject-warning`); !strings.Contains(w, "may store or echo") {
		t.Errorf("Got(warning) = %q; want the echo warning", w)
	}

	b.Do(t, "add a bearer token, Authorization only",
		chromedp.SendKeys(css(`input[name="name"]`), "GH_TOKEN"),
		chromedp.SendKeys(css(`input[name="value"]`), "ghp_browserValue_0123456789"),
		chromedp.SendKeys(css(`input[name="hosts"]`), "api.github.com"),
		chromedp.Click(css(`form[action="/settings/secrets"] button[type="submit"]`)),
		chromedp.WaitVisible(css(`tr[data-secret="GH_TOKEN"]`)))

	b.Do(t, "add a key that goes in the body and a header",
		chromedp.SendKeys(css(`input[name="name"]`), "SEARCH_KEY"),
		chromedp.SendKeys(css(`input[name="value"]`), "sk_browserValue_9876543210"),
		chromedp.SendKeys(css(`input[name="hosts"]`), "search.example.com"),
		chromedp.Click(css(`#secret-inject-body`)),
		chromedp.SendKeys(css(`#secret-headers`), "X-Api-Key"),
		chromedp.Click(css(`form[action="/settings/secrets"] button[type="submit"]`)),
		chromedp.WaitVisible(css(`tr[data-secret="SEARCH_KEY"]`)))
	if msg := b.Text(t, `main`); !strings.Contains(msg, "SEARCH_KEY may go in a URL or request body") {
		t.Errorf("Got(page after saving) = %q; want the echo warning for SEARCH_KEY", msg)
	}
	if cell := b.Text(t, `tr[data-secret="SEARCH_KEY"] td[data-label="Goes in"] .inject-list`); !strings.Contains(cell, "Authorization header") ||
		!strings.Contains(cell, "Request body") || !strings.Contains(cell, "X-Api-Key header") {
		t.Errorf("Got(Goes in of SEARCH_KEY) = %q; want Authorization, body and X-Api-Key", cell)
	}
	b.Do(t, "open the change form of SEARCH_KEY",
		chromedp.Click(css(`tr[data-secret="SEARCH_KEY"] summary`)),
		chromedp.WaitVisible(css(`#edit-SEARCH_KEY-inject-body`)))
	b.Screenshot(t, artifacts, "secrets.png")

	b.Do(t, "narrow SEARCH_KEY to its header",
		chromedp.Click(css(`#edit-SEARCH_KEY-inject-body`)),
		chromedp.Click(css(`#edit-SEARCH_KEY-inject-authorization`)),
		chromedp.Click(css(`form[action="/settings/secrets/SEARCH_KEY/inject"] button[type="submit"]`)),
		chromedp.WaitNotPresent(css(`tr[data-secret="SEARCH_KEY"] .inject-list .pill-warn`)))
	if msg := b.Text(t, `.flashes`); !strings.Contains(msg, "Saved where SEARCH_KEY goes") {
		t.Errorf("Got(flash) = %q; want it saved", msg)
	}
	got, err := env.Secrets.Get(context.Background(), acme.ID, "SEARCH_KEY")
	if err != nil || fmt.Sprint(got.Inject) != "[header:X-Api-Key]" {
		t.Errorf("Got(SEARCH_KEY after the change).Inject = %v, %v; want [header:X-Api-Key]", got.Inject, err)
	}
	if page := b.Text(t, `main`); strings.Contains(page, "browserValue") {
		t.Errorf("Got(page) holds a secret value")
	}
	b.Screenshot(t, artifacts, "secrets-narrowed.png")
	for _, p := range b.Problems() {
		t.Errorf("Got(console problem) = %s; want none", p)
	}
}
