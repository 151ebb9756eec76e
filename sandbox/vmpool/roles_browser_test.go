package vmpool_test

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestVMsPageByRoleBrowser: in headless Chromium, an admin's VMs page has
// the controls (start a VM, the pool settings); a manager's, which reads
// the tenant and changes nothing, has none. libvirt is unreachable here on
// purpose: the page and its controls are what is under test, not a boot.
func TestVMsPageByRoleBrowser(t *testing.T) {
	db := freshDB(t)
	bogus := "qemu+unix:///system?socket=" + t.TempDir() + "/no-libvirt-sock"
	env := newWeb(t, db, newService(t, db, t.TempDir(), bogus))
	ts := tenants.NewStore(db, nil)
	tn, err := ts.CreateTenantWithAdmin(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, "roles", "Roles Inc", "admin@roles.example")
	if err != nil {
		t.Fatal(err)
	}
	env.Member(t, tn, "manager@roles.example", tenants.RoleManager)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	for _, tc := range []struct {
		email    string
		controls bool
	}{
		{"admin@roles.example", true},
		{"manager@roles.example", false},
	} {
		t.Run(tc.email, func(t *testing.T) {
			b := webtest.NewBrowser(t)
			b.Do(t, "open /vms", chromedp.Navigate(env.URL+"/vms"), chromedp.WaitVisible(css(`form[action="/login/start"] button`)))
			b.Do(t, "click Sign in", chromedp.Click(css(`form[action="/login/start"] button`)), chromedp.WaitVisible(css(`input[name="email"]`)))
			b.Do(t, "sign in at the provider",
				chromedp.SendKeys(css(`input[name="email"]`), tc.email),
				chromedp.Click(css(`button[value="login"]`)),
				chromedp.WaitVisible(css(`#vm-unavailable`)))
			n, err := chromedp.Run(b.Ctx, chromedp.Evaluate[int](`document.querySelectorAll('main form[method="post"] button, main [hx-post]').length`))
			if err != nil {
				t.Fatal(err)
			}
			if got := n > 0; got != tc.controls {
				t.Errorf("Got(VM controls on the page of %s) = %d; want controls %v", tc.email, n, tc.controls)
			}
			b.Screenshot(t, "../../test-artifacts", "vms-"+tc.email[:len(tc.email)-len("@roles.example")]+".png")
			if p := b.Problems(); len(p) > 0 {
				t.Errorf("browser console problems: %v", p)
			}
		})
	}
}
