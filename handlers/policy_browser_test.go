package handlers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// textOf is the text of the first element matching sel, "" when none.
func textOf(t *testing.T, b *webtest.Browser, sel string) string {
	t.Helper()
	return strings.TrimSpace(webtest.Eval[string](t, b, `(document.querySelector(`+webtest.JSString(sel)+`) || {textContent: ""}).textContent`))
}

// TestPolicyEditorBrowser: an admin edits a limit and the allowlist in
// headless Chromium, sees the validation errors in place for a negative
// memory and a malformed domain, previews, saves, and sees the new version
// and its diff. The pages raise no console or CSP problem.
func TestPolicyEditorBrowser(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme", "Acme")
	env.Member(t, acme, "ann@acme.test", tenants.RoleAdmin)
	b := webtest.NewBrowser(t)
	browserLogin(t, b, env.URL, "ann@acme.test")
	shots := artifacts + "/policy"

	b.Do(t, "open the policy page", chromedp.Navigate(env.URL+"/policy"), chromedp.WaitVisible(css(`#resources form`)))
	if got := textOf(t, b, "#policy-current"); got != "version 0 (defaults)" {
		t.Errorf("Got(current version) = %q; want version 0 (defaults)", got)
	}

	// A negative memory limit: the error sits next to its field.
	b.Do(t, "preview a negative memory",
		chromedp.SetValue(css(`#p-resources-max_memory_mib`), "-1"),
		chromedp.Click(css(`#resources button[value="preview"]`)),
		chromedp.WaitVisible(css(`#p-resources-max_memory_mib-error`)))
	if got := textOf(t, b, "#p-resources-max_memory_mib-error"); !strings.Contains(got, "16") {
		t.Errorf("Got(memory error) = %q; want it to name the minimum 16", got)
	}
	if v, _ := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`document.querySelector("#p-resources-max_memory_mib").value`)); v != "-1" {
		t.Errorf("Got(memory input after the error) = %q; want the typed -1 kept", v)
	}
	b.Screenshot(t, shots, "1-negative-memory.png")

	b.Do(t, "preview 256 MiB",
		chromedp.SetValue(css(`#p-resources-max_memory_mib`), "256"),
		chromedp.Click(css(`#resources button[value="preview"]`)),
		chromedp.WaitVisible(css(`#resources-preview`)))
	if got := textOf(t, b, "#resources-preview"); !strings.Contains(got, "/resources/max_memory_mib") || !strings.Contains(got, "256") {
		t.Errorf("Got(preview) = %q; want the memory change to 256", got)
	}
	b.Screenshot(t, shots, "2-preview.png")
	b.Do(t, "save the limit",
		chromedp.SetValue(css(`#resources-reason`), "smaller sandboxes"),
		chromedp.Click(css(`#resources button[value="save"]`)),
		chromedp.WaitVisible(css(`#policy-saved`)))
	if got := textOf(t, b, "#policy-current"); got != "version 1" {
		t.Errorf("Got(current version after saving) = %q; want version 1", got)
	}

	// A malformed domain in the allowlist: the error names the line.
	b.Do(t, "preview a malformed domain",
		chromedp.SetValue(css(`#p-network-egress-allow`), "api.github.com 443\nbad domain!"),
		chromedp.Click(css(`#network button[value="preview"]`)),
		chromedp.WaitVisible(css(`#p-network-egress-allow-error`)))
	if got := textOf(t, b, "#p-network-egress-allow-error"); !strings.Contains(got, "line 2") || !strings.Contains(got, "not a domain") {
		t.Errorf("Got(allowlist error) = %q; want line 2 named as not a domain", got)
	}
	b.Screenshot(t, shots, "3-malformed-domain.png")
	b.Do(t, "preview and save the allowlist",
		chromedp.SetValue(css(`#p-network-egress-allow`), "api.github.com 443\n*.pypi.org"),
		chromedp.Click(css(`#network button[value="preview"]`)),
		chromedp.WaitVisible(css(`#network-preview`)),
		chromedp.SetValue(css(`#network-reason`), "GitHub and PyPI"),
		chromedp.Click(css(`#network button[value="save"]`)),
		chromedp.WaitVisible(css(`#policy-saved`)))
	if got := textOf(t, b, "#policy-current"); got != "version 2" {
		t.Errorf("Got(current version after the allowlist) = %q; want version 2", got)
	}

	b.Do(t, "open version 2",
		chromedp.Click(css(`#policy-versions a[href="/policy/versions/2"]`)),
		chromedp.WaitVisible(css(`.policy-diff`)))
	diff := textOf(t, b, ".policy-diff")
	for _, want := range []string{"/network/egress/allow", "api.github.com", "*.pypi.org"} {
		if !strings.Contains(diff, want) {
			t.Errorf("Got(diff of version 2) = %q; want it to contain %q", diff, want)
		}
	}
	if strings.Contains(diff, "max_memory_mib") {
		t.Errorf("Got(diff of version 2) = %q; want only the allowlist (memory changed in version 1)", diff)
	}
	b.Screenshot(t, shots, "4-version-diff.png")

	// Give late console messages a moment to arrive, then check none.
	time.Sleep(200 * time.Millisecond)
	// The invalid previews answered 422 on purpose (Chromium logs the
	// status of every failed load); anything else is a broken page.
	for _, p := range b.Problems() {
		if !strings.Contains(p, "status of 422") {
			t.Errorf("Got(console) %s; want no errors, exceptions or CSP violations", p)
		}
	}
}
