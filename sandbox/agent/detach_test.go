package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// newHostSession opens another host session to srv, as a new server would
// after the old one crashed: a fresh channel, a fresh hello.
func newHostSession(t *testing.T, ctx context.Context, srv *Server, grace time.Duration) *agentproto.Client {
	t.Helper()
	hostEnd, agentEnd := net.Pipe()
	go srv.Serve(ctx, agentEnd)
	t.Cleanup(func() { hostEnd.Close() })
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := agentproto.Dial(dctx, hostEnd, agentproto.ClientOptions{Name: "test-2", ExecGrace: grace})
	if err != nil {
		t.Fatalf("Dial(second session) = %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func execIDs(t *testing.T, ctx context.Context, c *agentproto.Client) map[string]agentproto.ExecInfo {
	t.Helper()
	list, err := c.ListExecs(ctx)
	if err != nil {
		t.Fatalf("ListExecs() = %v", err)
	}
	out := map[string]agentproto.ExecInfo{}
	for _, in := range list {
		out[in.ID] = in
	}
	return out
}

// TestExecSurvivesSessionLoss drops the host's channel without the goodbye
// (a crashed server) in the middle of a streaming exec and a terminal, then
// opens a new session: both still run, and their output is complete once
// re-attached.
func TestExecSurvivesSessionLoss(t *testing.T) {
	c1, sb, srv, hostEnd1 := hostSandboxServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	next := make(chan *agentproto.Client, 2)
	resume := func(ctx context.Context) (*agentproto.Client, error) {
		select {
		case c := <-next:
			next <- c // the terminal resumes on it too
			return c, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// Prints lines until it reads "stop", as the session goes and comes.
	var out, errOut syncBuffer
	e, err := c1.StartResumableExec(ctx, agentproto.ExecRequest{ID: "exec-1", Sandbox: sb.id, Stdin: true, Argv: []string{"sh", "-c",
		`i=0; while [ $i -lt 300 ]; do echo out$i; echo err$i >&2; i=$((i+1)); sleep 0.01; done; read x; echo got $x`}}, &out, &errOut, resume)
	if err != nil {
		t.Fatal(err)
	}
	var term syncBuffer
	tm, err := c1.StartResumableExec(ctx, agentproto.ExecRequest{ID: "term-1", Sandbox: sb.id, TTY: true, Stdin: true,
		Argv: []string{"sh", "-c", `read a; echo first $a; read b; echo second $b`}}, &term, nil, resume)
	if err != nil {
		t.Fatal(err)
	}
	tm.Write([]byte("one\n"))
	waitFor(t, func() bool {
		return strings.Contains(term.String(), "first one") && strings.Contains(out.String(), "out20\n")
	})

	hostEnd1.Close() // no goodbye
	waitFor(t, func() bool { _, err := c1.Ping(ctx); return err != nil })
	c2 := newHostSession(t, ctx, srv, time.Minute)
	// Not attached now; the agent keeps them. Each exec learns of its
	// session's end on its own, so the list may say attached a moment.
	var got map[string]agentproto.ExecInfo
	waitFor(t, func() bool {
		got = execIDs(t, ctx, c2)
		return !got["exec-1"].Attached && !got["term-1"].Attached
	})
	for _, id := range []string{"exec-1", "term-1"} {
		if in, ok := got[id]; !ok || in.Attached || in.Exited {
			t.Errorf("Got(ListExecs()[%s]) = %+v, %v; want it held, detached, running", id, in, ok)
		}
	}
	next <- c2

	waitFor(t, func() bool { return strings.Contains(out.String(), "out299\n") })
	if _, err := e.Write([]byte("stop\n")); err != nil {
		t.Fatalf("Write(after re-attach) = %v", err)
	}
	st, err := e.Wait()
	if err != nil || st.Code != 0 || st.Reason != agentproto.ReasonExited {
		t.Fatalf("Got(Wait()) = %+v, %v; want exited 0", st, err)
	}
	var wantOut, wantErr strings.Builder
	for i := range 300 {
		fmt.Fprintf(&wantOut, "out%d\n", i)
		fmt.Fprintf(&wantErr, "err%d\n", i)
	}
	wantOut.WriteString("got stop\n")
	if out.String() != wantOut.String() || errOut.String() != wantErr.String() {
		t.Errorf("Got(stdout, stderr) = %q, %q; want every line once, in order", out.String(), errOut.String())
	}
	if dropped, resumes := e.Dropped(); dropped != 0 || resumes != 1 {
		t.Errorf("Got(Dropped()) = %d, %d; want 0 bytes, 1 resume", dropped, resumes)
	}

	if _, err := tm.Write([]byte("two\n")); err != nil {
		t.Fatalf("terminal Write(after re-attach) = %v", err)
	}
	st, err = tm.Wait()
	if err != nil || st.Code != 0 {
		t.Fatalf("Got(terminal Wait()) = %+v, %v; want exit 0", st, err)
	}
	if s := strings.ReplaceAll(term.String(), "\r", ""); strings.Count(s, "first one\n") != 1 || !strings.Contains(s, "second two\n") {
		t.Errorf("Got(terminal output) = %q; want both answers, the first once", s)
	}
	// Delivered: forgotten.
	if got := execIDs(t, ctx, c2); len(got) != 0 {
		t.Errorf("Got(ListExecs() after both ended) = %v; want none", got)
	}
}

// TestDetachedExecGrace: a detached exec nobody re-attaches is killed when
// the grace the new host set passes, and forgotten; an exec without an id,
// or one whose stream the host closed, dies at once as before.
func TestDetachedExecGrace(t *testing.T) {
	c1, sb, srv, hostEnd1 := hostSandboxServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	long := []string{"sh", "-c", "sleep 60; echo not reached"}
	kept, err := c1.StartExec(ctx, agentproto.ExecRequest{ID: "kept", Sandbox: sb.id, Argv: long}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	anon, err := c1.StartExec(ctx, agentproto.ExecRequest{Sandbox: sb.id, Argv: long}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	cancelled, err := c1.StartExec(cctx, agentproto.ExecRequest{ID: "cancelled", Sandbox: sb.id, Argv: long}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c1.StartExec(ctx, agentproto.ExecRequest{ID: "kept", Sandbox: sb.id, Argv: long}, nil, nil); !errors.Is(err, agentproto.ErrConflict) {
		t.Errorf("Got(StartExec(same id)) = %v; want ErrConflict", err)
	}
	ccancel()
	gone := func(pid int) func() bool {
		return func() bool { return errors.Is(syscall.Kill(-pid, 0), syscall.ESRCH) }
	}
	waitFor(t, gone(cancelled.PID()))

	hostEnd1.Close()
	waitFor(t, gone(anon.PID()))
	if _, err := kept.Wait(); !errors.Is(err, agentproto.ErrSessionLost) {
		t.Errorf("Got(Wait() of a plain exec whose session went) = %v; want ErrSessionLost", err)
	}
	c2 := newHostSession(t, ctx, srv, time.Minute)
	if got := execIDs(t, ctx, c2); !slices.Equal(keys(got), []string{"kept"}) {
		t.Errorf("Got(ListExecs()) = %v; want only kept", got)
	}
	if syscall.Kill(-kept.PID(), 0) != nil {
		t.Errorf("Got(kept exec) gone; want it running within the grace")
	}
	// A newer host's shorter grace holds from the detach on.
	c2 = newHostSession(t, ctx, srv, time.Second)
	waitFor(t, gone(kept.PID()))
	waitFor(t, func() bool { return len(execIDs(t, ctx, c2)) == 0 })
	_, err = c2.StartResumableExec(ctx, agentproto.ExecRequest{ID: "bad id!", Sandbox: sb.id, Argv: long}, nil, nil, nil)
	if !errors.Is(err, agentproto.ErrBadRequest) {
		t.Errorf("Got(StartResumableExec(bad id)) = %v; want ErrBadRequest", err)
	}
}

func keys(m map[string]agentproto.ExecInfo) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestDetachedExecBufferBound: a detached exec's output is kept up to the
// bound only: the re-attach says where the kept output starts, and what
// arrives from there is the exact tail.
func TestDetachedExecBufferBound(t *testing.T) {
	c1, sb, srv, hostEnd1 := hostSandboxServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const total = 3 << 20
	e, err := c1.StartExec(ctx, agentproto.ExecRequest{ID: "big", Sandbox: sb.id, Argv: []string{"sh", "-c",
		fmt.Sprintf("sleep 0.5; head -c %d /dev/zero | tr '\\000' a; echo; echo end", total)}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hostEnd1.Close()
	e.Wait()
	c2 := newHostSession(t, ctx, srv, time.Minute)
	waitFor(t, func() bool { in, ok := execIDs(t, ctx, c2)["big"]; return ok && in.Exited })
	in := execIDs(t, ctx, c2)["big"]
	if in.Output != total+5 || in.Buffered > execBufferBytes {
		t.Errorf("Got(ExecInfo) = %+v; want %d bytes written, at most %d kept", in, total+5, execBufferBytes)
	}
	var out syncBuffer
	a, err := c2.AttachExec(ctx, "big", 0, &out, nil, nil)
	if err != nil {
		t.Fatalf("AttachExec() = %v", err)
	}
	st, err := a.Wait()
	if err != nil || st.Code != 0 {
		t.Fatalf("Got(Wait()) = %+v, %v; want exit 0", st, err)
	}
	got := out.String()
	if a.Start() <= 0 || a.Start()+int64(len(got)) != total+5 || !strings.HasSuffix(got, "aaa\nend\n") || strings.Trim(got, "a\nend") != "" {
		t.Errorf("Got(attach) = start %d, %d bytes; want the tail of %d bytes, after a drop", a.Start(), len(got), total+5)
	}
	if _, err := c2.AttachExec(ctx, "big", 0, nil, nil, nil); !errors.Is(err, agentproto.ErrNotFound) {
		t.Errorf("Got(AttachExec(delivered)) = %v; want ErrNotFound", err)
	}
}
