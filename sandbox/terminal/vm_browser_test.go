package terminal_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// artifacts is test-artifacts/ at the repository root.
const artifacts = "../../test-artifacts"

// screenWait bounds what a page waits for from the VM (TCG is slow).
const screenWait = 60 * time.Second

// TestTerminalBrowserOnVM is the acceptance path in headless Chromium on a
// real sandbox in a real VM: a developer signs in, opens the sandbox's
// terminal, types a command and sees its output; a manager signs in in a
// second browser, finds the session in the live list, watches it
// read-only and sees the same, then the developer's next command too. No
// page trips the CSP or logs an error. Screenshots go to test-artifacts/.
func TestTerminalBrowserOnVM(t *testing.T) {
	// The browsers first: without Chromium no VM is booted for nothing.
	dev := webtest.NewBrowser(t)
	boss := webtest.NewBrowser(t) // another browser: its own profile, cookies and session
	e := newVMEnv(t)
	e.web.Member(t, e.a, "dev@vm-term.test", tenants.RoleDeveloper)
	e.web.Member(t, e.a, "boss@vm-term.test", tenants.RoleManager)
	signIn(t, dev, e.web.URL, "dev@vm-term.test")
	signIn(t, boss, e.web.URL, "boss@vm-term.test")

	// The developer opens a terminal in the sandbox and runs a command.
	dev.Do(t, "open the sandbox's terminal",
		chromedp.Navigate(e.web.URL+"/sandboxes/"+e.sb.ID+"/terminal"),
		chromedp.WaitVisible(css(`[data-terminal="live"][data-state="live"][data-role="driver"]`)))
	waitScreen(t, dev, "the developer", "$ ")
	typeKeys(t, dev, "echo vm-$((6*7))\r")
	waitScreen(t, dev, "the developer", "vm-42")
	session := attrOf(t, dev, "[data-terminal]", "data-session")
	if session == "" {
		t.Fatal("Got(data-session) = empty; want the session the page opened")
	}

	// The manager finds it live and watches.
	row := `#terminal-live tr[data-session="` + session + `"]`
	boss.Do(t, "watch from the live list", chromedp.Navigate(e.web.URL+"/terminals"),
		chromedp.WaitVisible(css(row)),
		chromedp.Click(css(row+` a.btn`)),
		chromedp.WaitVisible(css(`[data-terminal="live"][data-state="live"][data-role="watcher"]`)))
	if loc, _ := chromedp.Run(boss.Ctx, chromedp.Location()); !strings.Contains(loc, "/terminals/"+session) {
		t.Errorf("Got(watcher's location) = %s; want /terminals/%s", loc, session)
	}
	waitScreen(t, boss, "the manager (joining late)", "vm-42")
	for sel, want := range map[string]string{"[data-terminal-role]": "watching", "[data-terminal-status]": "Connected: watching"} {
		if got := textOf(t, boss, sel); got != want {
			t.Errorf("Got(manager's %s) = %q; want %q", sel, got, want)
		}
	}
	poll(t, dev, "the developer sees who watches", `document.querySelector("[data-terminal-watchers]").textContent.includes("boss@vm-term.test")`)

	// The next command reaches both; the kernel it names is the guest's,
	// not this machine's.
	typeKeys(t, dev, "echo again-$((2*4)) on $(uname -r)\r")
	waitScreen(t, dev, "the developer", "again-8 on ")
	waitScreen(t, boss, "the manager", "again-8 on ")
	host, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	if s := screen(boss); strings.Contains(s, "again-8 on "+strings.TrimSpace(string(host))) {
		t.Errorf("Got(manager's screen) = %q; want the command run in the VM, not on this machine's kernel", s)
	}

	// Watching is read-only: the manager's keys go nowhere, and a manager
	// has no control to take.
	typeKeys(t, boss, "echo watcher-$((1+1))\r")
	dev.Do(t, "a moment for keystrokes to arrive, if they did", chromedp.Sleep(time.Second))
	if s := screen(dev); strings.Contains(s, "watcher") {
		t.Errorf("Got(developer's screen) with the manager's keystrokes; want a watcher read-only: %q", s)
	}
	if v, _ := chromedp.Run(boss.Ctx, chromedp.Evaluate[bool](`!!document.querySelector('[data-terminal-action="take"]')`)); v {
		t.Errorf("Got(take control button for a manager) = present; want none")
	}
	dev.Screenshot(t, artifacts, "terminal-vm-driver.png")
	boss.Screenshot(t, artifacts, "terminal-vm-watcher.png")

	for who, b := range map[string]*webtest.Browser{"developer": dev, "manager": boss} {
		for _, p := range b.Problems() {
			t.Errorf("Got(%s's console) %s; want no errors, exceptions or CSP violations", who, p)
		}
	}
}

func css(s string) chromedp.CSS { return chromedp.CSS(s) }

// signIn signs b in as email through the development identity provider's
// form (real OIDC over HTTP).
func signIn(t *testing.T, b *webtest.Browser, base, email string) {
	t.Helper()
	b.Do(t, "sign in as "+email,
		chromedp.Navigate(base+"/login"),
		chromedp.Click(css(`form[action="/login/start"] button`)),
		chromedp.WaitVisible(css(`input[name="email"]`)),
		chromedp.SendKeys(css(`input[name="email"]`), email),
		chromedp.Click(css(`button[value="login"]`)),
		chromedp.WaitVisible(css(`main h1`)))
}

// screenText is what the terminal of the page shows (xterm.js draws rows
// as text; spaces are non-breaking).
const screenText = `(document.querySelector(".xterm-rows") || {textContent: ""}).textContent.replace(/\u00a0/g, " ")`

func screen(b *webtest.Browser) string {
	s, _ := chromedp.Run(b.Ctx, chromedp.Evaluate[string](screenText))
	return s
}

// waitScreen waits until the page's terminal shows want.
func waitScreen(t *testing.T, b *webtest.Browser, who, want string) {
	t.Helper()
	poll(t, b, who+" sees "+want, screenText+`.includes(`+jsString(want)+`)`)
}

// poll waits until expr is true in b's page.
func poll(t *testing.T, b *webtest.Browser, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, screenWait)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("%s: %v (the terminal shows %q)", what, err, screen(b))
	}
}

// typeKeys types s into the focused terminal the way a keyboard does: one
// keyDown carrying the text and one keyUp per key. chromedp's SendKeys
// sends the text as a separate char event too, which makes xterm.js see
// every key twice.
func typeKeys(t *testing.T, b *webtest.Browser, s string) {
	t.Helper()
	b.Do(t, "focus the terminal", chromedp.Focus(css(".xterm-helper-textarea")))
	ctx, cancel := context.WithTimeout(b.Ctx, 20*time.Second)
	defer cancel()
	for _, r := range s {
		k, ok := kb.Keys[r]
		if !ok {
			t.Fatalf("no key for %q", r)
		}
		down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Key: k.Key, Code: k.Code,
			WindowsVirtualKeyCode: k.Windows, NativeVirtualKeyCode: k.Native, Text: k.Text, UnmodifiedText: k.Unmodified}
		if k.Shift {
			down.Modifiers = int64(kb.ModifierShift)
		}
		up := down
		up.Type, up.Text, up.UnmodifiedText = input.DispatchKeyEventTypeKeyUp, "", ""
		for _, ev := range []input.DispatchKeyEventParams{down, up} {
			if _, err := chromedp.Call(ctx, input.DispatchKeyEvent, ev); err != nil {
				t.Fatalf("type %q: %v", r, err)
			}
		}
	}
}

func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func attrOf(t *testing.T, b *webtest.Browser, sel, name string) string {
	t.Helper()
	v, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`(document.querySelector(`+jsString(sel)+`) || {getAttribute: () => ""}).getAttribute(`+jsString(name)+`) || ""`))
	if err != nil {
		t.Fatalf("read %s[%s]: %v", sel, name, err)
	}
	return v
}

func textOf(t *testing.T, b *webtest.Browser, sel string) string {
	t.Helper()
	v, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`(document.querySelector(`+jsString(sel)+`) || {textContent: ""}).textContent.trim()`))
	if err != nil {
		t.Fatalf("read the text of %s: %v", sel, err)
	}
	return v
}
