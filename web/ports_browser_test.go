package web_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestPortsCardBrowser: in headless Chromium a developer finds the Ports
// card on a running sandbox's page, is told a bad port is one, makes a
// preview link (shown once, then listed without its token), and revokes it
// by keyboard-reachable buttons; desktop and phone screenshots go to
// test-artifacts/. No console error or CSP violation. (The tunnel behind
// the links runs on a real VM in TestPortsVM.)
func TestPortsCardBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	env := webtest.New(t, webtest.Options{})
	tn := env.TenantNamed(t, "ports-ui", "Ports UI")
	env.Member(t, tn, "dev@ports-ui.test", tenants.RoleDeveloper)
	sb := sandboxtest.Record(t, env.DB, tn.ID, "dev@ports-ui.test")
	css := webtest.CSS
	page := env.URL + "/sandboxes/" + sb.ID

	b.Login(t, page, "dev@ports-ui.test", `#ports-title`)
	b.Do(t, "a port out of range",
		chromedp.SendKeys(css(`form[data-testid="preview-create"] input[name="port"]`), "70000"),
		chromedp.Click(css(`form[data-testid="preview-create"] button[type="submit"]`)),
		chromedp.WaitVisible(css(`#ports [aria-invalid="true"]`)))
	if msg := b.Text(t, `#ports`); !strings.Contains(msg, "1 to 65535") {
		t.Errorf("Got(card after port 70000) = %q; want the port's range", msg)
	}
	b.Do(t, "make a preview link",
		chromedp.EmulateViewport(1366, 900),
		chromedp.Navigate(page), chromedp.WaitVisible(css(`#ports-title`)),
		chromedp.SendKeys(css(`form[data-testid="preview-create"] input[name="port"]`), "8000"),
		chromedp.SendKeys(css(`form[data-testid="preview-create"] input[name="ttl_minutes"]`), "30"),
		chromedp.Click(css(`form[data-testid="preview-create"] button[type="submit"]`)),
		chromedp.WaitVisible(css(`[data-testid="preview-url"]`)))
	url := b.Text(t, `[data-testid="preview-url"]`)
	if !strings.HasPrefix(url, env.URL+"/preview/stkp_") {
		t.Errorf("Got(new link) = %q; want %s/preview/stkp_...", url, env.URL)
	}
	b.Screenshot(t, artifacts, "ports-card-new-link-desktop.png")
	b.Do(t, "phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(page), chromedp.WaitVisible(css(`table[data-testid="preview-links"]`)))
	b.Screenshot(t, artifacts, "ports-card-phone.png")
	if body := b.Text(t, `main`); strings.Contains(body, "stkp_") {
		t.Errorf("Got(page shown again) contains the token; want it shown once")
	}
	if s := b.Text(t, `table[data-testid="preview-links"] tbody`); !strings.Contains(s, "active") || !strings.Contains(s, "8000") {
		t.Errorf("Got(links) = %q; want the active link to port 8000", s)
	}
	b.Do(t, "desktop again", chromedp.EmulateViewport(1366, 900), chromedp.Navigate(page), chromedp.WaitVisible(css(`#ports-title`)))
	b.Do(t, "revoke it",
		chromedp.Focus(css(`table[data-testid="preview-links"] button[type="submit"]`)),
		chromedp.KeyEvent("\r"),
		// The confirm dialog (static/js/app.js) says what it will do; its
		// Cancel has the focus, so the confirm is a click on OK.
		chromedp.WaitVisible(css(`dialog.confirm-dialog[open] [data-confirm-ok]`)),
		chromedp.Click(css(`dialog.confirm-dialog[open] [data-confirm-ok]`)),
		chromedp.WaitVisible(css(`.flash-success`)))
	if s := b.Text(t, `table[data-testid="preview-links"] tbody`); !strings.Contains(s, "revoked") {
		t.Errorf("Got(links after revoking) = %q; want it revoked", s)
	}
	b.Screenshot(t, artifacts, "ports-card-revoked-desktop.png")
	if n := len(env.Events(t, audit.TypeSandboxPreviewRevoked)); n != 1 {
		t.Errorf("Got(revoke events) = %d; want 1", n)
	}
	for _, p := range b.Problems() {
		if strings.Contains(p, "status of 422") && strings.Contains(p, "/previews)") {
			continue // the refused port, on purpose
		}
		t.Errorf("Got(browser problem) %s; want none", p)
	}
}
