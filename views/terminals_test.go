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
		want      []string
	}{
		{"live", live, []string{`data-terminal="live"`, `data-socket="/api/v1/sandboxes/sbx/terminal"`, `data-session="sess"`, `data-watch="1"`,
			`data-can-drive="false"`, "js/terminal.js", "vendor/xterm/xterm.js", "vendor/xterm/addon-fit.js", "css/terminal.css"}},
		{"replay", replay, []string{`data-terminal="replay"`, `data-cast="/api/v1/terminals/sess/cast"`, `data-replay="play"`, "data-replay-speed",
			"data-replay-seek", "Download .cast", "output and keystrokes", "Recording truncated at 50 MiB: the session&#39;s cap is 50 MiB"}},
	}
	for _, c := range checks {
		for _, w := range c.want {
			if !strings.Contains(c.out, w) {
				t.Errorf("Got(%s page) without %s; want it", c.name, w)
			}
		}
		for _, n := range all(parse(t, c.out), tag("script")) {
			if src, _ := attr(n, "src"); src == "" {
				t.Errorf("Got(%s page) with an inline script; want none (CSP)", c.name)
			}
		}
		if strings.Contains(c.out, "style=") || strings.Contains(c.out, "<style") {
			t.Errorf("Got(%s page) with inline style; want none (CSP)", c.name)
		}
	}
	if strings.Contains(live, `data-terminal-action="take"`) {
		t.Errorf("Got(live page of a watcher who may not drive) with a take control button; want none")
	}
}
