package views

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

func sampleSandboxView(canEdit bool) SandboxView {
	created := sampleTime("2026-11-30T10:00:00Z")
	started := created.Add(300 * time.Millisecond)
	return SandboxView{
		Row: SandboxRow{ID: "01938a6e-0000-7000-8000-00000000abcd", State: "running", Template: "busybox", VCPUs: 1, MemoryMiB: 128,
			VMID: "01938a6e-0000-7000-8000-0000000000ff", CreatedBy: "dev@acme.test", CreatedAt: created, ExpiresAt: created.Add(time.Hour), Execs: 1},
		TemplateVersion: "891c7b3e3a31", TimeoutSeconds: 3600, EnvKeys: []string{"TOKEN"}, Metadata: map[string]string{"task": "t-1"},
		StartedAt: &started, CreateMS: 310, GuestReadyMS: 280,
		Stats: &SandboxStatsView{MemoryCurrent: 3 << 20, MemoryMax: 128 << 20, Pids: 2, PidsMax: 256},
		Events: []SandboxEventRow{{State: "creating", Reason: "requested", Actor: "dev@acme.test", At: created},
			{State: "running", Reason: "started", Actor: "system", At: started}},
		Execs: []ExecRow{{ID: "x1", Argv: []string{"sh", "-c", "echo '<script>alert(1)</script>'"}, Actor: "dev@acme.test", StartedAt: started,
			ExitCode: "0", Reason: "exited", Duration: 40 * time.Millisecond, Stdout: "<script>alert(1)</script>\n", StdoutBytes: 26}},
		CanEdit: canEdit, CanSeeVMs: true, CSRF: "tok", PollURL: "/sandboxes/01938a6e-0000-7000-8000-00000000abcd/live", Now: created.Add(time.Minute),
	}
}

// TestSandboxPage: the page shows limits, VM, timeline and commands with
// their output as text; destroy only for those who may; it polls its live
// part while the sandbox is active.
func TestSandboxPage(t *testing.T) {
	const id = "01938a6e-0000-7000-8000-00000000abcd"
	for _, canEdit := range []bool{true, false} {
		doc := parse(t, render(t, SandboxPage(samplePageModel("Sandbox", NavSandboxes), sampleSandboxView(canEdit))))
		for _, c := range []struct{ testID, want string }{
			{"sandbox-template", "busybox version 891c7b3e3a31"},
			{"sandbox-memory", "128 MiB"},
			{"sandbox-env", "TOKEN (values are kept in the VM only)"},
			{"sandbox-metadata", "task=t-1"},
			{"sandbox-memory-used", "3.0 MiB of 128.0 MiB (peak 0 B)"},
			{"exec-exit", "exit 0"},
			{"exec-stdout", "<script>alert(1)</script>"},
		} {
			if got := textOf(t, doc, c.testID); got != c.want {
				t.Errorf("Got([data-testid=%s], canEdit %v) = %q; want %q", c.testID, canEdit, got, c.want)
			}
		}
		var states []string
		for _, tr := range all(byID(doc, "sandbox-timeline"), tag("tr")) {
			if st, ok := attr(tr, "data-state"); ok {
				states = append(states, st)
			}
		}
		if got := strings.Join(states, " "); got != "creating running" {
			t.Errorf("Got(timeline states) = %q; want creating running", got)
		}
		if n := len(all(doc, tag("script"))); n != len(all(doc, func(n *html.Node) bool { src, _ := attr(n, "src"); return n.Data == "script" && src != "" })) {
			t.Error("Got(command output) as a script element; want it shown as text")
		}
		if v, _ := attr(byID(doc, "sandbox-live"), "hx-get"); v != "/sandboxes/"+id+"/live" {
			t.Errorf("Got(live part hx-get) = %q; want it polled", v)
		}
		if got := byTestID(doc, "sandbox-destroy") != nil; got != canEdit {
			t.Errorf("Got(destroy form present, canEdit %v) = %v; want %v", canEdit, got, canEdit)
		}
	}
	ended := sampleSandboxView(true)
	ended.Row.State, ended.PollURL, ended.Stats = "destroyed", "", nil
	live := parse(t, render(t, SandboxLive(ended)))
	if _, polls := attr(byID(live, "sandbox-live"), "hx-get"); polls || byTestID(live, "sandbox-ends-in") != nil {
		t.Error("Got(live part of an ended sandbox) polling or counting down; want neither")
	}
}

// TestSandboxesPage: the create form keeps what was typed and shows errors
// next to their fields; the table polls; read-only callers get no form.
func TestSandboxesPage(t *testing.T) {
	const id = "01938a6e-0000-7000-8000-00000000abcd"
	v := SandboxesView{
		Table: SandboxTable{Rows: []SandboxRow{sampleSandboxView(true).Row}, CanEdit: true, CSRF: "tok", PollURL: "/sandboxes/table",
			Now: sampleTime("2026-11-30T10:01:00Z")},
		CanEdit: true, Templates: []Choice{{Value: "busybox", Label: "busybox"}}, VMVCPUs: 1, MaxMemoryMiB: 1920,
		Form: SandboxForm{Template: "busybox", VCPUs: "1", MemoryMiB: "99999", TimeoutMinutes: "10",
			Errors: map[string]string{"memory_mib": "must be at most 1920"}},
	}
	doc := parse(t, render(t, Sandboxes(samplePageModel("Sandboxes", NavSandboxes), v)))
	form := byTestID(doc, "sandbox-create")
	if form == nil {
		t.Fatal("Got(no create form); want one for an editor")
	}
	if a, _ := attr(form, "action"); a != "/sandboxes" {
		t.Errorf("Got(create form action) = %q; want /sandboxes", a)
	}
	memory := all(form, withAttr("name", "memory_mib"))
	if len(memory) != 1 {
		t.Fatalf("Got(%d memory_mib inputs); want 1", len(memory))
	}
	if got, _ := attr(memory[0], "value"); got != "99999" {
		t.Errorf("Got(memory_mib value) = %q; want what was typed", got)
	}
	desc, _ := attr(memory[0], "aria-describedby")
	if msg := byID(doc, "sandbox-memory-mib-error"); msg == nil || !strings.Contains(desc, "sandbox-memory-mib-error") || text(msg) != "must be at most 1920" {
		t.Errorf("Got(memory_mib error, aria-describedby %q); want the message next to the field", desc)
	}
	if v, _ := attr(byID(doc, "sandbox-table"), "hx-get"); v != "/sandboxes/table" {
		t.Errorf("Got(table hx-get) = %q; want the table polled", v)
	}
	rows := all(doc, withAttr("data-sandbox", id))
	if len(rows) != 1 {
		t.Fatalf("Got(%d rows of the sandbox); want 1", len(rows))
	}
	if got := textOf(t, rows[0], "sandbox-row-ends-in"); got != "59m 00s" {
		t.Errorf("Got(ends in) = %q; want 59m 00s", got)
	}
	if byTestID(rows[0], "sandbox-row-destroy") == nil {
		t.Error("Got(no destroy form in the row); want one for an editor")
	}
	v.CanEdit, v.Table.CanEdit = false, false
	doc = parse(t, render(t, Sandboxes(samplePageModel("Sandboxes", NavSandboxes), v)))
	if byTestID(doc, "sandbox-create") != nil || byTestID(doc, "sandbox-row-destroy") != nil {
		t.Error("Got(sandboxes page for a reader) with the create or destroy form; want none")
	}
}

func TestCommandLine(t *testing.T) {
	tests := []struct {
		argv []string
		want string
	}{
		{[]string{"ls", "-l"}, "ls -l"},
		{[]string{"sh", "-c", "echo hi"}, "sh -c 'echo hi'"},
		{[]string{"echo", "it's"}, `echo 'it'\''s'`},
		{[]string{"printf", ""}, "printf ''"},
	}
	for _, tt := range tests {
		if got := commandLine(tt.argv); got != tt.want {
			t.Errorf("Got(commandLine(%q)) = %q; want %q", tt.argv, got, tt.want)
		}
	}
}
