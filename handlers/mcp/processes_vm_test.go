package mcp_test

import (
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
)

// TestMCPProcesses: through /mcp a process starts detached, its output is
// read from an offset (waiting for it to end), it is listed, a long one is
// signalled, the sandbox's timeout is extended within the policy; another
// tenant's token gets not-found for all of it, bad input names the field.
func TestMCPProcesses(t *testing.T) {
	v := newVMEnv(t, "mcp-proc")
	a, b := v.a, v.b
	var sb struct{ ID string }
	decode(t, "create_sandbox", call(t, a, "create_sandbox", map[string]any{"template": "busybox", "memory_mib": 128}), &sb)

	type proc struct {
		PID         uint32 `json:"pid"`
		State       string `json:"state"`
		ExitCode    *int   `json:"exit_code"`
		Signal      string `json:"signal"`
		OutputBytes int64  `json:"output_bytes"`
	}
	var p proc
	decode(t, "start_process", call(t, a, "start_process", map[string]any{"sandbox_id": sb.ID,
		"cmd": []string{"sh", "-c", "echo one; echo two; echo three"}, "tag": "short"}), &p)
	if p.PID == 0 {
		t.Fatalf("Got(start_process) = %+v; want a pid", p)
	}
	var out struct {
		Process    proc   `json:"process"`
		Offset     int64  `json:"offset"`
		NextOffset int64  `json:"next_offset"`
		Output     string `json:"output"`
	}
	decode(t, "read_process_output", call(t, a, "read_process_output", map[string]any{"sandbox_id": sb.ID, "pid": p.PID, "wait_seconds": 60}), &out)
	if out.Process.State != sandbox.ProcessExited || out.Process.ExitCode == nil || *out.Process.ExitCode != 0 ||
		out.Output != "one\ntwo\nthree\n" || out.Offset != 0 || out.NextOffset != int64(len("one\ntwo\nthree\n")) {
		t.Errorf("Got(read_process_output, waited) = %+v; want exited 0 with its three lines from 0", out)
	}
	decode(t, "read_process_output", call(t, a, "read_process_output", map[string]any{"sandbox_id": sb.ID, "pid": p.PID, "offset": 4}), &out)
	if out.Output != "two\nthree\n" || out.Offset != 4 {
		t.Errorf("Got(read_process_output from 4) = %+v; want the rest", out)
	}

	// stderr comes in the same output (its own pipe: only its order
	// against stdout is not kept, so it is checked alone).
	var errp proc
	decode(t, "start_process", call(t, a, "start_process", map[string]any{"sandbox_id": sb.ID,
		"cmd": []string{"sh", "-c", "echo oops >&2"}}), &errp)
	decode(t, "read_process_output", call(t, a, "read_process_output", map[string]any{"sandbox_id": sb.ID, "pid": errp.PID, "wait_seconds": 60}), &out)
	if out.Output != "oops\n" || out.Process.State != sandbox.ProcessExited {
		t.Errorf("Got(read_process_output of a stderr-only process) = %+v; want exited with oops", out)
	}

	var long proc
	decode(t, "start_process", call(t, a, "start_process", map[string]any{"sandbox_id": sb.ID, "cmd": []string{"sleep", "600"}}), &long)
	var list struct{ Processes []proc }
	decode(t, "list_processes", call(t, a, "list_processes", map[string]any{"sandbox_id": sb.ID}), &list)
	if len(list.Processes) != 3 || list.Processes[0].PID != long.PID || list.Processes[0].State != sandbox.ProcessRunning ||
		list.Processes[1].PID != errp.PID || list.Processes[2].PID != p.PID {
		t.Errorf("Got(list_processes) = %+v; want the sleep running first, then the two ended ones, newest first", list.Processes)
	}

	// Another tenant: not found, nothing changes.
	wantOthersNotFound(t, b, sb.ID, map[string]map[string]any{
		"start_process":       {"cmd": []string{"true"}},
		"list_processes":      {},
		"read_process_output": {"pid": p.PID},
		"signal_process":      {"pid": long.PID, "signal": "SIGKILL"},
		"set_timeout":         {"timeout_seconds": 60},
	})
	// Bad input names the field.
	wantToolError(t, "unknown signal", call(t, a, "signal_process", map[string]any{"sandbox_id": sb.ID, "pid": long.PID, "signal": "SIGNOPE"}), "invalid: signal: ")
	wantToolError(t, "no pid", call(t, a, "read_process_output", map[string]any{"sandbox_id": sb.ID}), "pid")
	wantToolError(t, "offset past the output", call(t, a, "read_process_output", map[string]any{"sandbox_id": sb.ID, "pid": p.PID, "offset": 1 << 20}), "invalid: offset: ")
	wantToolError(t, "timeout above a week", call(t, a, "set_timeout", map[string]any{"sandbox_id": sb.ID, "timeout_seconds": 30 * 24 * 3600}), "invalid: timeout_seconds: ")

	decode(t, "signal_process", call(t, a, "signal_process", map[string]any{"sandbox_id": sb.ID, "pid": long.PID, "signal": "SIGTERM"}), &long)
	decode(t, "read_process_output", call(t, a, "read_process_output", map[string]any{"sandbox_id": sb.ID, "pid": long.PID, "wait_seconds": 60}), &out)
	if out.Process.State != sandbox.ProcessExited || out.Process.Signal != "TERM" {
		t.Errorf("Got(the sleep after SIGTERM) = %+v; want exited by TERM", out.Process)
	}

	var after struct {
		ExpiresAt      string `json:"expires_at"`
		TimeoutSeconds int    `json:"timeout_seconds"`
	}
	decode(t, "set_timeout", call(t, a, "set_timeout", map[string]any{"sandbox_id": sb.ID, "timeout_seconds": 7200}), &after)
	exp, err := time.Parse(time.RFC3339, after.ExpiresAt)
	if err != nil || time.Until(exp) < 7000*time.Second {
		t.Errorf("Got(set_timeout 7200) = %+v; want it to expire about two hours from now", after)
	}
	decode(t, "destroy_sandbox", call(t, a, "destroy_sandbox", map[string]any{"sandbox_id": sb.ID}), &sb)
}
