package web_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestIntegrationsBrowser: an admin adds an outgoing webhook endpoint in
// headless Chromium; a loopback URL is refused next to its field with what
// was typed kept, then a public https one is listed. Screenshots of both.
func TestIntegrationsBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "dev@example.com", tenants.RoleAdmin)
	css := webtest.CSS
	// The signing secret is chosen from the tenant's live secrets.
	if _, err := env.Secrets.Create(context.Background(), audit.Actor{Kind: "system", ID: "test"}, acme.ID, secrets.NewSecret{
		Name: "WEBHOOK_SIGNING_KEY", Value: "whsec_dGVzdA==", Hosts: []string{"hooks.example.com"}}); err != nil {
		t.Fatal(err)
	}

	b.Login(t, env.URL+"/settings/integrations", "dev@example.com", `form[action="/settings/integrations"] input[name="url"]`)

	b.Do(t, "add a loopback endpoint",
		chromedp.SendKeys(css(`input[name="url"]`), "https://127.0.0.1/hook"),
		chromedp.SetValue(css(`select[name="secret_name"]`), "WEBHOOK_SIGNING_KEY"),
		chromedp.SendKeys(css(`input[name="description"]`), "billing pipeline"),
		chromedp.Click(css(`form[action="/settings/integrations"] button[type="submit"]`)),
		chromedp.WaitVisible(css(`[aria-invalid="true"][name="url"]`)))
	if got := b.Value(t, `input[name="url"]`); got != "https://127.0.0.1/hook" {
		t.Errorf("Got(url after the refusal) = %q; want what was typed", got)
	}
	if got := b.Value(t, `select[name="secret_name"]`); got != "WEBHOOK_SIGNING_KEY" {
		t.Errorf("Got(signing secret after the refusal) = %q; want the one chosen", got)
	}
	if got := b.Value(t, `input[name="description"]`); got != "billing pipeline" {
		t.Errorf("Got(description after the refusal) = %q; want what was typed", got)
	}
	if msg := b.Text(t, `form[action="/settings/integrations"]`); !strings.Contains(msg, "loopback") {
		t.Errorf("Got(form) = %q; want the refusal naming loopback next to the field", msg)
	}
	b.Screenshot(t, artifacts, "integrations-error.png")

	b.Do(t, "add a public endpoint",
		chromedp.SetValue(css(`input[name="url"]`), "https://hooks.example.com/stockade"),
		chromedp.Click(css(`form[action="/settings/integrations"] button[type="submit"]`)),
		chromedp.WaitVisible(css(`form[action$="/test"]`)))
	if page := b.Text(t, `main`); !strings.Contains(page, "https://hooks.example.com/stockade") || !strings.Contains(page, "WEBHOOK_SIGNING_KEY") {
		t.Errorf("Got(page after adding) = %q; want the endpoint listed with its secret name", page)
	}
	b.Screenshot(t, artifacts, "integrations.png")
	for _, p := range b.Problems() {
		if !strings.Contains(p, "status of 422") { // the refused form, on purpose
			t.Errorf("Got(console problem) = %s; want none", p)
		}
	}
}
