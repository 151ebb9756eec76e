package vmpool_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestHostsPageBrowser: an operator on /operator/hosts (two real libvirt
// hosts, no VM booted): adding a host that does not answer shows the error
// next to the URI and adds nothing; cordoning a host from its button shows
// it cordoned; drain asks to confirm first. Desktop and phone screenshots,
// no console problems.
func TestHostsPageBrowser(t *testing.T) {
	hypervisortest.NeedSystem(t)
	second := hypervisortest.StartLibvirtd(t)
	db := freshDB(t)
	svc, err := vmpool.New(ctx, db, vmpool.Config{URIs: []string{systemURI, second.URI}, DataDir: t.TempDir(), Logger: testLogger(t),
		ConnectTimeout: 30 * time.Second, DomainType: "qemu"})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	env := newWeb(t, db, svc, "ops@hosts.example")
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	b := webtest.NewBrowser(t)
	b.Do(t, "open /operator/hosts", chromedp.EmulateViewport(1366, 900), chromedp.Navigate(env.URL+"/operator/hosts"),
		chromedp.WaitVisible(css(`form[action="/login/start"] button`)))
	b.Do(t, "click Sign in", chromedp.Click(css(`form[action="/login/start"] button`)), chromedp.WaitVisible(css(`input[name="email"]`)))
	b.Do(t, "sign in", chromedp.SendKeys(css(`input[name="email"]`), "ops@hosts.example"), chromedp.Click(css(`button[value="login"]`)),
		chromedp.WaitVisible(css(`#add-host-title`)))
	if n := webtest.Eval[int](t, b, `document.querySelectorAll('tr[data-host]').length`); n != 2 {
		t.Fatalf("Got(host rows) = %d; want 2", n)
	}
	b.Do(t, "add an unreachable host", chromedp.SendKeys(css(`input[name="uri"]`), "qemu+tcp://127.0.0.1:1/system"),
		chromedp.Click(css(`#add-host-title ~ form button[type="submit"]`)), chromedp.WaitVisible(css(`.flash-error`)))
	if page := b.Text(t, "main"); !strings.Contains(page, "does not answer") {
		t.Errorf("Got(page after adding an unreachable host) = %.400q; want it to say it does not answer", page)
	}
	if n := webtest.Eval[int](t, b, `document.querySelectorAll('tr[data-host]').length`); n != 2 {
		t.Errorf("Got(host rows after a refused add) = %d; want 2", n)
	}
	sel := `tr[data-host="` + second.URI + `"] form[action="/operator/hosts/cordon"] button`
	b.Do(t, "cordon the second host", chromedp.Click(css(sel)), chromedp.WaitVisible(css(`tr[data-host="`+second.URI+`"][data-state="cordoned"]`)))
	b.Screenshot(t, "../../test-artifacts", "hosts-desktop.png")
	b.Do(t, "drain asks first", chromedp.Click(css(`tr[data-host="`+second.URI+`"] form[action="/operator/hosts/drain"] button`)),
		chromedp.WaitVisible(css(`#confirm-title`)))
	b.Do(t, "phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(env.URL+"/operator/hosts"),
		chromedp.WaitVisible(css(`#add-host-title`)))
	b.Screenshot(t, "../../test-artifacts", "hosts-phone.png")
	for _, p := range b.Problems() {
		if !strings.Contains(p, "status of 422") { // the refused add, on purpose
			t.Errorf("browser console problem: %s", p)
		}
	}
}
