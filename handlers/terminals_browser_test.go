package handlers_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// artifacts is test-artifacts/ at the repository root.
const artifacts = "../test-artifacts"

func css(s string) chromedp.CSS { return chromedp.CSS(s) }

// browserLogin signs b in as email through the development identity
// provider's form.
func browserLogin(t *testing.T, b *webtest.Browser, base, email string) {
	t.Helper()
	b.Login(t, base+"/login", email, `main h1`)
}

// screenText is what the terminal of the page shows (xterm.js draws rows
// as text; spaces are non-breaking).
const screenText = `(document.querySelector(".xterm-rows") || {textContent: ""}).textContent.replace(/\u00a0/g, " ")`

// waitScreen waits until the page's terminal shows want.
func waitScreen(t *testing.T, b *webtest.Browser, who, want string) {
	t.Helper()
	poll(t, b, who+" sees "+want, screenText+`.includes(`+webtest.JSString(want)+`)`)
}

// poll waits until expr is true in b's page.
func poll(t *testing.T, b *webtest.Browser, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 25*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		s, _ := chromedp.Run(b.Ctx, chromedp.Evaluate[string](screenText))
		t.Fatalf("%s: %v (the terminal shows %q)", what, err, s)
	}
}

// typeKeys types s into the focused terminal the way a keyboard does: one
// keyDown carrying the text (so that a handled keydown suppresses the
// keypress, as in a real browser) and one keyUp per key. chromedp's
// SendKeys sends the text as a separate char event instead, which makes
// xterm.js see every key twice.
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

func attrOf(t *testing.T, b *webtest.Browser, sel, name string) string {
	t.Helper()
	return b.Attr(t, sel, name)
}

// TestTerminalBrowser: in headless Chromium a developer opens a sandbox's
// terminal, types a command and sees its output, while a manager in a
// second browser finds the session in "live now", watches it read-only and
// sees the same; when it ends, the recording replays. No page trips the
// CSP. Screenshots go to test-artifacts/.
func TestTerminalBrowser(t *testing.T) {
	te := newTermEnv(t)
	env := te.env
	env.Member(t, te.acme, "dev@acme-corp.test", tenants.RoleDeveloper)
	env.Member(t, te.acme, "boss@acme-corp.test", tenants.RoleManager)
	dev := webtest.NewBrowser(t)
	boss := webtest.NewBrowser(t) // another browser: its own profile, cookies and session
	browserLogin(t, dev, env.URL, "dev@acme-corp.test")
	browserLogin(t, boss, env.URL, "boss@acme-corp.test")

	// The developer opens a terminal in the sandbox and runs a command.
	dev.Do(t, "open the sandbox's terminal",
		chromedp.Navigate(env.URL+"/sandboxes/"+te.sb.ID+"/terminal"),
		chromedp.WaitVisible(css(`[data-terminal="live"][data-state="live"][data-role="driver"]`)))
	waitScreen(t, dev, "the developer", "$ ")
	typeKeys(t, dev, "echo browser-$((6*7))\r")
	waitScreen(t, dev, "the developer", "browser-42")
	session := attrOf(t, dev, "[data-terminal]", "data-session")
	if session == "" {
		t.Fatal("Got(data-session) = empty; want the session the page opened")
	}
	if loc, _ := chromedp.Run(dev.Ctx, chromedp.Location()); !strings.HasSuffix(loc, "/terminals/"+session) {
		t.Errorf("Got(location) = %s; want /terminals/%s so that a reload rejoins", loc, session)
	}

	// The manager finds it live and watches.
	boss.Do(t, "the live list", chromedp.Navigate(env.URL+"/terminals"),
		chromedp.WaitVisible(css(`#terminal-live tr[data-session="`+session+`"]`)))
	boss.Screenshot(t, artifacts, "terminals-live.png")
	boss.Do(t, "watch", chromedp.Click(css(`#terminal-live tr[data-session="`+session+`"] a.btn`)),
		chromedp.WaitVisible(css(`[data-terminal="live"][data-state="live"][data-role="watcher"]`)))
	waitScreen(t, boss, "the manager (joining late)", "browser-42")

	typeKeys(t, dev, "echo second-$((2*4))\r")
	waitScreen(t, dev, "the developer", "second-8")
	waitScreen(t, boss, "the manager", "second-8")
	poll(t, dev, "the developer sees who watches", `document.querySelector("[data-terminal-watchers]").textContent.includes("boss@acme-corp.test")`)

	// Watching is read-only: the manager's keys go nowhere, and a manager
	// has no control to ask for.
	typeKeys(t, boss, "echo watcher-$((1+1))\r")
	dev.Do(t, "a moment for keystrokes to arrive, if they did", chromedp.Sleep(500*time.Millisecond))
	if s, _ := chromedp.Run(dev.Ctx, chromedp.Evaluate[string](screenText)); strings.Contains(s, "watcher") {
		t.Errorf("Got(developer's screen) with the manager's keystrokes; want a watcher read-only: %q", s)
	}
	if v, _ := chromedp.Run(boss.Ctx, chromedp.Evaluate[bool](`!!document.querySelector('[data-terminal-action="take"]')`)); v {
		t.Errorf("Got(take control button for a manager) = present; want none")
	}
	dev.Screenshot(t, artifacts, "terminal-driver.png")
	boss.Screenshot(t, artifacts, "terminal-watcher.png")

	// The developer ends the shell: both see why.
	typeKeys(t, dev, "exit 0\r")
	for who, b := range map[string]*webtest.Browser{"developer": dev, "manager": boss} {
		b.Do(t, "the "+who+" sees the end", chromedp.WaitVisible(css(`[data-terminal="live"][data-state="ended"]`)))
		if s := attrOf(t, b, "[data-terminal-status]", "role"); s != "status" {
			t.Errorf("Got(status role) = %q; want status", s)
		}
	}
	st, _ := chromedp.Run(boss.Ctx, chromedp.Text(css(`[data-terminal-status]`)))
	if !strings.Contains(st, "exited with code 0") {
		t.Errorf("Got(the manager's status) = %q; want the reason the session ended", st)
	}

	// The recording replays: play at 8x to the end.
	boss.Do(t, "replay", chromedp.Navigate(env.URL+"/terminals/"+session),
		chromedp.WaitVisible(css(`[data-terminal="replay"][data-state="ready"]`)),
		chromedp.SetValue(css(`[data-replay-speed]`), "8"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-replay-speed]").dispatchEvent(new Event("change"))`),
		chromedp.Click(css(`[data-replay="play"]`)),
		chromedp.WaitVisible(css(`[data-terminal="replay"][data-state="done"]`)))
	waitScreen(t, boss, "the replay", "second-8")
	boss.Screenshot(t, artifacts, "terminal-replay.png")
	// Seek back to the start: the screen is redrawn from the recording.
	boss.Do(t, "seek", chromedp.SetValue(css(`[data-replay-seek]`), "0"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-replay-seek]").dispatchEvent(new Event("input"))`))
	if s, _ := chromedp.Run(boss.Ctx, chromedp.Evaluate[string](screenText)); strings.Contains(s, "second-8") {
		t.Errorf("Got(screen after seeking to 0) = %q; want it redrawn from the start", s)
	}

	for who, b := range map[string]*webtest.Browser{"developer": dev, "manager": boss} {
		for _, p := range b.Problems() {
			t.Errorf("Got(%s's console) %s; want no errors, exceptions or CSP violations", who, p)
		}
	}
}

// TestTerminalBrowserHandover: an agent drives a terminal over the API; a
// developer finds it live, joins it as a watcher, requests control and
// takes it in the browser, and then types into it: the agent sees the
// keystrokes' output and that it lost control.
func TestTerminalBrowserHandover(t *testing.T) {
	te := newTermEnv(t)
	env := te.env
	env.Member(t, te.acme, "dev@acme-corp.test", tenants.RoleDeveloper)
	agent, err := te.dial(t, env.WithToken(env.Token(t, te.acme, tenants.RoleDeveloper)), te.sb.ID, url.Values{"cols": {"100"}, "rows": {"28"}})
	if err != nil {
		t.Fatal(err)
	}
	session := agent.Hello(t).Session
	agent.Type(t, "echo agent-$((20+1))\n")
	agent.WaitOutput(t, "agent-21", wait)

	dev := webtest.NewBrowser(t)
	browserLogin(t, dev, env.URL, "dev@acme-corp.test")
	dev.Do(t, "join from the live list", chromedp.Navigate(env.URL+"/terminals"),
		chromedp.Click(css(`#terminal-live tr[data-session="`+session+`"] a.btn`)),
		chromedp.WaitVisible(css(`[data-terminal="live"][data-state="live"][data-role="watcher"]`)),
		chromedp.WaitVisible(css(`[data-terminal-action="request"]`)))
	waitScreen(t, dev, "the developer", "agent-21")
	if cols, _ := chromedp.Run(dev.Ctx, chromedp.Evaluate[int](`document.querySelectorAll(".xterm-rows > div").length`)); cols != 28 {
		t.Errorf("Got(watcher's rows) = %d; want the driver's 28", cols)
	}
	dev.Do(t, "request control", chromedp.Click(css(`[data-terminal-action="request"]`)),
		chromedp.WaitVisible(css(`[data-terminal-action="take"]`)))
	agent.WaitControl(t, terminal.MsgRequested, func(c terminal.Control) bool { return c.By == "dev@acme-corp.test" }, wait)
	dev.Do(t, "take control", chromedp.Click(css(`[data-terminal-action="take"]`)),
		chromedp.WaitVisible(css(`[data-terminal="live"][data-role="driver"]`)),
		chromedp.WaitVisible(css(`[data-terminal-action="release"]`)))
	agent.WaitControl(t, terminal.MsgRole, func(c terminal.Control) bool { return c.Role == terminal.RoleWatcher }, wait)
	typeKeys(t, dev, "echo took-$((1+2))\r")
	agent.WaitOutput(t, "took-3", wait)
	waitScreen(t, dev, "the developer", "took-3")
	dev.Screenshot(t, artifacts, "terminal-handover.png")
	for _, p := range dev.Problems() {
		t.Errorf("Got(console) %s; want no errors, exceptions or CSP violations", p)
	}
}
