package web_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestFormConflictBrowser: a form refused with a conflict answers 409 (the
// status the error mapper gives a conflict, as the API does) and still
// shows the message next to its field with what was typed kept.
func TestFormConflictBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "dev@example.com", tenants.RoleAdmin)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	get := func(what, sel string, a chromedp.Action[string]) string {
		t.Helper()
		s, err := chromedp.Run(b.Ctx, a)
		if err != nil {
			t.Fatalf("%s of %s: %v", what, sel, err)
		}
		return strings.TrimSpace(s)
	}
	email := `form[action="/settings/members"] input[name="email"]`

	b.Do(t, "sign in as the admin",
		chromedp.Navigate(env.URL+"/settings/members"),
		chromedp.Click(css(`form[action="/login/start"] button`)),
		chromedp.WaitVisible(css(`input[name="email"]`)),
		chromedp.SendKeys(css(`input[name="email"]`), "dev@example.com"),
		chromedp.Click(css(`button[value="login"]`)),
		chromedp.WaitVisible(css(email)))
	b.Do(t, "invite someone who is already a member",
		chromedp.SendKeys(css(email), "dev@example.com"),
		chromedp.Click(css(`form[action="/settings/members"] button[type="submit"]`)),
		chromedp.WaitVisible(css(`[aria-invalid="true"][name="email"]`)))
	if got := get("value", email, chromedp.Value(css(email))); got != "dev@example.com" {
		t.Errorf("Got(email after the refusal) = %q; want what was typed", got)
	}
	if msg := get("text", "the form", chromedp.Text(css(`form[action="/settings/members"]`))); !strings.Contains(msg, "already a member") {
		t.Errorf("Got(form) = %q; want the refusal next to the field", msg)
	}
	b.Screenshot(t, artifacts, "members-conflict.png")
	saw409 := false
	for _, p := range b.Problems() {
		if strings.Contains(p, "status of 409") { // the refused form, on purpose
			saw409 = true
			continue
		}
		t.Errorf("Got(console problem) = %s; want none", p)
	}
	if !saw409 {
		t.Errorf("Got(console) no failed load with status 409; want the refused form's 409")
	}
}
