package web_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestSandboxProcessesBrowser: a sandbox's page lists its processes (the
// process API) with pid, command, state and exit, at desktop and phone
// width, without console errors or CSP violations. Screenshots of both.
func TestSandboxProcessesBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "dev@example.com", tenants.RoleDeveloper)
	sb := sandboxtest.Record(t, env.DB, acme.ID, "dev@example.com")
	sandboxtest.RecordProcess(t, env.DB, acme.ID, sb.ID, 31, sandbox.ProcessRunning)
	sandboxtest.RecordProcess(t, env.DB, acme.ID, sb.ID, 17, sandbox.ProcessExited)
	css := webtest.CSS

	b.Login(t, env.URL+"/sandboxes/"+sb.ID, "dev@example.com", `#sandbox-processes`)
	if got := b.Text(t, `#sandbox-processes`); !strings.Contains(got, "1 running, 1 ended") || !strings.Contains(got, "sleep 600") {
		t.Errorf("Got(processes section) = %q; want 1 running, 1 ended, the command", got)
	}
	if got := b.Text(t, `#sandbox-processes tr[data-pid="17"] td[data-label="State"]`); got != "exit 0" {
		t.Errorf("Got(state of the ended process) = %q; want exit 0", got)
	}
	if got := b.Text(t, `#sandbox-processes tr[data-pid="31"] td[data-label="State"]`); got != "running" {
		t.Errorf("Got(state of the running process) = %q; want running", got)
	}
	b.Do(t, "desktop", chromedp.EmulateViewport(1366, 900), chromedp.ScrollIntoView(css(`#sandbox-processes`)))
	b.Screenshot(t, artifacts, "sandbox-processes.png")
	b.Do(t, "phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Reload(), chromedp.WaitVisible(css(`#sandbox-processes`)))
	b.Screenshot(t, artifacts, "sandbox-processes-phone.png")
	for _, p := range b.Problems() {
		t.Errorf("Got(console problem) = %s; want none", p)
	}
}
