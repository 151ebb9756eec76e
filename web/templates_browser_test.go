package web_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestTemplatesPages: the tenant's Templates page lists its own template
// (source, version, size, digest, in use) and no other tenant's; the
// delete button is offered only for an unused one and deletes it after the
// confirm step; the operator's page shows each tenant's storage against
// its quota. Screenshots at desktop and phone width; no console errors or
// CSP violations.
func TestTemplatesPages(t *testing.T) {
	env := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t), Operators: []string{"olga@example.com"}})
	ctx := context.Background()
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	globex := env.TenantNamed(t, "globex", "Globex")
	env.Member(t, acme, "ada@example.com", tenants.RoleAdmin)
	mk := func(tenantID, name, source string) templates.Version {
		v, err := env.App.Templates.Begin(ctx, tenantID, templates.Begin{Name: name, Source: source, SourceRef: "ref of " + name, CreatedBy: "ada@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		tree := t.TempDir()
		os.WriteFile(filepath.Join(tree, "hello.txt"), []byte(name), 0o644)
		if v, err = env.App.Templates.Finish(ctx, tenantID, v.ID, tree, templates.Defaults{}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	mk(acme.ID, "node-tools", templates.SourceRecipe)
	used := mk(acme.ID, "pyimage", templates.SourceOCI)
	mk(globex.ID, "globex-secret-tpl", templates.SourceRecipe)
	sb := sandboxtest.RecordState(t, env.DB, acme.ID, "ada@example.com", "running")
	if err := env.DB.Exec("UPDATE sandboxes SET template = ?, template_version = ? WHERE id = ?", "pyimage", used.ID, sb.ID).Error; err != nil {
		t.Fatal(err)
	}

	b := webtest.NewBrowser(t)
	b.WatchCSP(t)
	b.Login(t, env.URL+"/templates", "ada@example.com", `#templates`)
	body := b.Text(t, "main")
	for _, want := range []string{"node-tools", "pyimage", "recipe", "oci", "v1"} {
		if !strings.Contains(body, want) {
			t.Errorf("Got(templates page) without %q; want it", want)
		}
	}
	if strings.Contains(body, "globex-secret-tpl") {
		t.Errorf("Got(templates page) shows globex's template; want only acme's")
	}
	if n := webtest.Eval[int](t, b, `document.querySelectorAll("tr[data-template=pyimage] form").length`); n != 0 {
		t.Errorf("Got(delete forms of the template in use) = %d; want none", n)
	}
	for _, size := range []struct {
		name string
		w, h int64
	}{{"desktop", 1366, 900}, {"phone", 390, 844}} {
		var opts []chromedp.EmulateViewportOption
		if size.name == "phone" {
			opts = append(opts, chromedp.EmulateMobile)
		}
		b.Do(t, "templates "+size.name, chromedp.EmulateViewport(size.w, size.h, opts...), chromedp.Navigate(env.URL+"/templates"), chromedp.WaitVisible(webtest.CSS(`#templates`)))
		if size.name == "phone" {
			if w := webtest.Eval[float64](t, b, `document.documentElement.scrollWidth`); w > float64(size.w) {
				t.Errorf("Got(page width of the templates page on a phone) = %v px; want at most %d", w, size.w)
			}
		}
		b.Screenshot(t, artifacts, "templates-"+size.name+".png")
	}
	if v := b.CSPViolations(t); len(v) > 0 {
		t.Errorf("Got(CSP violations) = %v; want none", v)
	}
	for _, m := range b.Problems() {
		t.Errorf("Got(console) %s; want no errors", m)
	}

	// Delete without the script's dialog: the confirm step first.
	admin := env.Login(t, "ada@example.com")
	if s, body, _ := admin.Post(t, "/templates/node-tools/delete", nil); s != http.StatusOK || !strings.Contains(body, "Delete template node-tools") {
		t.Errorf("Got(delete without confirm) = %d; want the confirm page: %.300s", s, body)
	}
	if s, _, _ := admin.Post(t, "/templates/node-tools/delete", url.Values{"confirm": {"yes"}}); s != http.StatusSeeOther {
		t.Errorf("Got(delete confirmed) = %d; want 303", s)
	}
	if s, _, _ := admin.Post(t, "/templates/pyimage/delete", url.Values{"confirm": {"yes"}}); s != http.StatusConflict {
		t.Errorf("Got(delete of a template in use) = %d; want 409", s)
	}
	if s, _, _ := admin.Post(t, "/templates/globex-secret-tpl/delete", url.Values{"confirm": {"yes"}}); s != http.StatusNotFound {
		t.Errorf("Got(delete of globex's template) = %d; want 404", s)
	}

	ob := webtest.NewBrowser(t)
	ob.WatchCSP(t)
	ob.Login(t, env.URL+"/operator/templates", "olga@example.com", `#operator-templates`)
	if txt := ob.Text(t, "#operator-templates"); !strings.Contains(txt, "acme-corp") || !strings.Contains(txt, "globex") || !strings.Contains(txt, "of 10 GiB") {
		t.Errorf("Got(operator templates) = %q; want both tenants against their 10 GiB quota", txt)
	}
	for _, size := range []struct {
		name string
		w, h int64
	}{{"desktop", 1366, 900}, {"phone", 390, 844}} {
		var opts []chromedp.EmulateViewportOption
		if size.name == "phone" {
			opts = append(opts, chromedp.EmulateMobile)
		}
		ob.Do(t, "operator templates "+size.name, chromedp.EmulateViewport(size.w, size.h, opts...), chromedp.Navigate(env.URL+"/operator/templates"), chromedp.WaitVisible(webtest.CSS(`#operator-templates`)))
		ob.Screenshot(t, artifacts, "operator-templates-"+size.name+".png")
	}
	if v := ob.CSPViolations(t); len(v) > 0 {
		t.Errorf("Got(CSP violations on the operator page) = %v; want none", v)
	}
	for _, m := range ob.Problems() {
		t.Errorf("Got(console) %s; want no errors", m)
	}
}
