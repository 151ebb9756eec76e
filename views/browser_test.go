package views

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// cspRecorder collects, from the first script of every document, each CSP
// violation the page causes. Scripts injected over the DevTools protocol are
// not subject to the page's CSP, so the recorder itself never trips it.
const cspRecorder = `window.__csp = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__csp.push(e.violatedDirective + " " + (e.blockedURI || "inline") + " line " + e.lineNumber);
});`

func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("Chromium not found on PATH; CI must install it (apt-get install chromium)")
	}
	t.Skip("Chromium not found on PATH; install chromium to run the browser tests")
	return ""
}

// postLog records the forms the test server received.
type postLog struct {
	mu    sync.Mutex
	posts []url.Values
	paths []string
}

func (l *postLog) record(r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.posts = append(l.posts, r.PostForm)
	l.paths = append(l.paths, r.URL.Path)
}

func (l *postLog) snapshot() ([]string, []url.Values) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.paths...), append([]url.Values(nil), l.posts...)
}

func (l *postLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.posts, l.paths = nil, nil
}

// browserProblems collects what a person would see in the DevTools console:
// uncaught exceptions and error-level log entries (failed loads, CSP reports).
type browserProblems struct {
	mu   sync.Mutex
	list []string
}

func (b *browserProblems) add(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.list = append(b.list, s)
}

func (b *browserProblems) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.list
	b.list = nil
	return out
}

// newTab opens a browser tab that records CSP violations and console errors.
func newTab(t *testing.T, browser context.Context) (context.Context, *browserProblems) {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	problems := &browserProblems{}
	// The first Run opens the tab; no timeout on it (see chromedp.Run), one per
	// test on everything after.
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument,
		page.AddScriptToEvaluateOnNewDocumentParams{Source: cspRecorder}); err != nil {
		t.Fatalf("open browser tab: %v", err)
	}
	err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			problems.add("exception: " + e.ExceptionDetails.Text)
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError || e.Entry.Source == log.EntrySourceSecurity {
				problems.add(string(e.Entry.Source) + ": " + e.Entry.Text + " " + e.Entry.URL)
			}
		}
	})
	if err != nil {
		t.Fatalf("listen to browser tab: %v", err)
	}
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancelTimeout)
	return ctx, problems
}

func cspViolations(ctx context.Context) ([]string, error) {
	// Violation events are queued as tasks; let them run before reading.
	return chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`new Promise(r => setTimeout(() => r(window.__csp || []), 50))`, chromedp.EvalAwaitPromise))
}

func eval[T any](ctx context.Context, expr string) (T, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// TestBrowser loads every page in headless Chromium under the production CSP and
// works the JavaScript behaviours a person relies on.
func TestBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	posts := &postLog{}
	srv := httptest.NewServer(previewHandler(samplePages(), posts.record))
	t.Cleanup(srv.Close)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("start Chromium %s: %v", chrome, err)
	}

	t.Run("no CSP violations or console errors", func(t *testing.T) {
		ctx, problems := newTab(t, browser)
		for _, sp := range samplePages() {
			t.Run(sp.Name, func(t *testing.T) {
				if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/preview/"+sp.Name)); err != nil {
					t.Fatalf("load %s: %v", sp.Name, err)
				}
				got, err := cspViolations(ctx)
				if err != nil {
					t.Fatalf("read CSP violations: %v", err)
				}
				if len(got) > 0 {
					t.Errorf("Got(CSP violations) = %q; want none", got)
				}
				if p := problems.take(); len(p) > 0 {
					t.Errorf("Got(console problems) = %q; want none", p)
				}
				// htmx must have loaded and read our config, or it injects a <style>.
				cfg, err := eval[bool](ctx, `typeof htmx === "object" && htmx.config.includeIndicatorStyles === false && htmx.config.allowEval === false`)
				if err != nil {
					t.Fatalf("read htmx config: %v", err)
				}
				if !cfg {
					t.Errorf("Got(htmx loaded with indicator styles and eval off) = false; want true")
				}
			})
		}
	})

	t.Run("csp recorder catches violations", func(t *testing.T) {
		// Guards the test above: a page that breaks the CSP must be reported.
		ctx, _ := newTab(t, browser)
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/preview/dashboard")); err != nil {
			t.Fatalf("load: %v", err)
		}
		if _, err := eval[bool](ctx, `(() => { const d = document.createElement("div");
			d.setAttribute("style", "color: red"); document.body.append(d); return true; })()`); err != nil {
			t.Fatalf("add inline style: %v", err)
		}
		got, err := cspViolations(ctx)
		if err != nil {
			t.Fatalf("read CSP violations: %v", err)
		}
		if len(got) == 0 {
			t.Errorf("Got(CSP violations after an inline style) = none; want one")
		}
	})

	t.Run("tenant switcher submits on change", func(t *testing.T) {
		posts.reset()
		ctx, _ := newTab(t, browser)
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/preview/dashboard")); err != nil {
			t.Fatalf("load: %v", err)
		}
		hidden, err := eval[bool](ctx, `document.querySelector(".switcher button").hidden`)
		if err != nil {
			t.Fatalf("read switch button: %v", err)
		}
		if !hidden {
			t.Errorf("Got(switch button hidden) = false; want app.js to hide it")
		}
		err = chromedp.Do(ctx,
			chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
				_, err := eval[bool](ctx, `(() => { const s = document.getElementById("tenant-switch");
					s.value = "globex"; s.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`)
				return err
			}),
			chromedp.WaitVisible(chromedp.CSS("#received")),
		)
		if err != nil {
			t.Fatalf("switch tenant: %v", err)
		}
		paths, forms := posts.snapshot()
		if len(paths) != 1 || paths[0] != "/tenant/switch" {
			t.Fatalf("Got(POSTs) = %v; want one to /tenant/switch", paths)
		}
		if got := forms[0].Get("slug"); got != "globex" {
			t.Errorf("Got(slug) = %q; want %q", got, "globex")
		}
		if got := forms[0].Get("_csrf"); got != sampleCSRF {
			t.Errorf("Got(_csrf) = %q; want %q", got, sampleCSRF)
		}
	})

	t.Run("remove asks first", func(t *testing.T) {
		posts.reset()
		ctx, _ := newTab(t, browser)
		remove := chromedp.CSS(`form[action="/settings/members/m2/remove"] button`)
		dialog := chromedp.CSS(`dialog.confirm-dialog[open]`)
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/preview/members"), chromedp.Click(remove), chromedp.WaitVisible(dialog)); err != nil {
			t.Fatalf("click remove: %v", err)
		}
		msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`dialog.confirm-dialog p`)))
		if err != nil {
			t.Fatalf("read the dialog: %v", err)
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`dialog.confirm-dialog [data-confirm-cancel]`)), chromedp.WaitNotPresent(dialog)); err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		if !strings.Contains(msg, "grace@acme.test") {
			t.Errorf("Got(confirm dialog) = %q; want it naming grace@acme.test", msg)
		}
		// A submit that Cancel failed to stop would have left the page,
		// and this second click needs the members page still loaded.
		if err := chromedp.Do(ctx, chromedp.Click(remove), chromedp.WaitVisible(dialog),
			chromedp.Click(chromedp.CSS(`dialog.confirm-dialog [data-confirm-ok]`)), chromedp.WaitVisible(chromedp.CSS("#received"))); err != nil {
			t.Fatalf("click remove, then confirm: %v", err)
		}
		paths, forms := posts.snapshot()
		if len(paths) != 1 || paths[0] != "/settings/members/m2/remove" {
			t.Fatalf("Got(POSTs) = %v; want exactly the confirmed remove", paths)
		}
		if got := forms[0].Get("_csrf"); got != sampleCSRF {
			t.Errorf("Got(_csrf) = %q; want %q", got, sampleCSRF)
		}
		if got := forms[0].Get("confirm"); got != "yes" {
			t.Errorf("Got(confirm) = %q; want yes, which the server's confirm step accepts", got)
		}
	})

	t.Run("copy new token", func(t *testing.T) {
		ctx, problems := newTab(t, browser)
		err := chromedp.Do(ctx,
			chromedp.Navigate(srv.URL+"/preview/tokens"),
			chromedp.WaitVisible(chromedp.CSS(`[data-copy="new-secret"]`)),
			chromedp.Click(chromedp.CSS(`[data-copy="new-secret"]`)),
		)
		if err != nil {
			t.Fatalf("copy token: %v", err)
		}
		status, err := chromedp.Run(ctx, chromedp.Poll[string](
			`document.querySelector('[data-copy-status="new-secret"]').textContent`,
			chromedp.WithPollingTimeout(5*time.Second)))
		if err != nil {
			t.Fatalf("wait for copy status: %v", err)
		}
		// Headless Chromium may refuse the clipboard; then the token must be
		// selected for the person to copy by hand.
		if status != "Copied to the clipboard." {
			selected, err := eval[string](ctx, `window.getSelection().toString().trim()`)
			if err != nil {
				t.Fatalf("read selection: %v", err)
			}
			if !strings.HasPrefix(selected, "stk_7Hq2.") {
				t.Errorf("Got(status %q, selection %q); want copied, or the token selected", status, selected)
			}
		}
		if p := problems.take(); len(p) > 0 {
			t.Errorf("Got(console problems) = %q; want none", p)
		}
	})

	t.Run("works without JavaScript", func(t *testing.T) {
		ctx, _ := newTab(t, browser)
		if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
			t.Fatalf("disable scripts: %v", err)
		}
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/preview/tokens")); err != nil {
			t.Fatalf("load: %v", err)
		}
		shown, err := eval[[]bool](ctx, `[".switcher button", "[data-copy]"].map(s =>
			getComputedStyle(document.querySelector(s)).display !== "none")`)
		if err != nil {
			t.Fatalf("read buttons: %v", err)
		}
		if len(shown) != 2 || !shown[0] || shown[1] {
			t.Errorf("Got(switch button shown, copy button shown) = %v; want [true false]: no JS, no copy", shown)
		}
	})

	t.Run("skip link and user menu by keyboard", func(t *testing.T) {
		ctx, _ := newTab(t, browser)
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/preview/settings"), chromedp.KeyEvent(kb.Tab)); err != nil {
			t.Fatalf("tab: %v", err)
		}
		skip, err := eval[bool](ctx, `document.activeElement.classList.contains("skip-link") &&
			document.activeElement.getBoundingClientRect().top >= 0`)
		if err != nil {
			t.Fatalf("read focus: %v", err)
		}
		if !skip {
			t.Errorf("Got(first Tab focuses a visible skip link) = false; want true")
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(".usermenu summary"))); err != nil {
			t.Fatalf("open user menu: %v", err)
		}
		open, err := eval[bool](ctx, `document.querySelector(".usermenu-panel").getBoundingClientRect().height > 0`)
		if err != nil {
			t.Fatalf("read menu: %v", err)
		}
		if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Escape)); err != nil {
			t.Fatalf("press Escape: %v", err)
		}
		closed, err := eval[bool](ctx, `!document.querySelector(".usermenu").open`)
		if err != nil {
			t.Fatalf("read menu: %v", err)
		}
		if !open || !closed {
			t.Errorf("Got(menu opened %v, closed by Escape %v); want both true", open, closed)
		}
	})

	t.Run("narrow screen puts navigation above content", func(t *testing.T) {
		ctx, _ := newTab(t, browser)
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 900), chromedp.Navigate(srv.URL+"/preview/audit")); err != nil {
			t.Fatalf("load: %v", err)
		}
		got, err := eval[[]bool](ctx, `[
			document.querySelector(".sidenav").getBoundingClientRect().bottom <= document.querySelector("main").getBoundingClientRect().top,
			document.documentElement.scrollWidth <= window.innerWidth]`)
		if err != nil {
			t.Fatalf("measure layout: %v", err)
		}
		if len(got) != 2 || !got[0] || !got[1] {
			t.Errorf("Got(nav above main, no horizontal scroll) = %v; want [true true]", got)
		}
	})
}
