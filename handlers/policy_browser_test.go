package handlers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/web/webtest"
)

// textOf is the text of the first element matching sel, "" when none.
func textOf(t *testing.T, b *webtest.Browser, sel string) string {
	t.Helper()
	return strings.TrimSpace(webtest.Eval[string](t, b, `(document.querySelector(`+webtest.JSString(sel)+`) || {textContent: ""}).textContent`))
}

// viewShot saves what the viewport shows (not the full page), to see where
// a page lands.
func viewShot(t *testing.T, b *webtest.Browser, dir, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// focused is where the focus is and whether it is in the viewport, below
// the sticky top bar.
type focused struct {
	ID     string `json:"id"`
	InView bool   `json:"inView"`
}

func focusOf(t *testing.T, b *webtest.Browser) focused {
	t.Helper()
	return webtest.Eval[focused](t, b, `(() => {
		const e = document.activeElement, r = e.getBoundingClientRect();
		const top = Math.max(0, document.querySelector(".topbar").getBoundingClientRect().bottom);
		return {id: e.id, inView: r.top >= top && r.bottom <= innerHeight && r.height > 0};
	})()`)
}

// inView says whether the element matching sel is wholly in the viewport,
// below the sticky top bar.
func inView(t *testing.T, b *webtest.Browser, sel string) bool {
	t.Helper()
	return webtest.Eval[bool](t, b, `(() => {
		const e = document.querySelector(`+webtest.JSString(sel)+`);
		if (!e) return false;
		const r = e.getBoundingClientRect();
		const top = Math.max(0, document.querySelector(".topbar").getBoundingClientRect().bottom);
		return r.top >= top && r.bottom <= innerHeight && r.height > 0;
	})()`)
}

// tableGeometry is how a table lays out: its CSS display, whether every
// header cell sits above the first body row, and whether that row's cells
// sit side by side (same top, left to right) rather than stacked.
type tableGeometry struct {
	Display     string `json:"display"`
	Headers     int    `json:"headers"`
	Cells       int    `json:"cells"`
	HeadAbove   bool   `json:"headAbove"`
	SideBySide  bool   `json:"sideBySide"`
	UnderHeader bool   `json:"underHeader"`
}

func geometryOf(t *testing.T, b *webtest.Browser, sel string) tableGeometry {
	t.Helper()
	return webtest.Eval[tableGeometry](t, b, `(() => {
		const tb = document.querySelector(`+webtest.JSString(sel)+`);
		if (!tb) return {display: "missing"};
		const ths = [...tb.querySelectorAll("thead th")].map(e => e.getBoundingClientRect());
		const tds = [...tb.querySelectorAll("tbody tr:first-child > td")].map(e => e.getBoundingClientRect());
		const headBottom = Math.max(...ths.map(r => r.bottom));
		return {
			display: getComputedStyle(tb).display,
			headers: ths.length, cells: tds.length,
			headAbove: ths.length > 0 && ths.every(r => r.height > 0) && tds.every(r => r.top >= headBottom - 1),
			sideBySide: tds.length > 1 && tds.every((r, i) => Math.abs(r.top - tds[0].top) < 1 && (i == 0 || r.left >= tds[i-1].right - 1)),
			underHeader: tds.length > 0 && tds.every((r, i) => ths[i] && Math.abs(r.left - ths[i].left) < 1),
		};
	})()`)
}

func wantTable(t *testing.T, b *webtest.Browser, sel string) {
	t.Helper()
	g := geometryOf(t, b, sel)
	if g.Display != "table" || !g.HeadAbove || !g.SideBySide || !g.UnderHeader {
		t.Errorf("Got(geometry of %s at 1366 px) = %+v; want a table: header cells above, value cells side by side in one row, each under its header", sel, g)
	}
}

// change is one row of a diff table as the page shows it.
type change struct {
	Path  string `json:"path"`
	Label string `json:"label"`
	Old   string `json:"old"`
	New   string `json:"new"`
}

func changesOf(t *testing.T, b *webtest.Browser, sel string) []change {
	t.Helper()
	return webtest.Eval[[]change](t, b, `[...document.querySelectorAll(`+webtest.JSString(sel+` [data-testid="policy-change"]`)+`)].map(tr => ({
		path: tr.dataset.path,
		label: tr.querySelector('[data-testid="policy-change-label"]').textContent.trim(),
		old: (tr.querySelector('[data-testid="policy-change-old"]') || {textContent: ""}).innerText.trim().replace(/\s+/g, " "),
		new: tr.querySelector('[data-testid="policy-change-new"]').innerText.trim().replace(/\s+/g, " "),
	}))`)
}

func wantChange(t *testing.T, got []change, want change) {
	t.Helper()
	for _, c := range got {
		if c.Path == want.Path {
			if c != want {
				t.Errorf("Got(diff row %s) = %+v; want %+v", want.Path, c, want)
			}
			return
		}
	}
	t.Errorf("Got(diff rows) = %+v; want a row %+v", got, want)
}

var (
	desktop = chromedp.EmulateViewport(1366, 900)
	phone   = chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)
)

// TestPolicyEditorBrowser: an admin edits the policy in headless Chromium
// at 1366x900. The versions are linked from the top; a refused preview
// lands with the error in view and focused; the diff is a table (DOM
// geometry) of labels and readable values; a save without a reason is
// refused on the reason; the JSON editor's refusal is focused too; the
// version table is a table. The pages raise no console or CSP problem.
func TestPolicyEditorBrowser(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme", "Acme")
	env.Member(t, acme, "ann@acme.test", tenants.RoleAdmin)
	b := webtest.NewBrowser(t)
	browserLogin(t, b, env.URL, "ann@acme.test")
	shots := artifacts + "/policy"

	b.Do(t, "open the policy page", desktop, chromedp.Navigate(env.URL+"/policy"), chromedp.WaitVisible(css(`#resources form`)))
	if got := textOf(t, b, "#policy-current"); got != "version 0 (defaults)" {
		t.Errorf("Got(current version) = %q; want version 0 (defaults)", got)
	}
	if got := b.Attr(t, `[data-testid="policy-versions-link"]`, "href"); got != "#versions" || !inView(t, b, `[data-testid="policy-versions-link"]`) {
		t.Errorf("Got(versions link) href %q, in the first screen %v; want #versions at the top", got, inView(t, b, `[data-testid="policy-versions-link"]`))
	}
	if got := webtest.Eval[string](t, b, `getComputedStyle(document.querySelector("#policy-doc")).fontFamily`); !strings.Contains(got, "monospace") {
		t.Errorf("Got(JSON editor font) = %q; want monospace", got)
	}
	if got := webtest.Eval[bool](t, b, `(() => { const d = document.querySelector("#policy-doc"), f = d.closest("form"); return d.getBoundingClientRect().width >= f.getBoundingClientRect().width - 1; })()`); !got {
		t.Errorf("Got(JSON editor narrower than its form); want it full width")
	}
	if got := b.Attr(t, `#vm-pool a`, "href"); got != "/vms#pool-title" {
		t.Errorf("Got(VM pool link) = %q; want /vms#pool-title, the pool settings' one place", got)
	}
	if n := webtest.Eval[int](t, b, `document.querySelectorAll('[name^="/vm_pool/"]').length`); n != 0 {
		t.Errorf("Got(%d VM pool inputs on the policy page); want none: the pool settings are on the VMs page", n)
	}
	wantTable(t, b, "#policy-versions")
	b.Screenshot(t, shots, "desktop-1-page.png")

	// A negative memory limit, near the bottom of the first screen: the
	// page comes back with the field in error focused and in view.
	b.Do(t, "preview a negative memory",
		chromedp.SetValue(css(`#p-resources-max_memory_mib`), "-1"),
		chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, document.body.scrollHeight)`),
		chromedp.Click(css(`#resources button[value="preview"]`)),
		chromedp.WaitVisible(css(`#p-resources-max_memory_mib-error`)))
	if got := textOf(t, b, "#p-resources-max_memory_mib-error"); !strings.Contains(got, "16") {
		t.Errorf("Got(memory error) = %q; want it to name the minimum 16", got)
	}
	if got := b.Value(t, "#p-resources-max_memory_mib"); got != "-1" {
		t.Errorf("Got(memory input after the error) = %q; want the typed -1 kept", got)
	}
	if got := focusOf(t, b); got.ID != "p-resources-max_memory_mib" || !got.InView || !inView(t, b, "#p-resources-max_memory_mib-error") {
		t.Errorf("Got(focus after the refused preview) = %+v, error in view %v; want the memory field focused and its error in view",
			got, inView(t, b, "#p-resources-max_memory_mib-error"))
	}
	viewShot(t, b, shots, "desktop-2-refused-preview.png")

	b.Do(t, "preview 2048 MiB, 1024 MiB by default",
		chromedp.SetValue(css(`#p-resources-max_memory_mib`), "2048"),
		chromedp.SetValue(css(`#p-resources-default_memory_mib`), "1024"),
		chromedp.Click(css(`#resources button[value="preview"]`)),
		chromedp.WaitVisible(css(`#resources-preview`)))
	wantTable(t, b, "#resources-preview .policy-diff")
	got := changesOf(t, b, "#resources-preview")
	wantChange(t, got, change{Path: "/resources/default_memory_mib", Label: "Default memory", Old: "128 MiB", New: "1024 MiB"})
	wantChange(t, got, change{Path: "/resources/max_memory_mib", Label: "Max memory", Old: "512 MiB", New: "2048 MiB"})
	if txt := textOf(t, b, "#resources-preview"); strings.Contains(txt, "/resources/") {
		t.Errorf("Got(preview) = %q; want labels, no JSON pointer", txt)
	}
	if !inView(t, b, "#resources-preview h3") {
		t.Errorf("Got(preview heading out of view); want the page to land on the preview")
	}
	viewShot(t, b, shots, "desktop-3-preview.png")

	// Save without a reason: refused on the reason, focused, the preview kept.
	b.Do(t, "save without a reason",
		chromedp.Click(css(`#resources button[value="save"]`)),
		chromedp.WaitVisible(css(`#resources-reason-error`)))
	if got := focusOf(t, b); got.ID != "resources-reason" || !got.InView {
		t.Errorf("Got(focus after a save without reason) = %+v; want the reason focused in view", got)
	}
	if cur, err := env.Policies.Current(context.Background(), acme.ID); err != nil || cur.Version != 0 {
		t.Errorf("Got(current after a save without reason) = v%d, %v; want still v0", cur.Version, err)
	}
	b.Do(t, "save the limits",
		chromedp.SetValue(css(`#resources-reason`), "bigger sandboxes"),
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
	if got := focusOf(t, b); got.ID != "p-network-egress-allow" || !got.InView {
		t.Errorf("Got(focus after the refused allowlist) = %+v; want the allowlist focused in view", got)
	}
	b.Do(t, "preview and save the allowlist",
		chromedp.SetValue(css(`#p-network-egress-allow`), "api.github.com 443\nregistry.npmjs.org"),
		chromedp.Click(css(`#network button[value="preview"]`)),
		chromedp.WaitVisible(css(`#network-preview`)))
	wantChange(t, changesOf(t, b, "#network-preview"), change{Path: "/network/egress/allow", Label: "Egress allowlist", Old: "—",
		New: "+ api.github.com port 443 + registry.npmjs.org"})
	b.Do(t, "save the allowlist",
		chromedp.SetValue(css(`#network-reason`), "GitHub and npm"),
		chromedp.Click(css(`#network button[value="save"]`)),
		chromedp.WaitVisible(css(`#policy-saved`)))
	if got := textOf(t, b, "#policy-current"); got != "version 2" {
		t.Errorf("Got(current version after the allowlist) = %q; want version 2", got)
	}

	// The JSON editor: a document that is no JSON lands on its errors.
	b.Do(t, "preview a broken document",
		chromedp.SetValue(css(`#policy-doc`), `{"resources": `),
		chromedp.Click(css(`#raw button[value="preview"]`)),
		chromedp.WaitVisible(css(`#raw-errors`)))
	if got := focusOf(t, b); got.ID != "raw-errors" || !got.InView {
		t.Errorf("Got(focus after the refused document) = %+v; want the document's errors focused in view", got)
	}
	viewShot(t, b, shots, "desktop-4-refused-document.png")

	b.Do(t, "open version 2",
		chromedp.Navigate(env.URL+"/policy#versions"),
		chromedp.Click(css(`#policy-versions a[href="/policy/versions/2"]`)),
		chromedp.WaitVisible(css(`.policy-diff`)))
	wantTable(t, b, ".policy-diff")
	rows := changesOf(t, b, "main")
	if len(rows) != 1 || rows[0].Label != "Egress allowlist" || !strings.Contains(rows[0].New, "+ registry.npmjs.org") {
		t.Errorf("Got(diff of version 2) = %+v; want only the allowlist, + registry.npmjs.org", rows)
	}
	b.Screenshot(t, shots, "desktop-5-version.png")

	// Phone: the same pages stack.
	b.Do(t, "phone policy page", phone, chromedp.Navigate(env.URL+"/policy"), chromedp.WaitVisible(css(`#resources form`)))
	b.Screenshot(t, shots, "phone-1-page.png")
	b.Do(t, "phone refused preview",
		chromedp.SetValue(css(`#p-lifetime-max_timeout_seconds`), "0"),
		chromedp.Click(css(`#lifetime button[value="preview"]`)),
		chromedp.WaitVisible(css(`#p-lifetime-max_timeout_seconds-error`)))
	if got := focusOf(t, b); got.ID != "p-lifetime-max_timeout_seconds" || !got.InView {
		t.Errorf("Got(focus after the refused preview on a phone) = %+v; want the lifetime field focused in view", got)
	}
	viewShot(t, b, shots, "phone-2-refused-preview.png")
	b.Do(t, "phone preview",
		chromedp.SetValue(css(`#p-lifetime-max_timeout_seconds`), "7200"),
		chromedp.Click(css(`#lifetime button[value="preview"]`)),
		chromedp.WaitVisible(css(`#lifetime-preview`)))
	viewShot(t, b, shots, "phone-3-preview.png")
	b.Do(t, "back to desktop", chromedp.ResetViewport())

	// The invalid previews answered 422 on purpose (Chromium logs the
	// status of every failed load); anything else is a broken page.
	for _, p := range b.Problems() {
		if !strings.Contains(p, "status of 422") {
			t.Errorf("Got(console) %s; want no errors, exceptions or CSP violations", p)
		}
	}
}

// TestPolicyRollbackBrowser: a rollback from a version's page first shows
// what it changes against the version in force (rendered by the server)
// and asks why; without a reason it is refused on the reason, focused, and
// the store's current version does not move; with one it saves a new
// version, audited with that reason.
func TestPolicyRollbackBrowser(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme", "Acme")
	env.Member(t, acme, "ann@acme.test", tenants.RoleAdmin)
	ctx := context.Background()
	actor := audit.Actor{Kind: audit.ActorUser, ID: "seed", Name: "ann@acme.test"}
	cur, err := env.Policies.Current(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	d := cur.Doc
	d.Resources.DefaultMemoryMiB = 256
	v1 := policySave(t, env, acme.ID, actor, d, "more memory")
	d.Resources.DefaultMemoryMiB = 512
	d.Network.Egress.Allow = append(d.Network.Egress.Allow, policy.Rule{Domain: "registry.npmjs.org", Ports: []int{}})
	policySave(t, env, acme.ID, actor, d, "npm")

	b := webtest.NewBrowser(t)
	browserLogin(t, b, env.URL, "ann@acme.test")
	shots := artifacts + "/policy"
	b.Do(t, "review the rollback to version 1", desktop,
		chromedp.Navigate(env.URL+"/policy/versions/1"),
		chromedp.Click(css(`[data-testid="policy-rollback-review"]`)),
		chromedp.WaitVisible(css(`#rollback-preview`)))
	wantTable(t, b, "#rollback-preview .policy-diff")
	rows := changesOf(t, b, "#rollback-preview")
	wantChange(t, rows, change{Path: "/resources/default_memory_mib", Label: "Default memory", Old: "512 MiB", New: "256 MiB"})
	wantChange(t, rows, change{Path: "/network/egress/allow", Label: "Egress allowlist", Old: "− registry.npmjs.org", New: "—"})
	if cur, _ := env.Policies.Current(ctx, acme.ID); cur.Version != 2 {
		t.Errorf("Got(current after the review) = v%d; want v2: the review saves nothing", cur.Version)
	}
	b.Screenshot(t, shots, "desktop-6-rollback-confirm.png")

	b.Do(t, "roll back without a reason",
		chromedp.Click(css(`[data-testid="policy-rollback"]`)),
		chromedp.WaitVisible(css(`#rollback-reason-error`)))
	if got := focusOf(t, b); got.ID != "rollback-reason" || !got.InView {
		t.Errorf("Got(focus after a rollback without reason) = %+v; want the reason focused in view", got)
	}
	if got := changesOf(t, b, "#rollback-preview"); len(got) != len(rows) {
		t.Errorf("Got(diff after the refusal) = %+v; want the same diff shown again", got)
	}
	if cur, _ := env.Policies.Current(ctx, acme.ID); cur.Version != 2 {
		t.Errorf("Got(current after a rollback without reason) = v%d; want v2: nothing changes", cur.Version)
	}
	if n := len(env.Events(t, audit.TypePolicyRolledBack)); n != 0 {
		t.Errorf("Got(%d %s events after the refusal); want none", n, audit.TypePolicyRolledBack)
	}
	viewShot(t, b, shots, "desktop-7-rollback-no-reason.png")

	b.Do(t, "phone rollback confirm", phone, chromedp.Reload(), chromedp.WaitVisible(css(`#rollback-preview`)))
	b.Screenshot(t, shots, "phone-4-rollback-confirm.png")
	b.Do(t, "back to desktop", chromedp.ResetViewport())

	b.Do(t, "roll back with a reason",
		chromedp.SetValue(css(`#rollback-reason`), "npm broke the build"),
		chromedp.Click(css(`[data-testid="policy-rollback"]`)),
		chromedp.WaitVisible(css(`#policy-saved`)))
	now, err := env.Policies.Current(ctx, acme.ID)
	if err != nil || now.Version != 3 || now.RolledBackFrom == nil || *now.RolledBackFrom != 1 || now.Reason != "npm broke the build" ||
		now.Doc.Resources.DefaultMemoryMiB != v1.Doc.Resources.DefaultMemoryMiB {
		t.Errorf("Got(current after the rollback) = v%d from %v reason %q, %v; want v3, version 1's document, the reason given", now.Version, now.RolledBackFrom, now.Reason, err)
	}
	events := env.Events(t, audit.TypePolicyRolledBack)
	if len(events) != 1 || events[0].Details["reason"] != "npm broke the build" {
		t.Errorf("Got(%s events) = %+v; want one with the reason", audit.TypePolicyRolledBack, events)
	}
	for _, p := range b.Problems() {
		if !strings.Contains(p, "status of 422") {
			t.Errorf("Got(console) %s; want no errors, exceptions or CSP violations", p)
		}
	}
}

// policySave seeds a version through the store, as a save would.
func policySave(t *testing.T, env *webtest.Env, tenantID string, actor audit.Actor, d policy.Doc, reason string) policy.Version {
	t.Helper()
	v, err := env.Policies.Save(context.Background(), actor, tenantID, policy.Edit{Doc: d, Reason: reason})
	if err != nil {
		t.Fatalf("seed policy %q: %v", reason, err)
	}
	return v
}

// TestPolicyReadOnlyBrowser: a developer sees the policy read-only, and it
// looks it: disabled fields drawn dashed and muted, the JSON editor read
// only, no preview or save button.
func TestPolicyReadOnlyBrowser(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme", "Acme")
	env.Member(t, acme, "dan@acme.test", tenants.RoleDeveloper)
	b := webtest.NewBrowser(t)
	browserLogin(t, b, env.URL, "dan@acme.test")
	b.Do(t, "open the policy page", desktop, chromedp.Navigate(env.URL+"/policy"), chromedp.WaitVisible(css(`#resources form`)))
	type look struct {
		Disabled bool   `json:"disabled"`
		Border   string `json:"border"`
		ReadOnly bool   `json:"readOnly"`
		DocFont  string `json:"docFont"`
		Buttons  int    `json:"buttons"`
	}
	got := webtest.Eval[look](t, b, `(() => {
		const i = document.querySelector("#p-resources-max_memory_mib"), d = document.querySelector("#policy-doc");
		return {disabled: i.matches(":disabled"), border: getComputedStyle(i).borderTopStyle, readOnly: d.readOnly,
			docFont: getComputedStyle(d).fontFamily, buttons: document.querySelectorAll('main button[value="preview"], main button[value="save"]').length};
	})()`)
	if !got.Disabled || got.Border != "dashed" || !got.ReadOnly || !strings.Contains(got.DocFont, "monospace") || got.Buttons != 0 {
		t.Errorf("Got(read-only page) = %+v; want disabled dashed fields, a read-only monospaced editor, no buttons", got)
	}
	if got := textOf(t, b, "#policy-readonly"); !strings.Contains(got, "Read-only") {
		t.Errorf("Got(read-only note) = %q; want it to say so", got)
	}
	b.Screenshot(t, artifacts+"/policy", "desktop-8-read-only.png")
	for _, p := range b.Problems() {
		t.Errorf("Got(console) %s; want no errors, exceptions or CSP violations", p)
	}
}
