package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

func pooled(sb *sandbox) []*net.UnixConn {
	sb.inits.mu.Lock()
	defer sb.inits.mu.Unlock()
	var cs []*net.UnixConn
	for _, pc := range sb.inits.idle {
		cs = append(cs, pc.c)
	}
	return cs
}

// Commands one after another share one connection to the sandbox's init,
// and every exec behaviour is kept on a reused one.
func TestExecReusesInitConnection(t *testing.T) {
	c, sb := hostSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := func(argv ...string) agentproto.ExitStatus {
		t.Helper()
		st, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: sb.id, Argv: argv}, nil, nil, nil)
		if err != nil {
			t.Fatalf("Exec(%q) = %v", argv, err)
		}
		return st
	}
	run("true")
	waitFor(t, func() bool { return len(pooled(sb)) == 1 })
	first := pooled(sb)[0]
	tests := []struct {
		argv       []string
		wantCode   int
		wantSignal string
	}{
		{argv: []string{"true"}},
		{argv: []string{"sh", "-c", "exit 7"}, wantCode: 7},
		{argv: []string{"sh", "-c", "kill -TERM $$"}, wantCode: 143, wantSignal: "TERM"},
		{argv: []string{"true"}},
	}
	for _, tc := range tests {
		st := run(tc.argv...)
		if st.Code != tc.wantCode || st.Signal != tc.wantSignal {
			t.Errorf("Got(Exec(%q)) = %+v; want code %d signal %q", tc.argv, st, tc.wantCode, tc.wantSignal)
		}
		waitFor(t, func() bool { return len(pooled(sb)) == 1 })
		if got := pooled(sb)[0]; got != first {
			t.Errorf("Got(connection after %q) = a new one; want the first one reused", tc.argv)
		}
	}
	// A control that crosses the exit arrives on the reused connection
	// before the next request: init drops it.
	if err := sendInit(first, initControl{Signal: int(unix.SIGKILL)}); err != nil {
		t.Fatal(err)
	}
	if st := run("sh", "-c", "exit 4"); st.Code != 4 || st.Signal != "" {
		t.Errorf("Got(Exec after a late control) = %+v; want code 4", st)
	}
}

// A signal for a command that ended never reaches the next command on the
// same connection.
func TestLateSignalSpareNextCommand(t *testing.T) {
	_, sb := hostSandbox(t)
	m := &Manager{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wait := func(p *spawned) initExit {
		t.Helper()
		var ex initExit
		fds, err := recvInit(p.c, &ex)
		closeFDs(fds)
		if err != nil {
			t.Fatalf("exit of %d: %v", p.pid, err)
		}
		return ex
	}
	a, err := m.spawn(ctx, sb, spawnRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	if ex := wait(a); !ex.Reuse {
		t.Fatalf("Got(exit of true) = %+v; want Reuse", ex)
	}
	a.release(&sb.inits)
	b, err := m.spawn(ctx, sb, spawnRequest{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if got, want := b.c, a.c; got == nil || want != nil {
		t.Fatalf("Got(connections) = the next %p, the ended %p; want the next one's set, the ended one's cleared", got, want)
	}
	// Init reads a connection's messages in order: a kill sent for a
	// would reach b before b's own TERM.
	a.control(unix.SIGKILL)
	killSpawned(a)
	b.control(unix.SIGTERM)
	if ex := wait(b); ex.Signal != int(unix.SIGTERM) {
		t.Errorf("Got(exit of sleep after a late kill of the previous command, then its TERM) = %+v; want SIGTERM", ex)
	}
}

// A pooled connection init closed (it went idle, or it was restarted) is
// not used: the exec dials anew, also when the close crosses the request.
func TestExecRedialsClosedInitConnection(t *testing.T) {
	c, sb := hostSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := func(t *testing.T) {
		t.Helper()
		st, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: sb.id, Argv: []string{"sh", "-c", "exit 5"}}, nil, nil, nil)
		if err != nil || st.Code != 5 {
			t.Fatalf("Got(Exec()) = %+v, %v; want code 5", st, err)
		}
	}
	tests := []struct {
		name string
		// peer plays init's end of a pooled connection.
		peer func(t *testing.T, c *net.UnixConn)
	}{
		{name: "closed while idle", peer: func(t *testing.T, c *net.UnixConn) { c.Close() }},
		{name: "closed as the request came", peer: func(t *testing.T, c *net.UnixConn) {
			go func() {
				var req initRequest
				recvInit(c, &req)
				c.Close()
			}()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sb.inits.closeAll()
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			ours, theirs := fileConn(t, fds[0]), fileConn(t, fds[1])
			defer theirs.Close()
			sb.inits.put(ours)
			tc.peer(t, theirs)
			run(t)
			if cs := pooled(sb); len(cs) != 1 || cs[0] == ours {
				t.Errorf("Got(pool after the exec) = %d connections (the closed one: %v); want the new one", len(cs), len(cs) > 0 && cs[0] == ours)
			}
		})
	}
}

// Pooled connections are closed once idle for initConnIdle: an idle
// sandbox's init holds none of them.
func TestInitPoolExpires(t *testing.T) {
	c, sb := hostSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: sb.id, Argv: []string{"true"}}, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(pooled(sb)) == 1 })
	conn := pooled(sb)[0]
	waitFor(t, func() bool { return len(pooled(sb)) == 0 })
	if err := sendInit(conn, initControl{}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Got(send on an expired connection) = %v; want it closed", err)
	}
}

func fileConn(t *testing.T, fd int) *net.UnixConn {
	t.Helper()
	f := os.NewFile(uintptr(fd), "seqpacket")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.UnixConn)
}
