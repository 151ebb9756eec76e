package mcp_test

import (
	"context"
	"encoding/base64"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// vmEnv is the whole app on real VMs (TCG here) with two tenants, A
// (a pool of one VM) and B, and an MCP session of a developer token of each.
type vmEnv struct {
	env      *webtest.Env
	sbx      *sandbox.Service
	tnA, tnB tenants.Tenant
	a, b     *sdk.ClientSession
}

func newVMEnv(t *testing.T, slug string) vmEnv {
	t.Helper()
	dataDir := sandboxtest.NeedVMs(t)
	db := dbtest.SQLite(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	vms, sbx := sandboxtest.Start(t, db, vmpool.Config{DataDir: dataDir, Logger: log},
		sandbox.Config{SyncInterval: 500 * time.Millisecond, SampleInterval: time.Second, DefaultTemplate: "busybox"})
	v := vmEnv{env: webtest.New(t, webtest.Options{DB: db, VMs: vms, Sandboxes: sbx}), sbx: sbx}
	v.tnA, v.tnB = v.env.Tenant(t, slug+"-a"), v.env.Tenant(t, slug+"-b")
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
	if _, err := vms.SetPool(context.Background(), sys, v.tnA.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	v.a = connect(t, v.env, v.env.Token(t, v.tnA, tenants.RoleDeveloper))
	v.b = connect(t, v.env, v.env.Token(t, v.tnB, tenants.RoleDeveloper))
	return v
}

// TestMCPSandboxLifecycle is the acceptance test of /mcp: the go-sdk's
// client over Streamable HTTP against the whole app on real VMs (TCG
// here) creates a sandbox, runs echo, writes and reads a file and destroys
// it; a token of another tenant sees none of it; bad input is a tool error
// naming the field; the audit log has every tool call and, as for the REST
// API, the sandbox's own events (exec, files) by the token.
func TestMCPSandboxLifecycle(t *testing.T) {
	v := newVMEnv(t, "mcp-vm")
	env, sbx, tnA, tnB, a, b := v.env, v.sbx, v.tnA, v.tnB, v.a, v.b
	ctx := context.Background()

	var sb struct {
		ID, State, Template string
	}
	decode(t, "create_sandbox", call(t, a, "create_sandbox", map[string]any{"template": "busybox", "memory_mib": 128,
		"metadata": map[string]string{"by": "mcp"}}), &sb)
	if sb.ID == "" || sb.State != string(sandbox.StateRunning) || sb.Template != "busybox" {
		t.Fatalf("Got(create_sandbox) = %+v; want a running busybox sandbox", sb)
	}

	var ex struct {
		ExitCode int    `json:"exit_code"`
		Reason   string `json:"reason"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}
	decode(t, "exec", call(t, a, "exec", map[string]any{"sandbox_id": sb.ID, "cmd": []string{"echo", "hello from mcp"}}), &ex)
	if ex.ExitCode != 0 || ex.Reason != "exited" || ex.Stdout != "hello from mcp\n" {
		t.Errorf("Got(exec echo) = %+v; want exit 0 and the line", ex)
	}
	decode(t, "exec", call(t, a, "exec", map[string]any{"sandbox_id": sb.ID, "cmd": []string{"sh", "-c", "echo oops >&2; exit 3"}}), &ex)
	if ex.ExitCode != 3 || ex.Stderr != "oops\n" {
		t.Errorf("Got(exec exit 3) = %+v; want exit code 3 and stderr", ex)
	}

	var wf struct {
		Path string `json:"path"`
		Size int64  `json:"size"`
		Mode string `json:"mode"`
	}
	const note = "written through MCP\n"
	decode(t, "write_file", call(t, a, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "notes/hi.txt", "content": note, "mode": "0600"}), &wf)
	if wf.Size != int64(len(note)) || wf.Mode != "0600" {
		t.Errorf("Got(write_file) = %+v; want %d bytes, mode 0600", wf, len(note))
	}
	var rf struct {
		Size     int64  `json:"size"`
		Encoding string `json:"encoding"`
		Content  string `json:"content"`
	}
	decode(t, "read_file", call(t, a, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "/workspace/notes/hi.txt"}), &rf)
	if rf.Content != note || rf.Encoding != "utf-8" || rf.Size != int64(len(note)) {
		t.Errorf("Got(read_file) = %+v; want %q as utf-8", rf, note)
	}
	// Bytes that are not text go both ways as base64.
	bin := []byte{0, 0xff, 0xfe, 'x', 0x80}
	decode(t, "write_file", call(t, a, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "bin",
		"content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64"}), &wf)
	decode(t, "read_file", call(t, a, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "bin"}), &rf)
	if got, err := base64.StdEncoding.DecodeString(rf.Content); err != nil || rf.Encoding != "base64" || string(got) != string(bin) {
		t.Errorf("Got(read_file of binary) = %+v; want base64 of %v", rf, bin)
	}

	// Bad input: tool errors naming the field.
	wantToolError(t, "read_file of a missing file", call(t, a, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "nope.txt"}),
		`not-found: path: no such file or directory "nope.txt" in the sandbox`)
	wantToolError(t, "read_file climbing out", call(t, a, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "../../etc/shadow"}),
		"invalid: path: ")
	wantToolError(t, "exec without cmd", call(t, a, "exec", map[string]any{"sandbox_id": sb.ID}), "cmd")
	wantToolError(t, "exec on an unknown sandbox", call(t, a, "exec", map[string]any{"sandbox_id": "01a00000-0000-7000-8000-000000000000", "cmd": []string{"true"}}),
		`not-found: sandbox_id: no sandbox "01a00000-0000-7000-8000-000000000000" in this tenant`)

	// Another tenant's token sees none of it.
	if ids := listIDs(t, b); len(ids) != 0 {
		t.Errorf("Got(B's list_sandboxes) = %v; want none", ids)
	}
	wantOthersNotFound(t, b, sb.ID, map[string]map[string]any{
		"exec":            {"cmd": []string{"echo", "pwned"}},
		"read_file":       {"path": "notes/hi.txt"},
		"write_file":      {"path": "notes/hi.txt", "content": "pwned"},
		"destroy_sandbox": {},
	})
	decode(t, "read_file", call(t, a, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "notes/hi.txt"}), &rf)
	if rf.Content != note {
		t.Errorf("Got(A's file after B's write) = %q; want %q", rf.Content, note)
	}
	if ids := listIDs(t, a); !slices.Contains(ids, sb.ID) {
		t.Errorf("Got(A's list_sandboxes) = %v; want %s", ids, sb.ID)
	}

	// Metered and recorded like the native API: the sandbox counts the
	// two commands, B's attempt ran none.
	st, err := sbx.Get(ctx, tnA.ID, sb.ID)
	if err != nil || st.Execs != 2 {
		t.Errorf("Got(the sandbox's commands) = %d, %v; want 2", st.Execs, err)
	}

	// A call its client gives up on (Esc in an agent) ends its command, as
	// a REST exec ends when its client goes.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := a.CallTool(cctx, &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"sandbox_id": sb.ID, "cmd": []string{"sleep", "600"}}})
		done <- err
	}()
	sleep := func() (sandbox.ExecRecord, bool) {
		recs, err := sbx.Execs(ctx, tnA.ID, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if slices.Equal(r.Argv(), []string{"sleep", "600"}) {
				return r, true
			}
		}
		return sandbox.ExecRecord{}, false
	}
	eventually(t, "the sleep to start", func() bool { _, ok := sleep(); return ok })
	cancel()
	if err := <-done; err == nil {
		t.Errorf("Got(cancelled call) = no error; want the cancellation")
	}
	eventually(t, "the cancelled sleep to end", func() bool { r, _ := sleep(); return r.EndedAt != nil })
	if r, _ := sleep(); r.Reason == "exited" {
		t.Errorf("Got(the cancelled sleep's end) = %s; want it killed", r.Reason)
	}

	decode(t, "destroy_sandbox", call(t, a, "destroy_sandbox", map[string]any{"sandbox_id": sb.ID}), &sb)
	if sb.State != string(sandbox.StateDestroyed) {
		t.Errorf("Got(destroy_sandbox) = %+v; want destroyed", sb)
	}
	wantToolError(t, "exec after destroy", call(t, a, "exec", map[string]any{"sandbox_id": sb.ID, "cmd": []string{"true"}}), "conflict: ", "destroyed")

	// The audit log: every tool call with its sandbox, in A's log only
	// for A's calls; the sandbox's own events by the token, as REST's.
	type row struct{ tool, sandbox, outcome string }
	var rows []row
	for _, e := range toolCalls(t, env, tnA.ID) {
		s, _ := e.Details["sandbox_id"].(string)
		rows = append(rows, row{e.Details["tool"].(string), s, e.Outcome})
		if e.ActorKind != audit.ActorToken || e.TargetID != s {
			t.Errorf("Got(mcp.tool_call actor, target) = %s, %s; want the token, %s", e.ActorKind, e.TargetID, s)
		}
	}
	for _, want := range []row{
		{"create_sandbox", sb.ID, audit.OutcomeSuccess}, {"exec", sb.ID, audit.OutcomeSuccess},
		{"write_file", sb.ID, audit.OutcomeSuccess}, {"read_file", sb.ID, audit.OutcomeSuccess},
		{"read_file", sb.ID, audit.OutcomeFailure}, {"destroy_sandbox", sb.ID, audit.OutcomeSuccess},
		{"list_sandboxes", "", audit.OutcomeSuccess},
	} {
		if !slices.Contains(rows, want) {
			t.Errorf("Got(A's mcp.tool_call events) = %v; want one %v", rows, want)
		}
	}
	for _, typ := range []string{audit.TypeSandboxCreated, audit.TypeSandboxExec, audit.TypeSandboxFileWritten, audit.TypeSandboxFileRead, audit.TypeSandboxDestroyed} {
		var found bool
		for _, e := range env.Events(t, typ) {
			if e.TenantID == tnA.ID && e.TargetID == sb.ID && e.ActorKind == audit.ActorToken {
				found = true
			}
		}
		if !found {
			t.Errorf("Got(%s events of the sandbox by the token) = none; want one", typ)
		}
	}
	for _, e := range toolCalls(t, env, tnB.ID) {
		if e.Outcome == audit.OutcomeSuccess && e.Details["tool"] != "list_sandboxes" {
			t.Errorf("Got(B's %s) = success; want refused", e.Details["tool"])
		}
	}
}

// eventually waits (up to two minutes) until ok holds.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !ok(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited two minutes for %s", what)
		}
	}
}
