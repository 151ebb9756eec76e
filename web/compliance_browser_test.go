package web_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/stockade-dev/stockade/tenants/compliance"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestComplianceBrowser: in headless Chromium an auditor signs in, opens
// the compliance page, expands an item with the keyboard and follows its
// evidence link to the policy version it names. Screenshots of both land in
// test-artifacts/. Any console error or CSP violation fails it.
func TestComplianceBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	ce := newComplianceEnv(t, webtest.Options{})
	css := webtest.CSS
	where := func() *url.URL {
		t.Helper()
		u, err := url.Parse(b.Location(t))
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	evalBool := func(js string) bool { return webtest.Eval[bool](t, b, js) }

	b.Login(t, ce.env.URL+"/compliance", "auditor@acme.test", `#scorecard`)
	if u := where(); u.Path != "/compliance" {
		t.Fatalf("Got(location after login) = %s; want back on /compliance", u)
	}
	item := "#item-" + compliance.ItemEgressRestricted
	if n, err := chromedp.Run(b.Ctx, chromedp.Evaluate[int](`document.querySelectorAll("#checklist > li").length`)); err != nil || n != 14 {
		t.Fatalf("Got(items on the page) = %d, %v; want 14", n, err)
	}
	if evalBool(`document.querySelector("` + item + ` details").open`) {
		t.Fatalf("Got(%s open before) = true; want items closed until asked", item)
	}

	// Keyboard: focus the item's summary and press Enter.
	b.Do(t, "expand "+item+" with the keyboard",
		chromedp.Focus(css(item+" summary")),
		chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(css(item+" .evidence a.evidence-link")))
	if !evalBool(`document.querySelector("` + item + ` details").open`) {
		t.Fatalf("Got(%s open after Enter) = false; want it open", item)
	}
	link, err := chromedp.Run(b.Ctx, chromedp.AttributeValue(css(item+" .evidence a.evidence-link"), "href"))
	if err != nil || !link.Exists || !strings.HasPrefix(link.Value, "/policy/versions/") {
		t.Fatalf("Got(evidence link) = %+v, %v; want a policy version", link, err)
	}
	b.Screenshot(t, artifacts, "compliance-auditor.png")

	b.Do(t, "follow the evidence link", chromedp.Click(css(item+" .evidence a.evidence-link")), chromedp.WaitVisible(css(`main h1`)))
	if u := where(); u.Path != link.Value {
		t.Fatalf("Got(location after the evidence link) = %s; want %s", u, link.Value)
	}
	h1, err := chromedp.Run(b.Ctx, chromedp.Text(css(`main h1`)))
	if err != nil || !strings.Contains(h1, "ersion") {
		t.Errorf("Got(heading of the evidence page) = %q, %v; want the policy version", h1, err)
	}
	b.Screenshot(t, artifacts, "compliance-evidence.png")

	b.Do(t, "print view", chromedp.Navigate(ce.env.URL+"/compliance/print"), chromedp.WaitVisible(css(`#scorecard`)))
	if !evalBool(`[...document.querySelectorAll("#checklist details")].every(d => d.open)`) {
		t.Error("Got(print view) with closed items; want every item open")
	}
	b.Screenshot(t, artifacts, "compliance-print.png")

	for _, p := range b.Problems() {
		t.Errorf("Got(console) %s; want no errors, exceptions or CSP violations", p)
	}
}
