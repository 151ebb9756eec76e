package web_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/sandbox/templates/oci/ocitest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestTemplateImportBrowser: a developer uploads an image archive with the
// keyboard-reachable form in headless Chromium; a refused one says why in
// place, next to the field, with the name kept; a good one lands on the
// templates. No console errors or CSP violations. Screenshots (desktop
// and phone) of the refusal.
func TestTemplateImportBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	b.WatchCSP(t)
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "dev@example.com", tenants.RoleDeveloper)
	css := webtest.CSS
	dir := t.TempDir()
	bad, good := filepath.Join(dir, "bad.tar"), filepath.Join(dir, "good.tar")
	os.WriteFile(bad, ocitest.DockerTar(t, ocitest.Image(t, nil, "", "", ocitest.Layer(t, ocitest.Dir("a"), ocitest.Symlink("a/evil", "../../etc/shadow")))), 0o644)
	os.WriteFile(good, ocitest.DockerTar(t, ocitest.Image(t, []string{"A=b"}, "/srv", "", ocitest.Layer(t, ocitest.File("srv/x", "x")))), 0o644)

	b.Login(t, env.URL+"/templates/import", "dev@example.com", `form[action="/templates/import"] input[name="name"]`)
	b.Do(t, "upload an image whose symlink escapes",
		chromedp.SendKeys(css(`#import-name`), "escape"),
		chromedp.SetUploadFiles(css(`#import-image`), []string{bad}),
		chromedp.Click(css(`form[action="/templates/import"] button[type="submit"]`)),
		chromedp.WaitVisible(css(`#import-image-error`)))
	if msg := b.Text(t, `#import-image-error`); !strings.Contains(msg, `symlink "a/evil" -> "../../etc/shadow" points outside the image root`) {
		t.Errorf("Got(error next to the archive) = %q; want the escape named", msg)
	}
	if v := b.Value(t, `#import-name`); v != "escape" {
		t.Errorf("Got(name after the refusal) = %q; want it kept", v)
	}
	for _, size := range []struct {
		name string
		w, h int64
	}{{"desktop", 1366, 900}, {"phone", 390, 844}} {
		b.Do(t, "viewport "+size.name, chromedp.EmulateViewport(size.w, size.h))
		b.Screenshot(t, artifacts, "template-import-"+size.name+".png")
	}
	b.Do(t, "upload a good image",
		chromedp.EmulateViewport(1366, 900),
		chromedp.Clear(css(`#import-name`)),
		chromedp.SendKeys(css(`#import-name`), "good"),
		chromedp.SetUploadFiles(css(`#import-image`), []string{good}),
		chromedp.Click(css(`form[action="/templates/import"] button[type="submit"]`)),
		chromedp.WaitNotPresent(css(`form[action="/templates/import"]`)))
	if loc := b.Location(t); !strings.Contains(loc, "/templates") {
		t.Errorf("Got(location after the import) = %q; want the templates", loc)
	}
	// The refusal's own 422 is the page answering as the API does; the
	// templates page it lands on afterwards is tpl's (tested there).
	for _, p := range b.Problems() {
		if !strings.Contains(p, "status of 422") && !strings.Contains(p, "/templates?imported=") {
			t.Errorf("Got(console problem) = %s; want none", p)
		}
	}
	if v := b.CSPViolations(t); len(v) > 0 {
		t.Errorf("Got(CSP violations) = %v; want none", v)
	}
}
