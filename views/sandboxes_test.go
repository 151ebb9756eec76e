package views

import (
	"strings"
	"testing"
	"time"
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
	for _, canEdit := range []bool{true, false} {
		out := render(t, SandboxPage(samplePageModel("Sandbox", NavSandboxes), sampleSandboxView(canEdit)))
		for _, want := range []string{"busybox", "891c7b3e3a31", "128 MiB", "TOKEN", "task=t-1", `data-state="creating"`, `data-state="running"`,
			"&lt;script&gt;alert(1)&lt;/script&gt;", `hx-get="/sandboxes/01938a6e-0000-7000-8000-00000000abcd/live"`, "exit 0", "3.0 MiB of 128.0 MiB"} {
			if !strings.Contains(out, want) {
				t.Errorf("Got(sandbox page, canEdit %v) without %q", canEdit, want)
			}
		}
		if strings.Contains(out, "<script>alert") {
			t.Error("Got(command output) unescaped; want it shown as text")
		}
		if got := strings.Contains(out, `/destroy"`); got != canEdit {
			t.Errorf("Got(destroy form present) = %v; want %v", got, canEdit)
		}
	}
	ended := sampleSandboxView(true)
	ended.Row.State, ended.PollURL, ended.Stats = "destroyed", "", nil
	if out := render(t, SandboxLive(ended)); strings.Contains(out, "hx-get") || strings.Contains(out, "ends in") {
		t.Error("Got(live part of an ended sandbox) polling or counting down; want neither")
	}
}

// TestSandboxesPage: the create form keeps what was typed and shows errors
// next to their fields; the table polls; read-only callers get no form.
func TestSandboxesPage(t *testing.T) {
	v := SandboxesView{
		Table: SandboxTable{Rows: []SandboxRow{sampleSandboxView(true).Row}, CanEdit: true, CSRF: "tok", PollURL: "/sandboxes/table",
			Now: sampleTime("2026-11-30T10:01:00Z")},
		CanEdit: true, Templates: []Choice{{Value: "busybox", Label: "busybox"}}, VMVCPUs: 1, MaxMemoryMiB: 1920,
		Form: SandboxForm{Template: "busybox", VCPUs: "1", MemoryMiB: "99999", TimeoutMinutes: "10",
			Errors: map[string]string{"memory_mib": "must be at most 1920"}},
	}
	out := render(t, Sandboxes(samplePageModel("Sandboxes", NavSandboxes), v))
	for _, want := range []string{`action="/sandboxes"`, `id="sandbox-memory-mib-error"`, "must be at most 1920", `value="99999"`,
		`hx-get="/sandboxes/table"`, `data-sandbox="01938a6e-0000-7000-8000-00000000abcd"`, "59m 00s"} {
		if !strings.Contains(out, want) {
			t.Errorf("Got(sandboxes page) without %q", want)
		}
	}
	v.CanEdit, v.Table.CanEdit = false, false
	if out := render(t, Sandboxes(samplePageModel("Sandboxes", NavSandboxes), v)); strings.Contains(out, `action="/sandboxes"`) || strings.Contains(out, "/destroy") {
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
