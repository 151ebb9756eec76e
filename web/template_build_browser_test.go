package web_test

import (
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestTemplateBuildPages: "Build from a recipe" shows the example; a
// recipe with three bad fields comes back with all three listed and the
// text kept; a good one (debian + tree) starts a build whose page follows
// its log live to "Step 5 of 5: pack" and succeeded. The base images are
// the test data dir's; no VM boots. No console error or CSP violation.
func TestTemplateBuildPages(t *testing.T) {
	dataDir := sandboxtest.NeedVMs(t)
	db := dbtest.SQLite(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	vms, sbx := sandboxtest.Start(t, db, vmpool.Config{DataDir: dataDir, Logger: log}, sandbox.Config{DefaultTemplate: "busybox"})
	if !hasTemplate(sbx.Templates(), "debian") {
		if os.Getenv("CI") != "" {
			t.Fatalf("no debian template in %s", dataDir)
		}
		t.Skipf("no debian template in %s", dataDir)
	}
	env := webtest.New(t, webtest.Options{DB: db, VMs: vms, Sandboxes: sbx})
	tn := env.TenantNamed(t, "recipe-co", "Recipe Company")
	env.Member(t, tn, "dev@recipe.test", tenants.RoleDeveloper)
	b := webtest.NewBrowser(t)
	b.WatchCSP(t)
	css := webtest.CSS
	b.Login(t, env.URL+"/templates/build", "dev@recipe.test", `#recipe-source`)
	if got := b.Value(t, `#recipe-source`); !strings.Contains(got, "apiVersion: stockade.dev/template/v1") {
		t.Errorf("Got(prefilled recipe) = %q; want the example", got)
	}
	for _, size := range []struct {
		name string
		w, h int64
	}{{"desktop", 1366, 900}, {"phone", 390, 844}} {
		var opts []chromedp.EmulateViewportOption
		if size.name == "phone" {
			opts = append(opts, chromedp.EmulateMobile)
		}
		b.Do(t, "form "+size.name, chromedp.EmulateViewport(size.w, size.h, opts...), chromedp.Navigate(env.URL+"/templates/build"),
			chromedp.WaitVisible(css(`#recipe-source`)))
		b.Screenshot(t, artifacts, "template-build-form-"+size.name+".png")
	}
	b.Do(t, "desktop", chromedp.EmulateViewport(1366, 900))

	bad := "apiVersion: stockade.dev/template/v1\nname: Bad Name\nbase: alpine\nuser: root\n"
	b.Do(t, "submit a bad recipe", chromedp.SetValue(css(`#recipe-source`), bad), chromedp.Click(css(`#recipe-form button[type=submit]`)),
		chromedp.WaitVisible(css(`#recipe-errors`)))
	errs := b.Text(t, `#recipe-errors`)
	for _, want := range []string{"3 errors", "/name", "/base", "/user"} {
		if !strings.Contains(errs, want) {
			t.Errorf("Got(errors) = %q; want %q in it", errs, want)
		}
	}
	if got := b.Value(t, `#recipe-source`); got != bad {
		t.Errorf("Got(recipe after a refusal) = %q; want the text kept", got)
	}
	if id := webtest.Eval[string](t, b, `document.activeElement.id`); id != "recipe-errors" {
		t.Errorf("Got(focus after a refusal) = %q; want the errors", id)
	}
	b.Screenshot(t, artifacts, "template-build-errors.png")

	good := "apiVersion: stockade.dev/template/v1\nname: tree-tools\nbase: debian\npackages: [tree]\nfiles:\n  /opt/readme.txt: {content: \"from the page\\n\"}\n"
	b.Do(t, "submit a good recipe", chromedp.SetValue(css(`#recipe-source`), good), chromedp.Click(css(`#recipe-form button[type=submit]`)),
		chromedp.WaitVisible(css(`#build-log`)))
	if loc := b.Location(t); !strings.Contains(loc, "/templates/tree-tools/builds/") {
		t.Fatalf("Got(location after Build) = %s; want the build's page", loc)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for b.Text(t, `#build-state`) == "running" && time.Now().Before(deadline) {
		time.Sleep(time.Second)
	}
	if state := b.Text(t, `#build-state`); state != "succeeded" {
		t.Fatalf("Got(build state) = %q; want succeeded: %s\n%s", state, b.Text(t, `#build-error`), b.Text(t, `#build-log`))
	}
	if got := b.Text(t, `#build-progress`); got != "Step 5 of 5: pack" {
		t.Errorf("Got(progress) = %q; want Step 5 of 5: pack", got)
	}
	logText := b.Text(t, `#build-log`)
	for _, want := range []string{"step 2 of 5: packages", "unpack tree", "build succeeded"} {
		if !strings.Contains(logText, want) {
			t.Errorf("Got(log on the page) lacks %q:\n%s", want, logText)
		}
	}
	if got := b.Text(t, `#build-log-status`); got != "build succeeded" {
		t.Errorf("Got(log status) = %q; want build succeeded (the live stream ended it)", got)
	}
	b.Screenshot(t, artifacts, "template-build-done-desktop.png")
	b.Do(t, "phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Reload(), chromedp.WaitVisible(css(`#build-log`)))
	b.Screenshot(t, artifacts, "template-build-done-phone.png")
	for _, p := range b.Problems() {
		// The refused recipe's page answers 422, as the API would.
		if !strings.Contains(p, "status of 422") {
			t.Errorf("Got(console problem) = %s; want none", p)
		}
	}
	if v := b.CSPViolations(t); len(v) > 0 {
		t.Errorf("Got(CSP violations) = %v; want none", v)
	}
}

func hasTemplate(ts []image.Template, name string) bool {
	for _, t := range ts {
		if t.Name == name {
			return true
		}
	}
	return false
}
