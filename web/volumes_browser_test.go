package web_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestVolumesBrowser: a developer creates a volume on /volumes in headless
// Chromium; a name clash is refused next to the name field with what was
// typed kept; the volume is grown from its row and deleted through the
// confirm dialog. Screenshots at desktop and phone sizes; no console
// problems but the refused form's, no CSP violation.
func TestVolumesBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "dev@example.com", tenants.RoleDeveloper)
	css := webtest.CSS
	b.WatchCSP(t)
	b.Login(t, env.URL+"/volumes", "dev@example.com", `form[action="/volumes"] input[name="name"]`)

	create := func(name, size string) {
		b.Do(t, "create "+name,
			chromedp.SetValue(css(`form[action="/volumes"] input[name="name"]`), name),
			chromedp.SetValue(css(`form[action="/volumes"] input[name="size_gib"]`), size),
			chromedp.Click(css(`form[action="/volumes"] button[type="submit"]`)))
	}
	create("npm-cache", "2")
	b.Do(t, "wait for the list", chromedp.WaitVisible(css(`tr[data-volume="npm-cache"]`)))
	create("npm-cache", "1")
	b.Do(t, "wait for the refusal", chromedp.WaitVisible(css(`[aria-invalid="true"][name="name"]`)))
	if got := b.Value(t, `form[action="/volumes"] input[name="name"]`); got != "npm-cache" {
		t.Errorf("Got(name after the refusal) = %q; want what was typed", got)
	}
	if msg := b.Text(t, `form[action="/volumes"]`); !strings.Contains(msg, "has a volume of this name") {
		t.Errorf("Got(form) = %q; want the clash named next to the field", msg)
	}
	b.Screenshot(t, artifacts, "volumes-error.png")

	b.Do(t, "grow it",
		chromedp.Navigate(env.URL+"/volumes"),
		chromedp.Click(css(`tr[data-volume="npm-cache"] summary`)),
		chromedp.SetValue(css(`form[action="/volumes/npm-cache/resize"] input[name="size_gib"]`), "5"),
		chromedp.Click(css(`form[action="/volumes/npm-cache/resize"] button[type="submit"]`)),
		chromedp.WaitVisible(css(`.flashes`)))
	if got := b.Text(t, `tr[data-volume="npm-cache"]`); !strings.Contains(got, "5 GiB") {
		t.Errorf("Got(row after growing) = %q; want 5 GiB", got)
	}
	if got := b.Text(t, `#volume-quota`); !strings.Contains(got, "5 of 20 GiB") {
		t.Errorf("Got(quota line) = %q; want 5 of 20 GiB", got)
	}
	for _, size := range []struct {
		name string
		w, h int64
	}{{"desktop", 1366, 900}, {"phone", 390, 844}} {
		b.Do(t, "volumes "+size.name, chromedp.EmulateViewport(size.w, size.h), chromedp.Navigate(env.URL+"/volumes"),
			chromedp.WaitVisible(css(`tr[data-volume="npm-cache"]`)))
		b.Screenshot(t, artifacts, "volumes-"+size.name+".png")
	}
	b.Do(t, "back to desktop", chromedp.EmulateViewport(1366, 900))

	b.Do(t, "delete it",
		chromedp.Click(css(`form[action="/volumes/npm-cache/delete"] button`)),
		chromedp.WaitVisible(css(`dialog.confirm-dialog[open] [data-confirm-ok]`)))
	b.Screenshot(t, artifacts, "volumes-confirm.png")
	b.Do(t, "confirm",
		chromedp.Click(css(`dialog.confirm-dialog[open] [data-confirm-ok]`)),
		chromedp.WaitVisible(css(`p.empty`)))
	if got := b.Text(t, `main`); !strings.Contains(got, "Volume npm-cache deleted") {
		t.Errorf("Got(page after delete) = %q; want the flash", got)
	}
	for _, p := range b.Problems() {
		if !strings.Contains(p, "status of 409") { // the refused form, on purpose
			t.Errorf("Got(console problem) = %s; want none", p)
		}
	}
	if v := b.CSPViolations(t); len(v) > 0 {
		t.Errorf("Got(CSP violations) = %v; want none", v)
	}
}
