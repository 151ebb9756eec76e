package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/terminal/terminaltest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// lockedBuffer is a bytes.Buffer safe to read while a command writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func waitUntil(tb testing.TB, what string, d time.Duration, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s", what, d)
		}
	}
}

// TestWorkSurvivesAgentSessionLoss (real VMs): the host's agent session is
// dropped the way a crashed server drops it (the channel closed without the
// goodbye; the pool then opens a new session, as a new server would) in the
// middle of a streaming command and a terminal. The command keeps running
// and its output is complete, every line once, in order; the terminal
// resumes; the command's record ends "exited". A record of a command its
// agent does not have (a process really lost) is closed by the sync with an
// end and reason "lost".
func TestWorkSurvivesAgentSessionLoss(t *testing.T) {
	e := need(t)
	svc := e.service()
	dev := audit.Actor{Kind: audit.ActorSystem, ID: "test", Name: "survive test"}
	sb, err := svc.Create(ctx, dev, e.a.ID, sandbox.Spec{MemoryMiB: 48})
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	defer svc.Destroy(ctx, dev, e.a.ID, sb.ID)

	const lines = 300
	var out lockedBuffer
	type result struct {
		res sandbox.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := svc.Exec(ctx, dev, e.a.ID, sb.ID, sandbox.ExecRequest{Cmd: []string{"sh", "-c",
			fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo line$i; i=$((i+1)); sleep 0.05; done`, lines)}, TimeoutSeconds: 300}, &out, nil)
		done <- result{res, err}
	}()
	var term lockedBuffer
	tm, err := svc.StartTerminal(ctx, e.a.ID, sb.ID, []string{"sh"}, nil, agentproto.Winsize{Cols: 80, Rows: 24}, &term)
	if err != nil {
		t.Fatalf("StartTerminal = %v", err)
	}
	defer tm.Close()
	tm.Write([]byte("echo one$((1+1))\n"))
	waitUntil(t, "terminal and command output", time.Minute, func() bool {
		return strings.Contains(term.String(), "one2") && strings.Contains(out.String(), "line10\n")
	})

	old, err := e.pools().Agent(ctx, e.a.ID, sb.VMID)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Drop(); err != nil {
		t.Fatalf("Drop = %v", err)
	}
	waitUntil(t, "a new agent session", 2*time.Minute, func() bool {
		c, err := e.pools().Agent(ctx, e.a.ID, sb.VMID)
		return err == nil && c != old
	})
	c, _ := e.pools().Agent(ctx, e.a.ID, sb.VMID)

	// The terminal is back: what it runs now reaches the same output.
	waitUntil(t, "terminal resumed", 2*time.Minute, func() bool {
		tm.Write([]byte("echo two$((1+1))\n"))
		time.Sleep(500 * time.Millisecond)
		return strings.Contains(term.String(), "two2")
	})
	var r result
	select {
	case r = <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("command did not end")
	}
	if r.err != nil || r.res.ExitCode != 0 || r.res.Reason != "exited" {
		t.Fatalf("Got(Exec) = %+v, %v; want exited 0", r.res, r.err)
	}
	var want strings.Builder
	for i := range lines {
		fmt.Fprintf(&want, "line%d\n", i)
	}
	if out.String() != want.String() {
		t.Errorf("Got(output across the session loss) = %q; want every line once, in order", out.String())
	}
	recs, err := svc.Execs(ctx, e.a.ID, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.ID == r.res.ExecID && (rec.EndedAt == nil || rec.Reason != "exited" || rec.StdoutBytes != int64(want.Len())) {
			t.Errorf("Got(record of the command) = end %v, reason %q, %d bytes; want exited with all %d bytes", rec.EndedAt, rec.Reason, rec.StdoutBytes, want.Len())
		}
	}
	// The terminal still runs on the new session, attached.
	list, err := c.ListExecs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Besides the terminal the agent may still hold a command that ended
	// while no host took its exit (kept for a re-attach until the grace);
	// nothing else may still run.
	terms := 0
	for _, x := range list {
		switch {
		case strings.HasPrefix(x.ID, "term-"):
			terms++
			if !x.Attached || x.Exited {
				t.Errorf("Got(terminal %s) = attached %v, exited %v; want running, attached", x.ID, x.Attached, x.Exited)
			}
		case !x.Exited:
			t.Errorf("Got(agent's exec %s) still running; want only the terminal running", x.ID)
		}
	}
	if terms != 1 {
		t.Errorf("Got(agent's execs) = %+v; want the terminal, attached", list)
	}

	// A command record whose process the agent does not have: lost.
	lost := sandbox.ExecRecord{ID: "0190aaaa-0000-7000-8000-000000000001", SandboxID: sb.ID, TenantID: e.a.ID,
		ArgvJSON: `["sleep","600"]`, StartedAt: time.Now().UTC().Add(-time.Minute)}
	if err := e.db.Create(&lost).Error; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the lost record closed", time.Minute, func() bool {
		var rec sandbox.ExecRecord
		return e.db.First(&rec, "id = ?", lost.ID).Error == nil && rec.EndedAt != nil
	})
	var rec sandbox.ExecRecord
	e.db.First(&rec, "id = ?", lost.ID)
	if rec.Reason != sandbox.ReasonLost || rec.EndedAt.Before(lost.StartedAt) || rec.DurationMS < 60000 {
		t.Errorf("Got(lost record) = reason %q, end %v, %d ms; want lost, after its start", rec.Reason, rec.EndedAt, rec.DurationMS)
	}
}

// childExecEnv makes the child control plane (runChild) stream a command
// in that sandbox instead of creating one; with childTermEnv (an API token
// id) it first opens a terminal there as that token, and types into it.
const (
	childExecEnv = "SANDBOX_TEST_CHILD_EXEC"
	childTermEnv = "SANDBOX_TEST_CHILD_TERMINAL"
)

// survivorScript prints 60 lines, then waits for /workspace/go and says
// done: it cannot end before the test let it.
const survivorScript = `i=0; while [ $i -lt 60 ]; do echo line$i; i=$((i+1)); sleep 0.1; done; ` +
	`while [ ! -e /workspace/go ]; do sleep 0.2; done; echo done`

// runExecChild streams survivorScript in sandbox id, printing STARTED
// <exec id> and each output chunk as OUT <quoted>, until it is killed.
// With childTermEnv it first opens a terminal (openChildTerminal).
func runExecChild(db *gorm.DB, svc *sandbox.Service, id string) int {
	var mu sync.Mutex
	say := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", a...)
	}
	if tok := os.Getenv(childTermEnv); tok != "" {
		if err := openChildTerminal(db, svc, id, tok, say); err != nil {
			fmt.Fprintln(os.Stderr, "child terminal:", err)
			return 3
		}
	}
	actor := audit.Actor{Kind: audit.ActorUser, ID: childActorID, Name: "child@a.test"}
	_, err := svc.Exec(ctx, actor, os.Getenv(childTenantEnv), id, sandbox.ExecRequest{Cmd: []string{"sh", "-c", survivorScript},
		TimeoutSeconds: 600, Started: func(execID string, _ int) { say("STARTED %s", execID) }},
		writerFunc(func(p []byte) { say("OUT %q", p) }), nil)
	say("ENDED %v", err)
	select {} // until killed
}

// openChildTerminal opens a terminal in sandbox id as the token tokenID,
// the way the WebSocket route does, runs a command in it and prints TERM
// <session id> once its output is on the screen.
func openChildTerminal(db *gorm.DB, svc *sandbox.Service, id, tokenID string, say func(string, ...any)) error {
	terms := newTerminals(db, svc, os.Getenv(childDirEnv), testLogger())
	if err := terms.Start(ctx); err != nil {
		return err
	}
	tenant := os.Getenv(childTenantEnv)
	actor := audit.Actor{Kind: audit.ActorToken, ID: tokenID, Name: "survivor"}
	sess, err := terms.Open(ctx, actor, tenant, id, terminal.OpenRequest{Argv: []string{"sh"}})
	if err != nil {
		return err
	}
	c, err := terms.Join(ctx, actor, tenant, id, sess.ID, terminal.JoinRequest{Drive: true, CanDrive: true, Offset: 0})
	if err != nil {
		return err
	}
	var screen lockedBuffer
	go func() {
		for m := range c.Out() {
			screen.Write(m.Data)
			c.Sent(m)
		}
	}()
	if err := c.Input([]byte("echo before-$((6*7))\n")); err != nil {
		return err
	}
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(screen.String(), "before-42"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the terminal showed %q within 2 min; want before-42", screen.String())
		}
	}
	say("TERM %s", sess.ID)
	return nil
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// TestCommandSurvivesServerKill (real VMs): the control plane streaming a
// command and holding a terminal is killed with SIGKILL (a child process:
// no Close, no goodbye); a new server starts on the same database and VMs,
// and the client resumes from the offset it had: the command still runs,
// and the output it gets continues exactly where it stopped, every line
// once. The record stays open while the command lives, then gets its real
// end. The terminal is taken up by the new server: its WebSocket connects
// to the same session, shows the screen from before the kill, and what is
// typed runs; its recording goes on in the same file.
func TestCommandSurvivesServerKill(t *testing.T) {
	e := need(t)
	dev := audit.Actor{Kind: audit.ActorSystem, ID: "test", Name: "survive test"}
	sb, err := e.service().Create(ctx, dev, e.a.ID, sandbox.Spec{MemoryMiB: 48})
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	defer func() { e.service().Destroy(ctx, dev, e.a.ID, sb.ID) }()
	secret, tok, err := tenants.NewStore(e.db, nil).CreateToken(ctx, dev, e.a.ID, tenants.NewToken{Name: "survivor", Role: tenants.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}

	e.stop()
	restarted := false
	defer func() {
		if !restarted {
			e.start()
		}
	}()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childDirEnv+"="+e.dbPath(), childTenantEnv+"="+e.a.ID, childDataEnv+"="+e.dataDir,
		childTypeEnv+"="+e.domainType, childExecEnv+"="+sb.ID, childTermEnv+"="+tok.ID)
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
	var execID, termID string
	var got strings.Builder
	for timeout := time.After(4 * time.Minute); !strings.Contains(got.String(), "line20\n") || termID == ""; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the child ended; output so far %q", got.String())
			}
			switch {
			case strings.HasPrefix(l, "STARTED "):
				execID = strings.TrimPrefix(l, "STARTED ")
			case strings.HasPrefix(l, "TERM "):
				termID = strings.TrimPrefix(l, "TERM ")
			case strings.HasPrefix(l, "OUT "):
				s, err := strconv.Unquote(strings.TrimPrefix(l, "OUT "))
				if err != nil {
					t.Fatalf("child line %q: %v", l, err)
				}
				got.WriteString(s)
			case strings.HasPrefix(l, "ENDED "):
				t.Fatalf("the command ended in the child: %s", l)
			}
		case <-timeout:
			t.Fatalf("the child streamed %q within 4 min; want line20", got.String())
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	offset := int64(got.Len())
	// A live session whose terminal the agent does not have (its process
	// went while no server watched): the new server closes it, at the time
	// it was last seen alive, with the reason.
	seen := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
	gone := terminal.Session{ID: "0190aaaa-0000-7000-8000-000000000002", TenantID: e.a.ID, SandboxID: sb.ID, OpenedBy: tok.ID,
		OpenedByKind: audit.ActorToken, ArgvJSON: `["sh"]`, Cols: 80, Rows: 24, StartedAt: seen.Add(-time.Minute), SeenAt: seen, RetentionDays: 1}
	if err := e.db.Create(&gone).Error; err != nil {
		t.Fatal(err)
	}

	if err := e.start(); err != nil {
		t.Fatalf("restart the services: %v", err)
	}
	restarted = true
	svc := e.service()
	var rest lockedBuffer
	type result struct {
		res sandbox.ExecResult
		err error
	}
	done := make(chan result, 1)
	startCh := make(chan int64, 1)
	go func() {
		var res sandbox.ExecResult
		err := errors.New("no agent session")
		// The new server's pool opens the VM's session shortly after start.
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
			res, err = svc.ResumeExec(ctx, dev, e.a.ID, sb.ID, execID, offset, func(start int64, _ int) { startCh <- start }, &rest, nil)
			if !errors.Is(err, vmpool.ErrUnavailable) {
				break
			}
		}
		done <- result{res, err}
	}()
	select {
	case start := <-startCh:
		if start != offset {
			t.Errorf("Got(resume start) = %d; want %d: nothing dropped", start, offset)
		}
	case r := <-done:
		t.Fatalf("Got(ResumeExec) = %+v, %v; want it re-attached", r.res, r.err)
	}
	// Still running, still open in the record.
	var rec sandbox.ExecRecord
	if err := e.db.First(&rec, "id = ?", execID).Error; err != nil || rec.EndedAt != nil {
		t.Errorf("Got(record while it runs) = end %v, %v; want open", rec.EndedAt, err)
	}
	if _, err := svc.WriteFile(ctx, dev, e.a.ID, sb.ID, "go", strings.NewReader(""), 0o644); err != nil {
		t.Fatalf("WriteFile(go) = %v", err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the resumed command did not end")
	}
	if r.err != nil || r.res.ExitCode != 0 || r.res.Reason != "exited" {
		t.Fatalf("Got(ResumeExec) = %+v, %v; want exited 0", r.res, r.err)
	}
	var want strings.Builder
	for i := range 60 {
		fmt.Fprintf(&want, "line%d\n", i)
	}
	want.WriteString("done\n")
	if all := got.String() + rest.String(); all != want.String() {
		t.Errorf("Got(output before the kill + after the resume) = %q; want every line once, in order", all)
	}
	if err := e.db.First(&rec, "id = ?", execID).Error; err != nil || rec.EndedAt == nil || rec.Reason != "exited" || rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Errorf("Got(record after the end) = %+v, %v; want ended, exited 0", rec, err)
	}

	// The terminal: the same session, as its page reconnects to it.
	surviveTerminal(t, e, sb.ID, termID, secret)
	var g terminal.Session
	waitUntil(t, "the session whose terminal is gone closed", time.Minute, func() bool {
		return e.db.First(&g, "id = ?", gone.ID).Error == nil && g.EndedAt != nil
	})
	if !strings.Contains(g.EndReason, "process was gone") || !g.EndedAt.Equal(seen) {
		t.Errorf("Got(session whose terminal is gone) = end %v, reason %q; want closed at %v (last seen), its process gone", g.EndedAt, g.EndReason, seen)
	}
}

// surviveTerminal checks that the terminal session termID, which a killed
// server held, was taken up by the new one: the opener's token connects to
// it again and drives, the screen from before the kill is there, a command
// typed now runs, and the recording holds both.
func surviveTerminal(t *testing.T, e *testEnv, sandboxID, termID, secret string) {
	t.Helper()
	u, err := terminal.SocketURL(e.webEnv().URL, sandboxID, url.Values{"session": {termID}})
	if err != nil {
		t.Fatal(err)
	}
	var ws *websocket.Conn
	waitUntil(t, "the terminal taken up by the new server", 2*time.Minute, func() bool {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		c, err := terminal.Dial(dctx, u, http.Header{"Authorization": {"Bearer " + secret}}, nil)
		if err != nil && strings.Contains(err.Error(), "ended") {
			t.Fatalf("Got(connect to the terminal after the restart) = %v; want the session live", err)
		}
		ws = c
		return err == nil
	})
	conn := terminaltest.NewConn(ws, nil)
	defer ws.Close()
	if h := conn.Hello(t); h.Role != terminal.RoleDriver || h.Session != termID {
		t.Fatalf("Got(hello after the restart) = %+v; want session %s, driving", h, termID)
	}
	conn.WaitOutput(t, "before-42", time.Minute) // the screen from before the kill
	conn.Type(t, "echo after-$((6*7))\n")
	conn.WaitOutput(t, "after-42", time.Minute)

	e.mu.Lock()
	terms := e.terms
	e.mu.Unlock()
	if err := terms.End(e.a.ID, termID, "test done"); err != nil {
		t.Fatal(err)
	}
	var sess terminal.Session
	waitUntil(t, "the session recorded ended", time.Minute, func() bool {
		sess, err = terms.Session(ctx, e.a.ID, termID)
		return err == nil && !sess.Live()
	})
	if sess.EndReason != "test done" || sess.BytesOut < int64(len(conn.Output())) {
		t.Errorf("Got(session after the end) = reason %q, %d bytes out; want test done, at least the %d bytes seen", sess.EndReason, sess.BytesOut, len(conn.Output()))
	}
	f, _, err := terms.OpenRecording(ctx, e.a.ID, termID)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cast, err := terminal.ReadCast(f)
	if err != nil {
		t.Fatalf("ReadCast(recording across the restart) = %v", err)
	}
	out := string(cast.Output())
	if !strings.Contains(out, "before-42") || !strings.Contains(out, "after-42") || strings.Count(out, "before-42") != 1 {
		t.Errorf("Got(recording) = %q; want before-42 once, then after-42", out)
	}
	markers := 0
	for _, ev := range cast.Events {
		if ev.Kind == terminal.CastMarker && strings.Contains(ev.Data, "server restarted") {
			markers++
		}
	}
	if markers != 1 {
		t.Errorf("Got(restart markers in the recording) = %d; want 1", markers)
	}
}

// TestStalledStreamClientTimesOut (real VMs): a client of a streamed
// command that stops reading (its receive window full) does not hold the
// command and its sandbox for ever: past the stream write timeout (2 s
// here) the command is killed and recorded with reason "timeout".
func TestStalledStreamClientTimesOut(t *testing.T) {
	e := need(t)
	api := e.api(e.tokA)
	sb := create(t, api, map[string]any{"memory_mib": 64})
	defer destroy(t, api, sb.ID)
	// Far more than the socket buffers hold, and than the test would wait for.
	body, _ := json.Marshal(map[string]any{"cmd": []string{"sh", "-c", "yes abcdefghijklmnopqrstuvwxyz0123456789 | head -c 2000000000"}})
	req, _ := http.NewRequest(http.MethodPost, api.Base+"/api/v1/sandboxes/"+sb.ID+"/exec?stream=1", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := api.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Got(stream) = %d; want 200", resp.StatusCode)
	}
	// Read nothing more.
	var rec sandbox.ExecRecord
	waitUntil(t, "the stalled command ended", 3*time.Minute, func() bool {
		recs, err := e.service().Execs(ctx, e.a.ID, sb.ID)
		if err != nil || len(recs) == 0 || recs[0].EndedAt == nil {
			return false
		}
		rec = recs[0]
		return true
	})
	if rec.Reason != "timeout" {
		t.Errorf("Got(record of the stalled command) = reason %q; want timeout", rec.Reason)
	}
}
