package webtest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// ChromiumPath is the browser the browser tests drive.
const ChromiumPath = "/usr/bin/chromium"

// Browser is one headless Chromium tab with a fresh profile. It records
// everything the tab writes to its console: console calls, uncaught
// exceptions and browser log entries (where CSP violations are reported).
type Browser struct {
	Ctx context.Context

	mu   sync.Mutex
	msgs []chromedp.ConsoleMessage
}

// NewBrowser starts Chromium for the test and closes it at the end. Without
// Chromium the test fails under CI=true and is skipped elsewhere.
func NewBrowser(t testing.TB) *Browser {
	t.Helper()
	if _, err := os.Stat(ChromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("chromium is missing (%v): CI must run the browser tests (apt-get install chromium)", err)
		}
		t.Skipf("chromium is missing (%v): install it (apt-get install chromium) to run the browser tests", err)
	}
	out := &lockedWriter{}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(ChromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.CombinedOutput(out),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	b := &Browser{Ctx: ctx}
	// Start the browser and the tab now, so a missing library is reported
	// here, and subscribe to the console before any page loads.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v\n%s", err, out.String())
	}
	msgs := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.msgs = append(b.msgs, m)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		<-done
	})
	return b
}

// Do runs actions in the tab with a deadline.
func (b *Browser) Do(t testing.TB, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		loc, _ := chromedp.Run(b.Ctx, chromedp.Location())
		t.Fatalf("%s (at %s): %v", what, loc, err)
	}
}

// CSS is a CSS selector for chromedp's queries.
func CSS(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// JSString quotes s as a JavaScript string literal.
func JSString(s string) string {
	q, _ := json.Marshal(s) // a JSON string is a JavaScript string literal
	return string(q)
}

// Login signs the tab in as email through the development identity
// provider: it opens url signed out, clicks "Sign in" on the page it is sent
// to, gives the provider the email and waits until ready (a CSS selector)
// is visible on the page it comes back to.
func (b *Browser) Login(t testing.TB, url, email, ready string) {
	t.Helper()
	b.Do(t, "sign in as "+email,
		chromedp.Navigate(url),
		chromedp.Click(CSS(`form[action="/login/start"] button`)),
		chromedp.WaitVisible(CSS(`input[name="email"]`)),
		chromedp.SendKeys(CSS(`input[name="email"]`), email),
		chromedp.Click(CSS(`button[value="login"]`)),
		chromedp.WaitVisible(CSS(ready)))
}

// Eval evaluates expr in b's page and returns its value.
func Eval[T any](t testing.TB, b *Browser, expr string) T {
	t.Helper()
	return read(t, b, "evaluate "+expr, chromedp.Evaluate[T](expr))
}

// read runs one query in the tab with a deadline; what names it in a failure.
func read[T any](t testing.TB, b *Browser, what string, q chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, q)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// Text is the text of the first element sel matches, trimmed.
func (b *Browser) Text(t testing.TB, sel string) string {
	t.Helper()
	return strings.TrimSpace(read(t, b, "text of "+sel, chromedp.Text(CSS(sel))))
}

// Value is the value of the form control sel matches.
func (b *Browser) Value(t testing.TB, sel string) string {
	t.Helper()
	return read(t, b, "value of "+sel, chromedp.Value(CSS(sel)))
}

// Attr is the attribute name of the first element sel matches, "" when
// there is no such element or attribute.
func (b *Browser) Attr(t testing.TB, sel, name string) string {
	t.Helper()
	return Eval[string](t, b, `(document.querySelector(`+JSString(sel)+`) || {getAttribute: () => ""}).getAttribute(`+JSString(name)+`) || ""`)
}

// Location is the URL the tab shows.
func (b *Browser) Location(t testing.TB) string {
	t.Helper()
	return read(t, b, "location", chromedp.Location())
}

// Messages returns what the tab wrote to its console so far.
func (b *Browser) Messages() []chromedp.ConsoleMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]chromedp.ConsoleMessage(nil), b.msgs...)
}

// Problems returns the console messages that mean a page is broken: errors,
// uncaught exceptions, warnings, and every Content Security Policy report.
func (b *Browser) Problems() []string { return problems(b.Messages()) }

func problems(msgs []chromedp.ConsoleMessage) []string {
	var out []string
	for _, m := range msgs {
		csp := strings.Contains(m.Text, "Content Security Policy") || strings.Contains(m.Text, "Content-Security-Policy")
		if csp || m.IsException() || m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning {
			out = append(out, m.String()+" ("+m.URL+")")
		}
	}
	return out
}

// Mark is a position in the tab's console: ProblemsSince(mark) returns
// only what came after it (one page's problems in a walk of many).
func (b *Browser) Mark() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.msgs)
}

// ProblemsSince is Problems after mark.
func (b *Browser) ProblemsSince(mark int) []string {
	b.mu.Lock()
	later := append([]chromedp.ConsoleMessage(nil), b.msgs[min(mark, len(b.msgs)):]...)
	b.mu.Unlock()
	return problems(later)
}

// cspWatch runs in every document before its own scripts: it keeps each
// securitypolicyviolation event the page raises, so a test reads them from
// the page itself rather than waiting for the console to report them.
const cspWatch = `window.__stockadeCSP = [];
document.addEventListener("securitypolicyviolation", e => window.__stockadeCSP.push(e.violatedDirective + " blocked " + (e.blockedURI || "inline") + " at " + e.sourceFile + ":" + e.lineNumber));`

// WatchCSP makes every page the tab opens from now on record its Content
// Security Policy violations for CSPViolations.
func (b *Browser) WatchCSP(t testing.TB) {
	t.Helper()
	b.Do(t, "watch CSP violations", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: cspWatch})
		return err
	}))
}

// CSPViolations returns the violations the page on show has raised (since
// WatchCSP; nil before).
func (b *Browser) CSPViolations(t testing.TB) []string {
	t.Helper()
	return Eval[[]string](t, b, `window.__stockadeCSP || []`)
}

// ClearCookies signs the tab out of everything: it forgets every cookie.
func (b *Browser) ClearCookies(t testing.TB) {
	t.Helper()
	b.Do(t, "clear cookies", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.ClearBrowserCookies, cdp.Empty{})
		return err
	}))
}

// Screenshot saves a full-page PNG of the tab as dir/name.
func (b *Browser) Screenshot(t testing.TB, dir, name string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("screenshot folder: %v", err)
	}
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatalf("save screenshot: %v", err)
	}
	return path
}

// lockedWriter lets the browser's output be read while it still writes.
type lockedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
