package views

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

func sampleTerminals(canDrive bool) TerminalsView {
	started := sampleTime("2026-11-30T06:00:00Z")
	ended := started.Add(95 * time.Second)
	return TerminalsView{
		CanDrive: canDrive,
		Live: TerminalLiveList{PollURL: "/terminals/live", CanDrive: canDrive, Rows: []TerminalLiveRow{{
			ID: "01935000-0000-7000-8000-00000000live", SandboxID: "01935000-0000-7000-8000-0000000sbx01", OpenedBy: "agent (stk_abc)",
			Command: []string{"/bin/sh"}, Driver: "<b>agent</b>", DriverConnected: true, Watchers: []string{"grace@acme.test", "linus@acme.test"},
			Requests: []string{"ada@acme.test"}, StartedAt: started, BytesOut: 4096, Cols: 120, Rows: 40,
		}}},
		Sandboxes: []TerminalSandbox{{ID: "01935000-0000-7000-8000-0000000sbx01", Template: "debian", CreatedBy: "ada@acme.test", CreatedAt: started}},
		Recordings: []TerminalRecordingRow{
			{ID: "01935000-0000-7000-8000-000000000rec", SandboxID: "01935000-0000-7000-8000-0000000sbx01", OpenedBy: "ada@acme.test",
				StartedAt: started, EndedAt: &ended, EndReason: "the sandbox was destroyed (requested)", RecordingBytes: 2048, Dropped: 3,
				Truncated: "truncated at 50 MiB: the session's cap is 50 MiB"},
			{ID: "01935000-0000-7000-8000-0000000purge", SandboxID: "01935000-0000-7000-8000-0000000sbx01", OpenedBy: "ada@acme.test",
				StartedAt: started, EndedAt: &ended, EndReason: "the process exited with code 0", Purged: true},
		},
	}
}

// TestTerminalsPage: the live list says who drives, who watches and who
// asked; drivers get the sandboxes to open a terminal in, watchers do not;
// removed recordings have no replay link; names are escaped.
func TestTerminalsPage(t *testing.T) {
	for _, canDrive := range []bool{true, false} {
		out := render(t, Terminals(samplePageModel("Terminals", NavTerminals), sampleTerminals(canDrive)))
		doc := parse(t, out)
		live := text(byID(doc, "terminal-live"))
		for _, want := range []string{"<b>agent</b>", "grace@acme.test, linus@acme.test", "requested by ada@acme.test", "120×40", "4.0 KiB"} {
			if !strings.Contains(live, want) {
				t.Errorf("Got(live list) = %q; want %q in it", live, want)
			}
		}
		if strings.Contains(out, "<b>agent</b>") {
			t.Errorf("Got(page) with an unescaped name; want it escaped")
		}
		if v, _ := attr(byID(doc, "terminal-live"), "hx-get"); v != "/terminals/live" {
			t.Errorf("Got(hx-get) = %q; want the live list polled", v)
		}
		action := "Watch"
		if canDrive {
			action = "Join"
		}
		if !strings.Contains(live, action) {
			t.Errorf("Got(live list action, can drive %v) = %q; want %q", canDrive, live, action)
		}
		opens := all(doc, func(n *html.Node) bool {
			h, _ := attr(n, "href")
			return n.Data == "a" && strings.HasSuffix(h, "/terminal")
		})
		if (len(opens) == 1) != canDrive {
			t.Errorf("Got(open terminal links, can drive %v) = %d; want them for drivers only", canDrive, len(opens))
		}
		recs := text(byID(doc, "terminal-recordings"))
		if strings.Count(out, `/api/v1/terminals/01935000-0000-7000-8000-0000000purge/cast`) != 0 || !strings.Contains(recs, "removed") ||
			!strings.Contains(recs, "3 events dropped") || !strings.Contains(recs, "1m 35s") || !strings.Contains(recs, "truncated at 50 MiB") {
			t.Errorf("Got(recordings) = %q; want a removed one without links, drops and lengths shown", recs)
		}
	}
}

// TestTerminalPanels: the live panel and the replay are configured by
// data- attributes only (terminal.js reads them; no inline script), and
// load the terminal's assets.
func TestTerminalPanels(t *testing.T) {
	p := samplePageModel("Terminal", NavTerminals)
	live := render(t, TerminalPage(p, TerminalView{SandboxID: "sbx", SessionID: "sess", SocketURL: "/api/v1/sandboxes/sbx/terminal", Watch: true}))
	replay := render(t, TerminalPage(p, TerminalView{SandboxID: "sbx", SessionID: "sess", Replay: true, CastURL: "/api/v1/terminals/sess/cast",
		Recording: TerminalRecordingRow{ID: "sess", OpenedBy: "ada@acme.test", RecordedInput: true,
			Truncated: "truncated at 50 MiB: the session's cap is 50 MiB"}}))
	checks := []struct {
		name, out string
		panel     map[string]string // the data- attributes of the panel
		more      []string          // data- attributes some element carries
		text      []string          // in the page text
	}{
		{"live", live, map[string]string{"data-terminal": "live", "data-socket": "/api/v1/sandboxes/sbx/terminal", "data-session": "sess",
			"data-watch": "1", "data-can-drive": "false"}, nil, nil},
		{"replay", replay, map[string]string{"data-terminal": "replay", "data-cast": "/api/v1/terminals/sess/cast"},
			[]string{"data-replay", "data-replay-speed", "data-replay-seek", "data-recording-truncated"},
			[]string{"Download .cast", "output and keystrokes", "Recording truncated at 50 MiB: the session's cap is 50 MiB"}},
	}
	for _, c := range checks {
		doc := parse(t, c.out)
		panels := all(doc, func(n *html.Node) bool { _, ok := attr(n, "data-terminal"); return ok })
		if len(panels) != 1 {
			t.Fatalf("Got(%d terminal panels on the %s page); want 1", len(panels), c.name)
		}
		for k, want := range c.panel {
			if got, _ := attr(panels[0], k); got != want {
				t.Errorf("Got(%s panel %s) = %q; want %q", c.name, k, got, want)
			}
		}
		for _, k := range c.more {
			if len(all(doc, func(n *html.Node) bool { _, ok := attr(n, k); return ok })) == 0 {
				t.Errorf("Got(%s page) without [%s]; want it", c.name, k)
			}
		}
		for _, w := range c.text {
			if !strings.Contains(text(doc), w) {
				t.Errorf("Got(%s page text) without %q; want it", c.name, w)
			}
		}
		assets := map[string]bool{}
		for _, n := range all(doc, func(n *html.Node) bool { return n.Data == "script" || n.Data == "link" }) {
			src, _ := attr(n, "src")
			href, _ := attr(n, "href")
			if n.Data == "script" && src == "" {
				t.Errorf("Got(%s page) with an inline script; want none (CSP)", c.name)
			}
			assets[strings.SplitN(src+href, "?", 2)[0]] = true
		}
		for _, a := range []string{"/static/js/terminal.js", "/static/vendor/xterm/xterm.js", "/static/vendor/xterm/addon-fit.js", "/static/css/terminal.css"} {
			if !assets[a] {
				t.Errorf("Got(%s page assets) = %v; want %s", c.name, assets, a)
			}
		}
		if len(all(doc, tag("style"))) > 0 || len(all(doc, func(n *html.Node) bool { _, ok := attr(n, "style"); return ok })) > 0 {
			t.Errorf("Got(%s page) with inline style; want none (CSP)", c.name)
		}
	}
	if len(all(parse(t, live), withAttr("data-terminal-action", "take"))) > 0 {
		t.Errorf("Got(live page of a watcher who may not drive) with a take control button; want none")
	}
}
