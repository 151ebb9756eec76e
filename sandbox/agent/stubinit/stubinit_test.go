package stubinit_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor/image/stubinit"
	"github.com/stockade-dev/stockade/sandbox/agent/sandboxinit"
)

// built compiles the stub and the agent into a temporary folder.
func built(t *testing.T) (stub, agent string) {
	t.Helper()
	dir := t.TempDir()
	stub, agent = filepath.Join(dir, "init-stub"), filepath.Join(dir, "stockade-agent")
	if err := stubinit.Build(context.Background(), stub); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", agent, "github.com/stockade-dev/stockade/cmd/stockade-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build stockade-agent: %v: %s", err, out)
	}
	return stub, agent
}

// startInit runs the Go sandbox init on a socket, going idle after 100 ms.
func startInit(t *testing.T, agent, stub string, stderr io.Writer) (*exec.Cmd, string) {
	t.Helper()
	return startInitIdle(t, agent, stub, "100", stderr)
}

func startInitIdle(t *testing.T, agent, stub, idleMS string, stderr io.Writer) (*exec.Cmd, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "init.sock")
	cmd := exec.Command(agent, "sandbox-init", "--socket", sock, "--idle-ms", idleMS, "--stub", stub)
	cmd.Dir, cmd.Stderr = t.TempDir(), stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, sock
}

func dial(t *testing.T, sock string) *net.UnixConn {
	t.Helper()
	for i := 0; ; i++ {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
		if err == nil {
			return c
		}
		if i > 600 {
			t.Fatalf("dial init: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func hello(t *testing.T, sock string) *net.UnixConn {
	t.Helper()
	c := dial(t, sock)
	if err := sandboxinit.Send(c, sandboxinit.Request{Op: sandboxinit.OpHello}); err != nil {
		t.Fatal(err)
	}
	var rep sandboxinit.Reply
	fds, err := sandboxinit.Recv(c, &rep)
	sandboxinit.CloseFDs(fds)
	if err != nil || rep.PID == 0 {
		t.Fatalf("Got(hello) = %+v, %v; want a pid", rep, err)
	}
	return c
}

// waitExe waits until pid runs the program at want (the exec is the
// event; no time is asserted).
func waitExe(t *testing.T, pid int, want string) {
	t.Helper()
	for i := 0; ; i++ {
		got, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err == nil && got == want {
			return
		}
		if i > 1200 {
			t.Fatalf("Got(/proc/%d/exe) = %q, %v; want %s", pid, got, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// run spawns argv through the init and returns its stdout and exit code.
func run(t *testing.T, sock string, argv ...string) (string, int) {
	t.Helper()
	c := dial(t, sock)
	defer c.Close()
	if err := sandboxinit.Send(c, sandboxinit.Request{Op: sandboxinit.OpSpawn, Spawn: &sandboxinit.SpawnRequest{Argv: argv, Dir: "/tmp"}}); err != nil {
		t.Fatal(err)
	}
	var rep sandboxinit.Reply
	fds, err := sandboxinit.Recv(c, &rep)
	if err != nil || rep.Error != "" || len(fds) != 2 {
		sandboxinit.CloseFDs(fds)
		t.Fatalf("Got(spawn %v) = %+v, %d fds, %v; want a pid and stdout, stderr", argv, rep, len(fds), err)
	}
	out := os.NewFile(uintptr(fds[0]), "stdout")
	os.NewFile(uintptr(fds[1]), "stderr").Close()
	b, _ := io.ReadAll(out)
	out.Close()
	var ex sandboxinit.Exit
	if _, err := sandboxinit.Recv(c, &ex); err != nil {
		t.Fatalf("Got(exit of %v) = %v", argv, err)
	}
	return string(b), ex.Code
}

// TestIdleStubRoundTrip: the Go init, idle, execs the stub in place (same
// PID, the agent's hello connection still open); a spawn then brings the
// Go init back in the same process, which runs it; idle again, it is the
// stub again; the stub killed, the hello connection reads EOF.
func TestIdleStubRoundTrip(t *testing.T) {
	stub, agent := built(t)
	var stderr bytes.Buffer
	cmd, sock := startInit(t, agent, stub, &stderr)
	pid := cmd.Process.Pid
	h := hello(t, sock)
	defer h.Close()
	for round := range 2 {
		waitExe(t, pid, stub)
		out, code := run(t, sock, "sh", "-c", "echo $((6*7))")
		if out != "42\n" || code != 0 {
			t.Fatalf("round %d: Got(exec through the stub) = %q, exit %d; want 42, 0 (stderr %s)", round, out, code, stderr.String())
		}
		// The spawn went through the Go init, in the same process.
		if got, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); got != agent {
			// It may be idle again already: then it is the stub.
			if got != stub {
				t.Fatalf("round %d: Got(/proc/%d/exe) = %q; want %s or %s", round, pid, got, agent, stub)
			}
		}
	}
	// A running command keeps the Go init: while `sleep` runs the process
	// stays the agent, even past several idle periods.
	c := dial(t, sock)
	if err := sandboxinit.Send(c, sandboxinit.Request{Op: sandboxinit.OpSpawn, Spawn: &sandboxinit.SpawnRequest{Argv: []string{"sleep", "1"}, Dir: "/tmp"}}); err != nil {
		t.Fatal(err)
	}
	var rep sandboxinit.Reply
	fds, err := sandboxinit.Recv(c, &rep)
	sandboxinit.CloseFDs(fds)
	if err != nil || rep.Error != "" {
		t.Fatalf("Got(spawn sleep) = %+v, %v", rep, err)
	}
	var ex sandboxinit.Exit
	if _, err := sandboxinit.Recv(c, &ex); err != nil || ex.Code != 0 {
		t.Fatalf("Got(exit of sleep through the idle period) = %+v, %v; want 0 (the init stayed)", ex, err)
	}
	c.Close()
	waitExe(t, pid, stub)
	// The hello connection is open until the stub dies.
	cmd.Process.Kill()
	var ignored sandboxinit.Reply
	h.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := sandboxinit.Recv(h, &ignored); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("Got(hello after the stub died) = %v; want EOF", err)
	}
}

// TestIdleSetOnHello: an init started never to go idle (a pre-started
// sandbox's) goes idle once the agent sends it an idle time on the hello
// connection (as a claim does); times out of bounds before it are dropped.
func TestIdleSetOnHello(t *testing.T) {
	stub, agent := built(t)
	var stderr bytes.Buffer
	cmd, sock := startInitIdle(t, agent, stub, "0", &stderr)
	h := hello(t, sock)
	defer h.Close()
	if out, code := run(t, sock, "echo", "up"); out != "up\n" || code != 0 {
		t.Fatalf("Got(echo) = %q, %d; want up, 0", out, code)
	}
	if got, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)); got != agent {
		t.Fatalf("Got(/proc/%d/exe) = %q; want the Go init %s", cmd.Process.Pid, got, agent)
	}
	for _, ms := range []int{-5, 1 << 30, 100} {
		if err := sandboxinit.Send(h, sandboxinit.Request{Op: sandboxinit.OpIdle, IdleMillis: ms}); err != nil {
			t.Fatal(err)
		}
	}
	waitExe(t, cmd.Process.Pid, stub)
	if out, code := run(t, sock, "echo", "back"); out != "back\n" || code != 0 {
		t.Fatalf("Got(echo through the stub) = %q, %d; want back, 0 (stderr %s)", out, code, stderr.String())
	}
}

// TestStubBadExec: a stub that cannot exec the Go init ends with a clear
// error on its stderr, so PID 1 ends (the agent marks the sandbox failed:
// its hello connection reads EOF).
func TestStubBadExec(t *testing.T) {
	stub, _ := built(t)
	sock := filepath.Join(t.TempDir(), "init.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(stub, filepath.Join(t.TempDir(), "missing-init"), "3", "100", "0")
	cmd.ExtraFiles, cmd.Stderr = []*os.File{f}, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ln.Close()
	c := dial(t, sock)
	defer c.Close()
	err = cmd.Wait()
	if err == nil || !strings.Contains(stderr.String(), "exec the sandbox init") {
		t.Fatalf("Got(stub with a missing init) = %v, stderr %q; want exit 1 and the exec error", err, stderr.String())
	}
	for _, args := range [][]string{{}, {"x", "nofd", "100", "0"}, {"x", "3", "100", "2"}} {
		out, err := exec.Command(stub, args...).CombinedOutput()
		if err == nil {
			t.Errorf("Got(stub %q) = ok; want a usage error (%s)", args, out)
		}
	}
}
