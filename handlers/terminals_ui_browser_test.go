package handlers_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// underscoreFits is true when the underscore of the terminal's font, drawn
// on a row of its text as the browser lays it out (centred in the row's
// line height), ends inside the row: with lineHeight 1.0 xterm.js rows are
// exactly the em box and the underscore hangs below, clipped.
const underscoreFits = `(() => {
	const row = [...document.querySelectorAll(".xterm-rows > div")].find(r => r.textContent.includes("foo_bar___"));
	if (!row) return "no row shows foo_bar___";
	const cs = getComputedStyle(row.querySelector("span") || row);
	const ctx = document.createElement("canvas").getContext("2d");
	ctx.font = cs.fontSize + " " + cs.fontFamily;
	const m = ctx.measureText("_");
	const h = row.getBoundingClientRect().height;
	const baseline = (h - (m.fontBoundingBoxAscent + m.fontBoundingBoxDescent)) / 2 + m.fontBoundingBoxAscent;
	const bottom = baseline + m.actualBoundingBoxDescent;
	return bottom <= h ? "" : "the underscore ends at " + bottom.toFixed(2) + " px of a " + h.toFixed(2) + " px row (font " + ctx.font + ")";
})()`

// colourOf is the computed colour of CSS value v (a custom property).
func colourOf(v string) string {
	return `(() => { const s = document.createElement("span"); s.style.color = ` + webtest.JSString(v) + `; document.body.appendChild(s);
		const c = getComputedStyle(s).color; s.remove(); return c; })()`
}

// TestTerminalBrowserDetails: the terminal draws underscores whole; a
// session that exits with code 0 ends in the success colour and one that
// exits otherwise in red; the live list offers no Join on the viewer's own
// terminal; the sandbox page lists the sandbox's terminal sessions, live
// (to watch) and ended (to replay). Screenshots go to test-artifacts/.
func TestTerminalBrowserDetails(t *testing.T) {
	te := newTermEnv(t)
	env := te.env
	env.Member(t, te.acme, "dev@acme-corp.test", tenants.RoleDeveloper)
	env.Member(t, te.acme, "boss@acme-corp.test", tenants.RoleManager)
	dev := webtest.NewBrowser(t)
	boss := webtest.NewBrowser(t)
	browserLogin(t, dev, env.URL, "dev@acme-corp.test")
	browserLogin(t, boss, env.URL, "boss@acme-corp.test")
	str := func(b *webtest.Browser, what, expr string) string {
		t.Helper()
		v, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}

	dev.Do(t, "open the sandbox's terminal",
		chromedp.Navigate(env.URL+"/sandboxes/"+te.sb.ID+"/terminal"),
		chromedp.WaitVisible(css(`[data-terminal="live"][data-state="live"][data-role="driver"]`)))
	waitScreen(t, dev, "the developer", "$ ")
	typeKeys(t, dev, "echo foo_bar___\r")
	poll(t, dev, "the output row", `[...document.querySelectorAll(".xterm-rows > div")].filter(r => r.textContent.includes("foo_bar___")).length >= 2`)
	if msg := str(dev, "underscore geometry", underscoreFits); msg != "" {
		t.Errorf("Got(underscore) %s; want it inside its row", msg)
	}
	dev.Screenshot(t, artifacts, "terminal-underscores.png")
	session := attrOf(t, dev, "[data-terminal]", "data-session")

	// The page's own session, in its "live in this sandbox" list (polled
	// every 2 s): marked as the viewer's, with no Join.
	row := `#terminal-live tr[data-session="` + session + `"]`
	dev.Do(t, "the own session in the live list", chromedp.WaitVisible(css(row+` [data-terminal-mine]`)))
	if n := str(dev, "join links", `String(document.querySelectorAll(`+webtest.JSString(row+` a.btn`)+`).length)`); n != "0" {
		t.Errorf("Got(Join links on the developer's own session) = %s; want 0", n)
	}

	// The manager finds it on the sandbox page, live, to watch.
	sbRow := `#sandbox-terminals tr[data-session="` + session + `"]`
	boss.Do(t, "the sandbox page, live", chromedp.Navigate(env.URL+"/sandboxes/"+te.sb.ID),
		chromedp.WaitVisible(css(sbRow+`[data-live="true"]`)))
	if href := attrOf(t, boss, sbRow+` a.btn`, "href"); href != "/terminals/"+session {
		t.Errorf("Got(live session link) = %q; want /terminals/%s", href, session)
	}
	if txt := str(boss, "driver cell", `document.querySelector(`+webtest.JSString(sbRow+` td[data-label="Driver"]`)+`).textContent`); !strings.Contains(txt, "dev@acme-corp.test") {
		t.Errorf("Got(driver of the live session) = %q; want dev@acme-corp.test", txt)
	}

	// Exit 0 ends well: not in red.
	typeKeys(t, dev, "exit 0\r")
	dev.Do(t, "the end", chromedp.WaitVisible(css(`[data-terminal="live"][data-state="ended"]`)))
	if o := attrOf(t, dev, "[data-terminal]", "data-outcome"); o != "ok" {
		t.Errorf("Got(data-outcome after exit 0) = %q; want ok", o)
	}
	status := str(dev, "status colour", `getComputedStyle(document.querySelector("[data-terminal-status]")).color`)
	if bad, good := str(dev, "bad", colourOf("var(--bad)")), str(dev, "good", colourOf("var(--good)")); status == bad || status != good {
		t.Errorf("Got(status colour after exit 0) = %s; want the success colour %s, not the failure colour %s", status, good, bad)
	}
	dev.Screenshot(t, artifacts, "terminal-exit-0.png")

	// The sandbox page lists it ended, with its recording.
	boss.Do(t, "the sandbox page, ended", chromedp.Reload(),
		chromedp.WaitVisible(css(sbRow+`[data-live="false"]`)))
	if href := attrOf(t, boss, sbRow+` a[data-terminal-replay]`, "href"); href != "/terminals/"+session {
		t.Errorf("Got(replay link) = %q; want /terminals/%s", href, session)
	}
	if href := attrOf(t, boss, sbRow+` a[download]`, "href"); href != "/api/v1/terminals/"+session+"/cast" {
		t.Errorf("Got(recording link) = %q; want the .cast of the session", href)
	}
	if st := str(boss, "state", `document.querySelector(`+webtest.JSString(sbRow+` td[data-label="State"] .pill`)+`).className`); !strings.Contains(st, "pill-good") {
		t.Errorf("Got(state pill of a session that exited 0) = %q; want pill-good", st)
	}
	if n := attrOf(t, boss, "[data-terminal-count]", "data-terminal-count"); n != "1" {
		t.Errorf("Got(terminal sessions counted) = %q; want 1", n)
	}
	boss.Screenshot(t, artifacts, "sandbox-terminal-sessions.png")

	// Any other end is a failure, in red.
	dev.Do(t, "a second terminal",
		chromedp.Navigate(env.URL+"/sandboxes/"+te.sb.ID+"/terminal"),
		chromedp.WaitVisible(css(`[data-terminal="live"][data-state="live"][data-role="driver"]`)))
	waitScreen(t, dev, "the developer", "$ ")
	typeKeys(t, dev, "exit 3\r")
	dev.Do(t, "the end", chromedp.WaitVisible(css(`[data-terminal="live"][data-state="ended"]`)))
	if o := attrOf(t, dev, "[data-terminal]", "data-outcome"); o != "bad" {
		t.Errorf("Got(data-outcome after exit 3) = %q; want bad", o)
	}
	status = str(dev, "status colour", `getComputedStyle(document.querySelector("[data-terminal-status]")).color`)
	if bad := str(dev, "bad", colourOf("var(--bad)")); status != bad {
		t.Errorf("Got(status colour after exit 3) = %s; want the failure colour %s", status, bad)
	}

	for who, b := range map[string]*webtest.Browser{"developer": dev, "manager": boss} {
		for _, p := range b.Problems() {
			t.Errorf("Got(%s's console) %s; want no errors, exceptions or CSP violations", who, p)
		}
	}
}
