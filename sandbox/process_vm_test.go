package sandbox_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web/webtest"
)

// processPath is the route of process pid of sandbox id, plus rest.
func processPath(id string, pid uint32, rest string) string {
	return fmt.Sprintf("/api/v1/sandboxes/%s/processes/%d%s", id, pid, rest)
}

// readOutput reads GET .../output?offset= (no follow) and returns the
// text of its output events and the final status.
func readOutput(t *testing.T, c *webtest.Client, id string, pid uint32, offset int64) (string, api.Process) {
	t.Helper()
	all, _, _, p := readStreams(t, c, id, pid, offset)
	return all, p
}

// readStreams is readOutput with stdout and stderr apart too: their order
// between the two pipes is the scheduler's.
func readStreams(t *testing.T, c *webtest.Client, id string, pid uint32, offset int64) (all, stdout, stderr string, _ api.Process) {
	t.Helper()
	status, body, hdr := call(t, c, http.MethodGet, processPath(id, pid, "/output?offset="+strconv.FormatInt(offset, 10)), nil)
	if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), api.MediaNDJSON) {
		t.Fatalf("Got(GET output) = %d %q %s; want 200 NDJSON", status, hdr.Get("Content-Type"), body)
	}
	var out, sout, serr strings.Builder
	var last api.ProcessEvent
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		var e api.ProcessEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		out.WriteString(e.Data)
		map[string]*strings.Builder{"stdout": &sout, "stderr": &serr, "status": {}}[e.Type].WriteString(e.Data)
		last = e
	}
	if last.Type != "status" || last.Process == nil {
		t.Fatalf("Got(last output event) = %+v; want the status", last)
	}
	return out.String(), sout.String(), serr.String(), *last.Process
}

func getProcess(t *testing.T, c *webtest.Client, id string, pid uint32) api.Process {
	t.Helper()
	var p api.Process
	if s, body := c.JSON(t, http.MethodGet, processPath(id, pid, ""), nil, &p); s != http.StatusOK {
		t.Fatalf("Got(GET process %d) = %d %s; want 200", pid, s, body)
	}
	return p
}

// problemField checks a 422 problem naming field.
func problemField(t *testing.T, what string, status int, body string, hdr http.Header, field string) {
	t.Helper()
	if status != http.StatusUnprocessableEntity {
		t.Errorf("Got(%s) = %d %s; want 422", what, status, body)
		return
	}
	p := webtest.Problem(t, hdr, body)
	if len(p.Errors) == 0 || p.Errors[0].Field != field {
		t.Errorf("Got(%s problem) = %+v; want it to name %q", what, p, field)
	}
}

// TestProcessAPI (real VMs): a process started through the REST API runs
// detached: a client following its output goes away and it goes on; stdin,
// output from an offset, a PTY's resize, signal and wait work; bad input
// (unknown pid, unknown signal, resize of a non-PTY, an offset past the
// output) gets a problem naming the field and changes nothing; another
// tenant finds none of it; start and signal are audited.
func TestProcessAPI(t *testing.T) {
	e := need(t)
	api0 := e.api(e.tokA)
	sb := create(t, api0, map[string]any{"memory_mib": 64})
	defer destroy(t, api0, sb.ID)

	var p api.Process
	status, body, _ := call(t, api0, http.MethodPost, "/api/v1/sandboxes/"+sb.ID+"/processes", map[string]any{
		"cmd": []string{"sh", "-c", `echo start; echo err >&2; read x; echo got $x; sleep 600`}, "stdin": true, "tag": "worker"})
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &p) != nil || p.PID == 0 || p.State != "running" {
		t.Fatalf("Got(POST processes) = %d %s; want 201, running, with a pid", status, body)
	}

	// A follower that goes away: the process is not affected.
	fctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(fctx, http.MethodGet, api0.Base+processPath(sb.ID, p.PID, "/output?follow=1"), nil)
	resp, err := api0.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("Got(follow output) = %v %v; want 200", resp, err)
	}
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.Contains(sc.Text(), `"offset":0`) {
		t.Fatalf("Got(first followed line) = %q; want output from offset 0", sc.Text())
	}
	cancel()
	resp.Body.Close()

	if got := getProcess(t, api0, sb.ID, p.PID); got.State != "running" || !got.StdinOpen || got.Tag != "worker" {
		t.Fatalf("Got(process after its follower left) = %+v; want running, stdin open", got)
	}
	waitUntil(t, "start and err", time.Minute, func() bool { o, _ := readOutput(t, api0, sb.ID, p.PID, 0); return len(o) == 10 })
	if s, body := api0.JSON(t, http.MethodPost, processPath(sb.ID, p.PID, "/stdin"), map[string]string{"data": "hi\n"}, nil); s != http.StatusNoContent {
		t.Fatalf("Got(POST stdin) = %d %s; want 204", s, body)
	}
	waitUntil(t, "the answer to stdin", time.Minute, func() bool { o, _ := readOutput(t, api0, sb.ID, p.PID, 0); return strings.Contains(o, "got hi") })
	if all, sout, serr, _ := readStreams(t, api0, sb.ID, p.PID, 0); sout != "start\ngot hi\n" || serr != "err\n" || len(all) != 17 {
		t.Errorf("Got(output from 0) = stdout %q, stderr %q; want start, got hi; err", sout, serr)
	}
	if rest, st := readOutput(t, api0, sb.ID, p.PID, 10); rest != "got hi\n" || st.OutputBytes != 17 {
		t.Errorf("Got(output from 10) = %q, output_bytes %d; want the rest, 17", rest, st.OutputBytes)
	}
	// It is listed, with what it runs.
	var list api.ProcessList
	if s, body := api0.JSON(t, http.MethodGet, "/api/v1/sandboxes/"+sb.ID+"/processes", nil, &list); s != http.StatusOK ||
		len(list.Processes) != 1 || list.Processes[0].PID != p.PID || list.Processes[0].Cmd[0] != "sh" {
		t.Errorf("Got(list) = %d %s; want the process", s, body)
	}

	// Bad input: clear problems, nothing changes.
	before := counts(t, e.db)
	s, b, hdr := call(t, api0, http.MethodPost, processPath(sb.ID, p.PID, "/signal"), map[string]string{"signal": "SIGFOO"})
	problemField(t, "unknown signal", s, b, hdr, "signal")
	s, b, hdr = call(t, api0, http.MethodPost, processPath(sb.ID, p.PID, "/resize"), map[string]int{"cols": 100, "rows": 30})
	problemField(t, "resize of a non-PTY", s, b, hdr, "pid")
	s, b, hdr = call(t, api0, http.MethodGet, processPath(sb.ID, p.PID, "/output?offset=999999"), nil)
	problemField(t, "offset past the output", s, b, hdr, "offset")
	s, b, hdr = call(t, api0, http.MethodGet, processPath(sb.ID, p.PID, "x"), nil)
	problemField(t, "a pid that is no number", s, b, hdr, "pid")
	for _, path := range []string{processPath(sb.ID, 999999, ""), processPath(sb.ID, 999999, "/output")} {
		if s, b, _ := call(t, api0, http.MethodGet, path, nil); s != http.StatusNotFound {
			t.Errorf("Got(GET %s) = %d %s; want 404", path, s, b)
		}
	}
	if s, b, _ := call(t, api0, http.MethodPost, processPath(sb.ID, 999999, "/signal"), map[string]string{"signal": "SIGKILL"}); s != http.StatusNotFound {
		t.Errorf("Got(signal an unknown pid) = %d %s; want 404", s, b)
	}
	// Another tenant: not found, whatever it asks.
	other := e.api(e.tokB)
	for _, tc := range []struct {
		method, path string
		in           any
	}{
		{http.MethodGet, processPath(sb.ID, p.PID, ""), nil},
		{http.MethodGet, processPath(sb.ID, p.PID, "/output"), nil},
		{http.MethodPost, processPath(sb.ID, p.PID, "/signal"), map[string]string{"signal": "SIGKILL"}},
		{http.MethodPost, processPath(sb.ID, p.PID, "/stdin"), map[string]string{"data": "x"}},
		{http.MethodPost, "/api/v1/sandboxes/" + sb.ID + "/processes", map[string]any{"cmd": []string{"true"}}},
		{http.MethodPost, "/api/v1/sandboxes/" + sb.ID + "/timeout", map[string]int{"timeout_seconds": 60}},
	} {
		if s, b, _ := call(t, other, tc.method, tc.path, tc.in); s != http.StatusNotFound {
			t.Errorf("Got(%s %s as another tenant) = %d %s; want 404", tc.method, tc.path, s, b)
		}
	}
	sameCounts(t, e.db, before, "bad input and another tenant")
	if got := getProcess(t, api0, sb.ID, p.PID); got.State != "running" {
		t.Fatalf("Got(process after bad input) = %+v; want running still", got)
	}

	// A terminal: its size, resized.
	var tp api.Process
	status, body, _ = call(t, api0, http.MethodPost, "/api/v1/sandboxes/"+sb.ID+"/processes", map[string]any{
		"cmd": []string{"sh", "-c", `stty size; read x; stty size`}, "tty": true, "cols": 80, "rows": 24})
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &tp) != nil || !tp.TTY {
		t.Fatalf("Got(POST tty process) = %d %s; want 201", status, body)
	}
	waitUntil(t, "the first size", time.Minute, func() bool { o, _ := readOutput(t, api0, sb.ID, tp.PID, 0); return strings.Contains(o, "24 80") })
	if s, b := api0.JSON(t, http.MethodPost, processPath(sb.ID, tp.PID, "/resize"), map[string]int{"cols": 100, "rows": 30}, nil); s != http.StatusNoContent {
		t.Fatalf("Got(resize) = %d %s; want 204", s, b)
	}
	api0.JSON(t, http.MethodPost, processPath(sb.ID, tp.PID, "/stdin"), map[string]string{"data": "\n"}, nil)
	var ended api.Process
	if s, b := api0.JSON(t, http.MethodGet, processPath(sb.ID, tp.PID, "/wait?timeout_seconds=120"), nil, &ended); s != http.StatusOK || ended.State != "exited" || ended.ExitCode == nil || *ended.ExitCode != 0 {
		t.Fatalf("Got(wait tty process) = %d %s; want exited 0", s, b)
	}
	if o, _ := readOutput(t, api0, sb.ID, tp.PID, 0); !strings.Contains(o, "30 100") {
		t.Errorf("Got(tty output) = %q; want 30 100 after the resize", o)
	}

	// Signalled: it ends, killed, and the kill is audited.
	if s, b := api0.JSON(t, http.MethodPost, processPath(sb.ID, p.PID, "/signal"), map[string]string{"signal": "SIGTERM"}, nil); s != http.StatusNoContent {
		t.Fatalf("Got(SIGTERM) = %d %s; want 204", s, b)
	}
	if s, b := api0.JSON(t, http.MethodGet, processPath(sb.ID, p.PID, "/wait?timeout_seconds=120"), nil, &ended); s != http.StatusOK ||
		ended.State != "exited" || ended.Signal != "TERM" || ended.Reason != "killed" || ended.EndedAt == nil {
		t.Fatalf("Got(wait after SIGTERM) = %d %s; want exited by TERM, killed", s, b)
	}
	if s, b, _ := call(t, api0, http.MethodPost, processPath(sb.ID, p.PID, "/stdin"), map[string]string{"data": "x"}); s != http.StatusConflict {
		t.Errorf("Got(stdin of an ended process) = %d %s; want 409", s, b)
	}
	for _, typ := range []string{audit.TypeProcessStarted, audit.TypeProcessSignaled} {
		var n int64
		e.db.Table("audit_events").Where("tenant_id = ? AND type = ? AND target_id = ?", e.a.ID, typ, sb.ID).Count(&n)
		if want := map[string]int64{audit.TypeProcessStarted: 2, audit.TypeProcessSignaled: 1}[typ]; n != want {
			t.Errorf("Got(%s audit events) = %d; want %d", typ, n, want)
		}
	}
}

// TestSandboxTimeout (real VMs): POST .../timeout above the policy maximum
// is refused naming timeout_seconds, and nothing changes; within it, the
// expiry moves to that long from now; shortened to 2 s the sandbox ends
// with reason timeout. The agent enforces a lifetime it is given on its
// own too: set on another sandbox whose stored expiry is far away, its
// agent stops it.
func TestSandboxTimeout(t *testing.T) {
	e := need(t)
	c := e.api(e.tokA)
	sb := create(t, c, map[string]any{"memory_mib": 48})
	defer func() { call(t, c, http.MethodDelete, "/api/v1/sandboxes/"+sb.ID, nil) }()

	before := counts(t, e.db)
	s, b, hdr := call(t, c, http.MethodPost, "/api/v1/sandboxes/"+sb.ID+"/timeout", map[string]int{"timeout_seconds": sandbox.MaxTimeoutSeconds + 1})
	problemField(t, "timeout above the maximum", s, b, hdr, "timeout_seconds")
	s, b, hdr = call(t, c, http.MethodPost, "/api/v1/sandboxes/"+sb.ID+"/timeout", map[string]int{"timeout_seconds": 0})
	problemField(t, "timeout 0", s, b, hdr, "timeout_seconds")
	sameCounts(t, e.db, before, "a refused timeout")

	var got api.Sandbox
	asked := time.Now()
	if s, b := c.JSON(t, http.MethodPost, "/api/v1/sandboxes/"+sb.ID+"/timeout", map[string]int{"timeout_seconds": 7200}, &got); s != http.StatusOK {
		t.Fatalf("Got(POST timeout 7200) = %d %s; want 200", s, b)
	}
	exp, _ := time.Parse(time.RFC3339Nano, got.ExpiresAt)
	if exp.Before(asked.Add(7200*time.Second-time.Minute)) || exp.After(time.Now().Add(7200*time.Second+time.Minute)) {
		t.Errorf("Got(expires_at) = %s; want about 2 h from now", got.ExpiresAt)
	}
	stored, err := e.service().Store().Sandbox(ctx, e.a.ID, sb.ID)
	if err != nil || !stored.ExpiresAt.Truncate(time.Second).Equal(exp) {
		t.Errorf("Got(stored expiry) = %v, %v; want %v", stored.ExpiresAt, err, exp)
	}
	if s, b := c.JSON(t, http.MethodPost, "/api/v1/sandboxes/"+sb.ID+"/timeout", map[string]int{"timeout_seconds": 2}, nil); s != http.StatusOK {
		t.Fatalf("Got(POST timeout 2) = %d %s; want 200", s, b)
	}
	waitUntil(t, "the sandbox ended by its new timeout", 2*time.Minute, func() bool {
		st, err := e.service().Store().Sandbox(ctx, e.a.ID, sb.ID)
		return err == nil && !st.State.Active()
	})
	if st, _ := e.service().Store().Sandbox(ctx, e.a.ID, sb.ID); !strings.Contains(st.StateReason, "timeout") {
		t.Errorf("Got(ended sandbox) = %s (%s); want reason timeout", st.State, st.StateReason)
	}

	// The agent alone: the stored expiry is an hour away.
	sb2 := create(t, c, map[string]any{"memory_mib": 48})
	defer func() { call(t, c, http.MethodDelete, "/api/v1/sandboxes/"+sb2.ID, nil) }()
	if err := e.agent(t).SetSandboxLifetime(ctx, sb2.ID, 1); err != nil {
		t.Fatalf("SetSandboxLifetime = %v", err)
	}
	waitUntil(t, "the agent stopped it", 2*time.Minute, func() bool {
		st, err := e.service().Store().Sandbox(ctx, e.a.ID, sb2.ID)
		return err == nil && !st.State.Active()
	})
	if st, _ := e.service().Store().Sandbox(ctx, e.a.ID, sb2.ID); !strings.Contains(st.StateReason, "timeout") {
		t.Errorf("Got(sandbox the agent stopped) = %s (%s); want reason timeout", st.State, st.StateReason)
	}
}

// childProcEnv makes the child control plane (runChild) start a process in
// that sandbox through the process API and follow its output.
const childProcEnv = "SANDBOX_TEST_CHILD_PROCESS"

// runProcessChild starts survivorScript as a process of sandbox id,
// printing STARTED <pid> and each output chunk as OUT <quoted>, until it
// is killed.
func runProcessChild(svc *sandbox.Service, id string) int {
	actor := audit.Actor{Kind: audit.ActorUser, ID: childActorID, Name: "child@a.test"}
	tenant := os.Getenv(childTenantEnv)
	p, err := svc.StartProcess(ctx, actor, tenant, id, sandbox.ProcessRequest{Cmd: []string{"sh", "-c", survivorScript}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child process:", err)
		return 3
	}
	fmt.Printf("STARTED %d\n", p.PID)
	_, err = svc.ProcessOutput(ctx, tenant, id, p.PID, 0, true, func(c sandbox.ProcessChunk) error {
		fmt.Printf("OUT %q\n", c.Data)
		return nil
	})
	fmt.Printf("ENDED %v\n", err)
	select {} // until killed
}

// TestProcessSurvivesServerKill (real VMs): the control plane holding a
// background process is killed with SIGKILL (no Close, no goodbye); a new
// server on the same database and VMs adopts it: its output so far is
// still readable from offset 0, it still runs, and once it ends its record
// has the real exit.
func TestProcessSurvivesServerKill(t *testing.T) {
	e := need(t)
	dev := audit.Actor{Kind: audit.ActorSystem, ID: "test", Name: "survive test"}
	sb, err := e.service().Create(ctx, dev, e.a.ID, sandbox.Spec{MemoryMiB: 48})
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	defer func() { e.service().Destroy(ctx, dev, e.a.ID, sb.ID) }()

	e.stop()
	restarted := false
	defer func() {
		if !restarted {
			e.start()
		}
	}()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childDirEnv+"="+e.dbPath(), childTenantEnv+"="+e.a.ID, childDataEnv+"="+e.dataDir,
		childTypeEnv+"="+e.domainType, childProcEnv+"="+sb.ID)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var pid uint32
	var got strings.Builder
	for timeout := time.After(4 * time.Minute); !strings.Contains(got.String(), "line20\n"); {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the child ended; output so far %q", got.String())
			}
			switch {
			case strings.HasPrefix(l, "STARTED "):
				n, _ := strconv.ParseUint(strings.TrimPrefix(l, "STARTED "), 10, 32)
				pid = uint32(n)
			case strings.HasPrefix(l, "OUT "):
				s, err := strconv.Unquote(strings.TrimPrefix(l, "OUT "))
				if err != nil {
					t.Fatalf("child line %q: %v", l, err)
				}
				got.WriteString(s)
			case strings.HasPrefix(l, "ENDED "):
				t.Fatalf("the process ended in the child: %s", l)
			}
		case <-timeout:
			t.Fatalf("the child streamed %q within 4 min; want line20", got.String())
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	before := got.String()

	if err := e.start(); err != nil {
		t.Fatalf("restart the services: %v", err)
	}
	restarted = true
	svc := e.service()
	// Adopted: the output so far is readable again, from 0, and it runs.
	var again strings.Builder
	waitUntil(t, "the process re-attached by the new server", 3*time.Minute, func() bool {
		again.Reset()
		p, err := svc.ProcessOutput(ctx, e.a.ID, sb.ID, pid, 0, false, func(c sandbox.ProcessChunk) error {
			again.Write(c.Data)
			return nil
		})
		return err == nil && p.State == sandbox.ProcessRunning && strings.HasPrefix(again.String(), before)
	})
	if _, err := svc.WriteFile(ctx, dev, e.a.ID, sb.ID, "go", strings.NewReader(""), 0o644); err != nil {
		t.Fatalf("WriteFile(go) = %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	p, err := svc.Wait(wctx, e.a.ID, sb.ID, pid)
	if err != nil || p.State != sandbox.ProcessExited || p.ExitCode == nil || *p.ExitCode != 0 {
		t.Fatalf("Got(Wait after the restart) = %+v, %v; want exited 0", p, err)
	}
	var want strings.Builder
	for i := range 60 {
		fmt.Fprintf(&want, "line%d\n", i)
	}
	want.WriteString("done\n")
	var all strings.Builder
	if _, err := svc.ProcessOutput(ctx, e.a.ID, sb.ID, pid, 0, false, func(c sandbox.ProcessChunk) error { all.Write(c.Data); return nil }); err != nil {
		t.Fatal(err)
	}
	if all.String() != want.String() {
		t.Errorf("Got(output across the restart) = %q; want every line once, in order", all.String())
	}
	var rec sandbox.Process
	if err := e.db.First(&rec, "tenant_id = ? AND sandbox_id = ? AND pid = ?", e.a.ID, sb.ID, pid).Error; err != nil || rec.State != sandbox.ProcessExited ||
		rec.EndedAt == nil || rec.OutputBytes != int64(want.Len()) {
		t.Errorf("Got(record after the end) = %+v, %v; want exited, %d bytes", rec, err, want.Len())
	}
}
