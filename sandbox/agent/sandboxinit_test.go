package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agent/sandboxinit"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// initListenerEnv makes the test binary run as a sandbox's init (TestMain):
// the real sandbox-init code, in a process of its own, serving the
// listener handed over as fd 3, as crun hands over the agent's.
const initListenerEnv = "STOCKADE_TEST_SANDBOX_INIT_LISTENER"

func TestMain(m *testing.M) {
	if os.Getenv(initListenerEnv) != "" {
		f := os.NewFile(3, "listener")
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			os.Exit(2)
		}
		// As the sandbox user when asked, as crun starts a sandbox's init.
		if os.Getenv(initUserEnv) != "" {
			if err := dropToSandboxUser(); err != nil {
				os.Exit(3)
			}
		}
		sandboxinit.RunSandboxInit(context.Background(), l.(*net.UnixListener), sandboxinit.InitOptions{WorkDir: os.Getenv("STOCKADE_TEST_WORKDIR"),
			Root: os.Getenv("STOCKADE_TEST_ROOT")})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// initUserEnv makes the test init drop to the sandbox user first.
const initUserEnv = "STOCKADE_TEST_SANDBOX_INIT_USER"

func dropToSandboxUser() error {
	if err := syscall.Setgroups([]int{sandboxGID}); err != nil {
		return err
	}
	if err := syscall.Setresgid(sandboxGID, sandboxGID, sandboxGID); err != nil {
		return err
	}
	return syscall.Setresuid(sandboxUID, sandboxUID, sandboxUID)
}

// hostSandbox is a sandbox without a container: the real sandbox-init
// running as a plain process of this host, and a temporary folder as its
// root. It runs the agent's exec and file code end to end (client, server,
// init, pipes, terminals, openat2) in seconds; the same code runs in real
// containers in hypervisor/image's VM test.
func hostSandbox(t *testing.T) (*agentproto.Client, *sandbox) {
	t.Helper()
	return hostSandboxAs(t, false)
}

// hostSandboxAs is hostSandbox, with its init running as the sandbox user
// (uid and gid 1000, as in a real sandbox) when asUser; that needs root.
func hostSandboxAs(t *testing.T, asUser bool) (*agentproto.Client, *sandbox) {
	t.Helper()
	c, sb, _, _ := hostSandboxServerAs(t, asUser)
	return c, sb
}

// hostSandboxServer is hostSandbox with its agent server and the host end
// of the first session's channel (detach_test.go opens more sessions).
func hostSandboxServer(t *testing.T) (*agentproto.Client, *sandbox, *Server, net.Conn) {
	t.Helper()
	return hostSandboxServerAs(t, false)
}

func hostSandboxServerAs(t *testing.T, asUser bool) (*agentproto.Client, *sandbox, *Server, net.Conn) {
	t.Helper()
	dir := t.TempDir()
	sb := &sandbox{
		id: "host-1", dir: dir, rootfs: filepath.Join(dir, "rootfs"), cgroup: filepath.Join(dir, "no-cgroup"),
		state: agentproto.SandboxRunning, lastActive: time.Now(),
		stopping: make(chan struct{}), stopped: make(chan struct{}),
	}
	ws := filepath.Join(sb.rootfs, "workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	// The listener is made here, listening before init starts, as the
	// agent makes it for crun: a socket file that exists but does not
	// listen yet would refuse the first connection.
	ln, err := listenSeqpacket(sb.ctlPath())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), initListenerEnv+"=1", "STOCKADE_TEST_WORKDIR="+ws, "STOCKADE_TEST_ROOT="+sb.rootfs)
	if asUser {
		cmd.Env = append(cmd.Env, initUserEnv+"=1")
		// The sandbox user must reach its root, as in a real sandbox.
		for _, d := range []string{filepath.Dir(dir), dir, sb.rootfs} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(ws, sandboxUID, sandboxGID); err != nil {
			t.Fatal(err)
		}
	}
	cmd.ExtraFiles = []*os.File{ln}
	cmd.Stderr = os.Stderr
	err = cmd.Start()
	ln.Close() // init holds its own copy
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	m := &Manager{cfg: ManagerConfig{MaxFileBytes: 1 << 20}, log: slog.New(slog.DiscardHandler), sandboxes: map[string]*sandbox{sb.id: sb}}
	srv, err := NewServer(Config{PowerOff: func() error { return nil }, Sandboxes: m})
	if err != nil {
		t.Fatal(err)
	}
	hostEnd, agentEnd := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	go srv.Serve(ctx, agentEnd)
	t.Cleanup(func() { cancel(); hostEnd.Close() })
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	c, err := agentproto.Dial(dctx, hostEnd, agentproto.ClientOptions{Name: "test"})
	if err != nil {
		t.Fatalf("Dial() = %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, sb, srv, hostEnd
}

func TestExecThroughInit(t *testing.T) {
	c, sb := hostSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws := filepath.Join(sb.rootfs, "workspace")

	tests := []struct {
		name       string
		req        agentproto.ExecRequest
		stdin      string
		wantOut    string
		wantErr    string
		wantCode   int
		wantReason string
		wantSignal string
	}{
		{name: "echo", req: agentproto.ExecRequest{Argv: []string{"echo", "hello"}}, wantOut: "hello\n", wantReason: "exited"},
		{name: "exit code and stderr", req: agentproto.ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}},
			wantOut: "out\n", wantErr: "err\n", wantCode: 3, wantReason: "exited"},
		{name: "stdin", req: agentproto.ExecRequest{Argv: []string{"cat"}}, stdin: "abc\ndef", wantOut: "abc\ndef", wantReason: "exited"},
		{name: "env and default dir", req: agentproto.ExecRequest{Argv: []string{"sh", "-c", "echo $FOO; pwd"}, Env: []string{"FOO=bar"}},
			wantOut: "bar\n" + ws + "\n", wantReason: "exited"},
		{name: "dir", req: agentproto.ExecRequest{Argv: []string{"pwd"}, Dir: "/"}, wantOut: "/\n", wantReason: "exited"},
		{name: "timeout", req: agentproto.ExecRequest{Argv: []string{"sleep", "30"}, TimeoutSeconds: 1},
			wantCode: 137, wantReason: "timeout", wantSignal: "KILL"},
		{name: "timeout kills the group", req: agentproto.ExecRequest{Argv: []string{"sh", "-c", "sleep 30 & sleep 30; echo not reached"}, TimeoutSeconds: 1},
			wantCode: 137, wantReason: "timeout", wantSignal: "KILL"},
		{name: "own signal is not a kill", req: agentproto.ExecRequest{Argv: []string{"sh", "-c", "kill -TERM $$"}},
			wantCode: 143, wantReason: "exited", wantSignal: "TERM"},
		// A background child keeping stdout open does not hold the exec.
		{name: "background child", req: agentproto.ExecRequest{Argv: []string{"sh", "-c", "sleep 5 & echo started"}},
			wantOut: "started\n", wantReason: "exited"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Sandbox = sb.id
			var stdout, stderr bytes.Buffer
			var in *strings.Reader
			if tc.stdin != "" {
				in = strings.NewReader(tc.stdin)
			}
			start := time.Now()
			var st agentproto.ExitStatus
			var err error
			if in != nil {
				st, err = c.Exec(ctx, tc.req, in, &stdout, &stderr)
			} else {
				st, err = c.Exec(ctx, tc.req, nil, &stdout, &stderr)
			}
			if err != nil {
				t.Fatalf("Exec() = %v", err)
			}
			if stdout.String() != tc.wantOut || stderr.String() != tc.wantErr {
				t.Errorf("Got(stdout, stderr) = %q, %q; want %q, %q", stdout.String(), stderr.String(), tc.wantOut, tc.wantErr)
			}
			if st.Code != tc.wantCode || st.Reason != tc.wantReason || st.Signal != tc.wantSignal {
				t.Errorf("Got(ExitStatus) = %+v; want code %d reason %s signal %q", st, tc.wantCode, tc.wantReason, tc.wantSignal)
			}
			if el := time.Since(start); el > 4*time.Second {
				t.Errorf("Got(exec took) = %v; want < 4s", el)
			}
		})
	}

	t.Run("not found", func(t *testing.T) {
		_, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: sb.id, Argv: []string{"no-such-command"}}, nil, nil, nil)
		if !errors.Is(err, agentproto.ErrNotFound) {
			t.Errorf("Got(Exec(no-such-command)) = %v; want ErrNotFound", err)
		}
	})
	t.Run("bad requests", func(t *testing.T) {
		for _, req := range []agentproto.ExecRequest{
			{Sandbox: sb.id},
			{Sandbox: sb.id, Argv: []string{"echo", "a\x00b"}},
			{Sandbox: sb.id, Argv: []string{"true"}, Env: []string{"NOEQUALS"}},
			{Sandbox: sb.id, Argv: []string{"true"}, TimeoutSeconds: -1},
		} {
			if _, err := c.Exec(ctx, req, nil, nil, nil); !errors.Is(err, agentproto.ErrBadRequest) {
				t.Errorf("Got(Exec(%+v)) = %v; want ErrBadRequest", req, err)
			}
		}
		if _, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: "nope", Argv: []string{"true"}}, nil, nil, nil); !errors.Is(err, agentproto.ErrNotFound) {
			t.Errorf("Got(Exec(unknown sandbox)) = %v; want ErrNotFound", err)
		}
	})
	t.Run("host signal", func(t *testing.T) {
		e, err := c.StartExec(ctx, agentproto.ExecRequest{Sandbox: sb.id, Argv: []string{"sleep", "30"}}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		e.Signal("TERM")
		st, err := e.Wait()
		if err != nil || st.Reason != "killed" || st.Signal != "TERM" || st.Code != 143 {
			t.Errorf("Got(Wait() after TERM) = %+v, %v; want killed by TERM", st, err)
		}
	})
	t.Run("context cancel kills", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(ctx)
		// Far longer than the test: it cannot end on its own first.
		e, err := c.StartExec(cctx, agentproto.ExecRequest{Sandbox: sb.id,
			Argv: []string{"sh", "-c", "sleep 60; echo not reached"}}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ccancel()
		if _, err := e.Wait(); !errors.Is(err, context.Canceled) {
			t.Errorf("Got(Wait() after cancel) = %v; want context.Canceled", err)
		}
		// The whole process group goes, the sleep included (init runs as a
		// process of this host here: its PIDs are ours).
		waitFor(t, func() bool { return errors.Is(syscall.Kill(-e.PID(), 0), syscall.ESRCH) })
	})
	t.Run("terminal", func(t *testing.T) {
		var out syncBuffer
		e, err := c.StartExec(ctx, agentproto.ExecRequest{Sandbox: sb.id, TTY: true, Size: agentproto.Winsize{Rows: 30, Cols: 100},
			Argv: []string{"sh", "-c", "stty size; read x; stty size; [ -t 0 ] && echo tty"}}, &out, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return strings.Contains(out.String(), "30 100") })
		if err := e.Resize(agentproto.Winsize{Rows: 40, Cols: 120}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		e.Write([]byte("go\n"))
		st, err := e.Wait()
		if err != nil || st.Code != 0 {
			t.Fatalf("Got(Wait()) = %+v, %v; want exit 0", st, err)
		}
		got := strings.ReplaceAll(out.String(), "\r", "")
		if !strings.Contains(got, "30 100\n") || !strings.Contains(got, "40 120\n") || !strings.Contains(got, "tty\n") {
			t.Errorf("Got(terminal output) = %q; want both sizes and tty", got)
		}
	})
}

// syncBuffer is a bytes.Buffer safe to read while the exec writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
