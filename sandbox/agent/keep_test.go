package agent

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// TestKeptExec: a kept exec (a process of the process API) survives its
// host closing the stream and its session going for longer than the grace;
// a new session re-attaches it from offset 0 and gets its output so far,
// then its exit. Keep without an id is refused; destroying the sandbox
// forgets a kept exec whose exit nobody took.
func TestKeptExec(t *testing.T) {
	c1, sb, srv, hostEnd1 := hostSandboxServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if _, err := c1.StartExec(ctx, agentproto.ExecRequest{Sandbox: sb.id, Keep: true, Argv: []string{"true"}}, nil, nil); !errors.Is(err, agentproto.ErrBadRequest) {
		t.Errorf("Got(StartExec(keep, no id)) = %v; want ErrBadRequest", err)
	}
	var out syncBuffer
	e, err := c1.StartExec(ctx, agentproto.ExecRequest{ID: "proc-1", Sandbox: sb.id, Keep: true, Stdin: true,
		Argv: []string{"sh", "-c", `echo before; read x; echo got $x`}}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(out.String(), "before\n") })
	e.Detach() // the host closed its stream: a kept exec lives on
	// Its session goes too, and the next host asks for a grace of 1 s.
	hostEnd1.Close()
	waitFor(t, func() bool { _, err := c1.Ping(ctx); return err != nil })
	c2 := newHostSession(t, ctx, srv, time.Second)
	time.Sleep(2 * time.Second) // past the grace: a plain exec would be killed by now
	if syscall.Kill(-e.PID(), 0) != nil {
		t.Fatalf("Got(kept exec after its stream closed and the grace passed) gone; want running")
	}
	if in, ok := execIDs(t, ctx, c2)["proc-1"]; !ok || in.Attached || in.Exited {
		t.Errorf("Got(ListExecs()[proc-1]) = %+v, %v; want held, detached, running", in, ok)
	}
	var again syncBuffer
	a, err := c2.AttachExec(ctx, "proc-1", 0, &again, nil, nil)
	if err != nil {
		t.Fatalf("AttachExec(proc-1, 0) = %v", err)
	}
	if _, err := a.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	st, err := a.Wait()
	if err != nil || st.Code != 0 || st.Reason != agentproto.ReasonExited {
		t.Fatalf("Got(Wait()) = %+v, %v; want exited 0", st, err)
	}
	if a.Start() != 0 || again.String() != "before\ngot go\n" {
		t.Errorf("Got(re-attached output) = start %d, %q; want from 0, \"before\\ngot go\\n\"", a.Start(), again.String())
	}

	// One that ends detached waits for a host until its sandbox goes.
	d, err := c2.StartExec(ctx, agentproto.ExecRequest{ID: "proc-2", Sandbox: sb.id, Keep: true, Argv: []string{"sh", "-c", "sleep 0.2; exit 3"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Detach()
	waitFor(t, func() bool { in, ok := execIDs(t, ctx, c2)["proc-2"]; return ok && in.Exited })
	if in := execIDs(t, ctx, c2)["proc-2"]; in.Exit == nil || in.Exit.Code != 3 {
		t.Errorf("Got(ListExecs()[proc-2]) = %+v; want exited 3", in)
	}
	srv.cfg.Sandboxes.execs.dropSandbox(sb.id)
	if got := execIDs(t, ctx, c2); len(got) != 0 {
		t.Errorf("Got(ListExecs() after the sandbox went) = %v; want none", got)
	}
}

// TestSetLifetimeBadInput: the lifetime op refuses seconds out of range and
// an unknown sandbox, changing nothing.
func TestSetLifetimeBadInput(t *testing.T) {
	c, sb, _, _ := hostSandboxServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		id      string
		seconds int
		want    error
	}{
		{sb.id, 0, agentproto.ErrBadRequest},
		{sb.id, -5, agentproto.ErrBadRequest},
		{sb.id, agentproto.MaxLifetimeSeconds + 1, agentproto.ErrBadRequest},
		{"nope", 60, agentproto.ErrNotFound},
		// A sandbox the test made by hand has no supervisor to tell.
		{sb.id, 60, agentproto.ErrConflict},
	} {
		if err := c.SetSandboxLifetime(ctx, tc.id, tc.seconds); !errors.Is(err, tc.want) {
			t.Errorf("Got(SetSandboxLifetime(%s, %d)) = %v; want %v", tc.id, tc.seconds, err, tc.want)
		}
	}
}
