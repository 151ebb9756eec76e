package image

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/escapetest"
)

// scratchTestName is the file name of a test VM's scratch disk.
const scratchTestName = "scratch.img"

// testVM is a booted guest with the busybox template and a scratch disk
// attached.
type testVM struct {
	name    string
	sock    string
	console string
	guest   Guest
}

// bootTestVM builds the image, boots it with the busybox template disk and
// returns a connected client. The VM is destroyed at cleanup.
func bootTestVM(tb testing.TB, memMiB uint) (*testVM, *agentproto.Client) {
	tb.Helper()
	needBuildToolsTB(tb)
	needLibvirtTB(tb)
	agent := buildAgentTB(tb, tb.TempDir(), "test-sandbox")
	m := buildTestImageTB(tb, agent)
	tpl, ok := m.Template(TemplateBusybox)
	if !ok {
		tb.Fatalf("Got(Templates) = %+v; want busybox", m.Templates)
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	vm := &testVM{name: "stockade-sandboxtest-" + hex.EncodeToString(suffix), guest: m.Guest}
	dir, err := os.MkdirTemp("/var/tmp", "stockade-sandbox-")
	if err != nil {
		tb.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	tb.Cleanup(func() { os.RemoveAll(dir) })
	vm.sock, vm.console = filepath.Join(dir, "agent.sock"), filepath.Join(dir, "console.log")
	scratch := filepath.Join(dir, scratchTestName)
	if err := CreateScratch(context.Background(), scratch, 1024); err != nil {
		tb.Fatal(err)
	}
	xml, err := bootDomain(vm.name, m.Guest, vm.sock, vm.console, memMiB, tpl.Path, scratch)
	if err != nil {
		tb.Fatal(err)
	}
	xmlPath := filepath.Join(dir, "domain.xml")
	if err := os.WriteFile(xmlPath, []byte(xml), 0o644); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := virsh(ctx, "create", xmlPath); err != nil {
		tb.Fatalf("virsh create = %v: %s", err, out)
	}
	tb.Cleanup(func() {
		virsh(context.Background(), "destroy", vm.name)
		if tb.Failed() {
			b, _ := os.ReadFile(vm.console)
			tb.Logf("guest console:\n%s", b)
		}
	})
	var conn net.Conn
	for conn == nil {
		c, err := net.Dial("unix", vm.sock)
		if err == nil {
			conn = c
			break
		}
		if ctx.Err() != nil {
			tb.Fatalf("agent socket %s: %v", vm.sock, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, err := agentproto.Dial(ctx, conn, agentproto.ClientOptions{Name: "sandbox-test"})
	if err != nil {
		tb.Fatalf("Dial() = %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	if !slices.Contains(c.Hello().Capabilities, string(agentproto.OpSandboxCreate)) {
		tb.Fatalf("Got(Hello().Capabilities) = %v; want the sandbox ops", c.Hello().Capabilities)
	}
	return vm, c
}

// The TB variants of the image test helpers.
func needBuildToolsTB(tb testing.TB) {
	if t, ok := tb.(*testing.T); ok {
		needBuildTools(t)
		return
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			tb.Fatal("image build needs root")
		}
		tb.Skip("image build needs root")
	}
}

func needLibvirtTB(tb testing.TB) {
	if t, ok := tb.(*testing.T); ok {
		needLibvirt(t)
		return
	}
	if _, err := virsh(context.Background(), "version"); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("libvirt not reachable: %v", err)
		}
		tb.Skipf("libvirt not reachable: %v", err)
	}
}

func buildAgentTB(tb testing.TB, dir, version string) string {
	if t, ok := tb.(*testing.T); ok {
		return buildAgent(t, dir, version)
	}
	out := filepath.Join(dir, "stockade-agent-"+version)
	if b, err := goBuildAgent(out, version); err != nil {
		tb.Fatalf("go build stockade-agent: %v: %s", err, b)
	}
	return out
}

func buildTestImageTB(tb testing.TB, agent string) Manifest {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	m, err := Build(ctx, Options{DataDir: testDataDir(), AgentBinary: agent, Progress: &progress,
		Templates: []string{TemplateBusybox}})
	if err != nil {
		tb.Fatalf("Build() = %v\n%s", err, progress.String())
	}
	return m
}

// run runs argv in sandbox id and returns its output.
func run(ctx context.Context, c *agentproto.Client, req agentproto.ExecRequest) (string, string, agentproto.ExitStatus, error) {
	var out, errOut bytes.Buffer
	st, err := c.Exec(ctx, req, nil, &out, &errOut)
	return out.String(), errOut.String(), st, err
}

// quotaFull is how a write past a sandbox's disk or workspace size fails:
// ENOSPC (errno 28), from the XFS project quota on the VM's scratch disk,
// as on a full disk of the sandbox's own (ext4's quota said EDQUOT).
const quotaFull = "No space left on device"

// between reports whether the number s is in [lo, hi].
func between(s string, lo, hi int) bool {
	var n int
	_, err := fmt.Sscan(s, &n)
	return err == nil && n >= lo && n <= hi
}

func sh(id, script string) agentproto.ExecRequest {
	return agentproto.ExecRequest{Sandbox: id, Argv: []string{"sh", "-c", script}}
}

// TestSandboxes runs two sandboxes side by side in one real VM: exec, files,
// limits, escapes, lifetime, destroy.
func TestSandboxes(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM (seconds under TCG)")
	}
	_, c := bootTestVM(t, 1024)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// What the guest holds before any sandbox, once the template is mounted.
	for {
		list, err := c.ListSandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Templates) > 0 || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	before, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	limits := agentproto.Limits{VCPUs: 1, MemoryMiB: 96, PidsMax: 64, DiskMiB: 32, WorkspaceMiB: 32}
	// b is created fresh, a claims a pre-started sandbox of the pool: every
	// check below runs on both kinds (prestart_test.go).
	b, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: "sb-b", Template: "busybox", Limits: limits,
		Hostname: "bravo", Env: []string{"GREETING=hi"}})
	if err != nil {
		t.Fatalf("CreateSandbox(b) = %v", err)
	}
	t.Logf("create b: %+v", b.Startup)
	startPool(t, ctx, c)
	a, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: "sb-a", Template: "busybox", Limits: limits,
		Hostname: "alpha", Env: []string{"GREETING=hello"}})
	if err != nil {
		t.Fatalf("CreateSandbox(a) = %v", err)
	}
	t.Logf("create a (claimed): %+v", a.Startup)
	if a.State != agentproto.SandboxRunning || a.Limits.MemoryMiB != 96 || !a.Prestarted || b.Prestarted {
		t.Errorf("Got(CreateSandbox()) = %+v, %+v; want both running with the limits, a claimed from the pool, b not", a, b)
	}
	t.Run("pre-started sandboxes", func(t *testing.T) { testPrestart(t, ctx, c) })

	t.Run("create refusals", func(t *testing.T) {
		tests := []struct {
			name string
			spec agentproto.SandboxSpec
			want error
		}{
			{"same id", agentproto.SandboxSpec{ID: "sb-a", Template: "busybox"}, agentproto.ErrConflict},
			{"unknown template", agentproto.SandboxSpec{ID: "sb-x", Template: "nope"}, agentproto.ErrNotFound},
			{"bad id", agentproto.SandboxSpec{ID: "../x", Template: "busybox"}, agentproto.ErrBadRequest},
			{"bad limits", agentproto.SandboxSpec{ID: "sb-x", Template: "busybox", Limits: agentproto.Limits{MemoryMiB: 1}}, agentproto.ErrBadRequest},
		}
		for _, tc := range tests {
			if _, err := c.CreateSandbox(ctx, tc.spec); !errors.Is(err, tc.want) {
				t.Errorf("Got(CreateSandbox(%s)) = %v; want %v", tc.name, err, tc.want)
			}
		}
		list, err := c.ListSandboxes(ctx)
		if err != nil || len(list.Sandboxes) != 2 {
			t.Errorf("Got(ListSandboxes()) = %+v, %v; want a and b only", list, err)
		}
		if len(list.Templates) != 1 || list.Templates[0].Name != "busybox" || list.Templates[0].Version == "" {
			t.Errorf("Got(ListSandboxes().Templates) = %+v; want busybox with its version", list.Templates)
		}
	})

	t.Run("exec", func(t *testing.T) {
		for _, tc := range []struct{ id, want string }{
			{"sb-a", "hello\n1000\n1000\n/workspace\nalpha\n"},
			{"sb-b", "hi\n1000\n1000\n/workspace\nbravo\n"},
		} {
			out, errOut, st, err := run(ctx, c, sh(tc.id, `echo $GREETING; id -u; id -g; pwd; hostname; echo oops >&2; exit 4`))
			if err != nil {
				t.Fatal(err)
			}
			if out != tc.want || errOut != "oops\n" || st.Code != 4 || st.Reason != "exited" {
				t.Errorf("Got(exec in %s) = %q, %q, %+v; want %q, exit 4", tc.id, out, errOut, st, tc.want)
			}
		}
		var got bytes.Buffer
		st, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: "sb-b", Argv: []string{"cat"}}, strings.NewReader("piped"), &got, nil)
		if err != nil || got.String() != "piped" || st.Code != 0 {
			t.Errorf("Got(cat with stdin) = %q, %+v, %v; want piped", got.String(), st, err)
		}
	})

	t.Run("terminal", func(t *testing.T) {
		var out bytes.Buffer
		st, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: "sb-a", TTY: true, Size: agentproto.Winsize{Rows: 33, Cols: 101},
			Argv: []string{"sh", "-c", "tty; stty size"}}, nil, &out, nil)
		if err != nil || st.Code != 0 {
			t.Fatalf("Got(exec tty) = %+v, %v", st, err)
		}
		got := strings.ReplaceAll(out.String(), "\r", "")
		if !strings.Contains(got, "/dev/pts/") || !strings.Contains(got, "33 101") {
			t.Errorf("Got(tty output) = %q; want a /dev/pts terminal of 33x101", got)
		}
	})

	t.Run("files", func(t *testing.T) {
		data := bytes.Repeat([]byte("0123456789"), 100_000) // 1 MB over several frames
		info, err := c.WriteFile(ctx, agentproto.FileWriteRequest{Sandbox: "sb-a", Path: "proj/data.bin"}, bytes.NewReader(data))
		if err != nil || info.Size != int64(len(data)) {
			t.Fatalf("Got(WriteFile()) = %+v, %v; want %d bytes", info, err, len(data))
		}
		var back bytes.Buffer
		if _, err := c.ReadFile(ctx, agentproto.FileReadRequest{Sandbox: "sb-a", Path: "/workspace/proj/data.bin"}, &back); err != nil || !bytes.Equal(back.Bytes(), data) {
			t.Errorf("Got(ReadFile()) = %d bytes, %v; want the same %d bytes", back.Len(), err, len(data))
		}
		out, _, _, _ := run(ctx, c, sh("sb-a", "stat -c '%u %s' /workspace/proj/data.bin; echo made > /workspace/made.txt"))
		if out != fmt.Sprintf("1000 %d\n", len(data)) {
			t.Errorf("Got(stat in the sandbox) = %q; want owner 1000 and the size", out)
		}
		back.Reset()
		if _, err := c.ReadFile(ctx, agentproto.FileReadRequest{Sandbox: "sb-a", Path: "made.txt"}, &back); err != nil || back.String() != "made\n" {
			t.Errorf("Got(ReadFile(made.txt)) = %q, %v; want made", back.String(), err)
		}
		// Links planted in the sandbox resolve inside it.
		run(ctx, c, sh("sb-a", "ln -s ../../../../../.. /workspace/up; ln -s /etc/passwd /workspace/pw"))
		for _, p := range []string{"/workspace/up/etc/passwd", "pw", "../../../../etc/passwd"} {
			back.Reset()
			_, err := c.ReadFile(ctx, agentproto.FileReadRequest{Sandbox: "sb-a", Path: p}, &back)
			if err != nil || !strings.Contains(back.String(), "sandbox:x:1000:1000") {
				t.Errorf("Got(ReadFile(%s)) = %q, %v; want the template's passwd", p, back.String(), err)
			}
		}
		// The guest's own files are not there: the agent binary lives at
		// /init and the bundles under /run/stockade in the guest.
		for _, p := range []string{"/init", "/run/stockade/sandboxes/sb-b/config.json", "/workspace/up/run/stockade"} {
			if _, err := c.ReadFile(ctx, agentproto.FileReadRequest{Sandbox: "sb-a", Path: p}, &back); !errors.Is(err, agentproto.ErrNotFound) {
				t.Errorf("Got(ReadFile(%s)) = %v; want ErrNotFound", p, err)
			}
		}
		// b does not see a's files.
		if _, err := c.ReadFile(ctx, agentproto.FileReadRequest{Sandbox: "sb-b", Path: "made.txt"}, &back); !errors.Is(err, agentproto.ErrNotFound) {
			t.Errorf("Got(ReadFile(b, made.txt)) = %v; want ErrNotFound", err)
		}
	})

	t.Run("escapes fail", func(t *testing.T) {
		// a is a sandbox claimed from the pool, b a fresh one: both pass,
		// after both went idle (the stub init as PID 1) and a command
		// brought the Go init back in place.
		waitStubInits(ctx, t, c, 2)
		escapetest.Run(ctx, t, c, escapetest.Pair{A: "sb-a", B: "sb-b", Hostname: "alpha", Limits: limits})
		escapetest.Run(ctx, t, c, escapetest.Pair{A: "sb-b", B: "sb-a", Hostname: "bravo", Limits: limits})
	})

	// A folder's quota project and its inheritance hold a sandbox to its
	// share of the VM's scratch disk; the owner of a folder could change
	// both with two ioctls, which the seccomp profile refuses.
	t.Run("quota project escape", func(t *testing.T) {
		for _, id := range []string{"sb-a", "sb-b"} {
			t.Run(id, func(t *testing.T) { escapetest.QuotaProjects(ctx, t, c, id) })
		}
	})

	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		out, _, st, err := run(ctx, c, agentproto.ExecRequest{Sandbox: "sb-b", Argv: []string{"sh", "-c", "echo begun; sleep 60"}, TimeoutSeconds: 2})
		if err != nil || out != "begun\n" || st.Reason != agentproto.ReasonTimeout || st.Signal != "KILL" || st.Code != 137 {
			t.Errorf("Got(exec with timeout) = %q, %+v, %v; want killed with reason timeout", out, st, err)
		}
		if el := time.Since(start); el > 10*time.Second {
			t.Errorf("Got(timeout took) = %v; want about 2s", el)
		}
	})

	t.Run("memory bomb", func(t *testing.T) {
		var nout bytes.Buffer
		neighbour, err := c.StartExec(ctx, sh("sb-b", "sleep 3; echo alive"), &nout, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _, st, err := run(ctx, c, agentproto.ExecRequest{Sandbox: "sb-a", Argv: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=300M", "count=1"}})
		if err != nil || st.Reason != agentproto.ReasonOOM || st.Signal != "KILL" {
			t.Errorf("Got(memory bomb) = %+v, %v; want reason oom by KILL", st, err)
		}
		nst, err := neighbour.Wait()
		if err != nil || nst.Code != 0 || nout.String() != "alive\n" {
			t.Errorf("Got(neighbour) = %q, %+v, %v; want alive", nout.String(), nst, err)
		}
		stats, err := c.SandboxStats(ctx, "sb-a")
		if err != nil || stats.OOMKills == 0 || stats.MemoryMax != 96<<20 {
			t.Errorf("Got(SandboxStats(a)) = %+v, %v; want an OOM kill counted and memory.max 96 MiB", stats, err)
		}
		if out, _, _, err := run(ctx, c, sh("sb-a", "echo still here")); err != nil || out != "still here\n" {
			t.Errorf("Got(exec in a after OOM) = %q, %v; want a still running", out, err)
		}
	})

	t.Run("fork bomb", func(t *testing.T) {
		// b's init comes back from the stub for the bomb: a fresh Go init
		// then has to live through pids.max reached.
		waitStubInits(ctx, t, c, 2)
		bomb, err := c.StartExec(ctx, agentproto.ExecRequest{Sandbox: "sb-b", Argv: []string{"sh", "-c", "f(){ f | f & }; f; sleep 60"}, TimeoutSeconds: 8}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		stats, err := c.SandboxStats(ctx, "sb-b")
		if err != nil || stats.PidsRefused == 0 || stats.Pids > stats.PidsMax || stats.PidsMax != 64 {
			t.Errorf("Got(SandboxStats(b) during the bomb) = pids %d/%d refused %d, %v; want forks refused at 64",
				stats.Pids, stats.PidsMax, stats.PidsRefused, err)
		}
		if out, _, _, err := run(ctx, c, sh("sb-a", "echo neighbour fine")); err != nil || out != "neighbour fine\n" {
			t.Errorf("Got(exec in a during the bomb) = %q, %v", out, err)
		}
		st, err := bomb.Wait()
		if err != nil || st.Reason != agentproto.ReasonTimeout {
			t.Errorf("Got(bomb) = %+v, %v; want ended by its timeout", st, err)
		}
		if _, err := c.Ping(ctx); err != nil {
			t.Errorf("Ping() after the bomb = %v; want the VM alive", err)
		}
		// b's init survived and its processes are gone.
		time.Sleep(500 * time.Millisecond)
		if out, _, _, err := run(ctx, c, sh("sb-b", "echo b fine")); err != nil || out != "b fine\n" {
			t.Errorf("Got(exec in b after the bomb) = %q, %v; want b running", out, err)
		}
		if stats, _ := c.SandboxStats(ctx, "sb-b"); stats.Pids > 10 {
			t.Errorf("Got(pids in b after the bomb) = %d; want the bomb gone", stats.Pids)
		}
	})

	t.Run("disk full", func(t *testing.T) {
		out, _, _, _ := run(ctx, c, sh("sb-a", "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1 | grep -c '"+quotaFull+"'; "+
			"dd if=/dev/zero of=/workspace/fill bs=1M count=64 2>&1 | grep -c '"+quotaFull+"'"))
		if out != "1\n1\n" {
			t.Errorf("Got(filling a's disk and workspace) = %q; want ENOSPC twice", out)
		}
		if _, err := c.WriteFile(ctx, agentproto.FileWriteRequest{Sandbox: "sb-a", Path: "more"}, bytes.NewReader(make([]byte, 1<<20))); !errors.Is(err, agentproto.ErrExhausted) {
			t.Errorf("Got(WriteFile() into a full workspace) = %v; want ErrExhausted", err)
		}
		out, _, st, _ := run(ctx, c, sh("sb-b", "dd if=/dev/zero of=/tmp/ok bs=1M count=8 2>/dev/null && dd if=/dev/zero of=/workspace/ok bs=1M count=8 2>/dev/null && echo ok"))
		if out != "ok\n" || st.Code != 0 {
			t.Errorf("Got(writing in b) = %q, %+v; want ok: only a is full", out, st)
		}
		stats, _ := c.SandboxStats(ctx, "sb-a")
		if stats.DiskSize == 0 || stats.DiskUsed < stats.DiskSize*9/10 || stats.WorkspaceUsed < stats.WorkspaceSize*9/10 {
			t.Errorf("Got(SandboxStats(a) disk) = %d/%d, workspace %d/%d; want both full", stats.DiskUsed, stats.DiskSize, stats.WorkspaceUsed, stats.WorkspaceSize)
		}
		run(ctx, c, sh("sb-a", "rm -f /tmp/fill /workspace/fill"))
	})

	// The writable layer and /workspace are on the VM's scratch disk, not
	// in memory: a sandbox fills both far past its memory limit, the writer
	// gets ENOSPC at the sandbox's sizes, and the sandbox, its files and its
	// neighbour live on. (On tmpfs the fill was charged to the sandbox's
	// memory and OOM-killed it.)
	t.Run("disk full beyond memory", func(t *testing.T) {
		big := agentproto.Limits{VCPUs: 1, MemoryMiB: 48, PidsMax: 64, DiskMiB: 96, WorkspaceMiB: 128}
		if _, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: "sb-d", Template: "busybox", Limits: big}); err != nil {
			t.Fatal(err)
		}
		defer c.DestroySandbox(ctx, "sb-d")
		if out, _, st, err := run(ctx, c, sh("sb-d", "echo kept > /workspace/keep.txt && echo kept > /home/sandbox/keep.txt && echo ok")); out != "ok\n" {
			t.Fatalf("Got(write before the fill) = %q, %+v, %v; want ok", out, st, err)
		}
		out, _, st, err := run(ctx, c, sh("sb-d", "dd if=/dev/zero of=/workspace/big bs=1M count=400 2>&1 | grep -c '"+quotaFull+"'; "+
			"ls -l /workspace/big | awk '{print int($5/1048576)}'; "+
			"dd if=/dev/zero of=/tmp/big bs=1M count=400 2>&1 | grep -c '"+quotaFull+"'; "+
			"ls -l /tmp/big | awk '{print int($5/1048576)}'"))
		lines := strings.Fields(out)
		if err != nil || st.Reason != "exited" || len(lines) != 4 || lines[0] != "1" || lines[2] != "1" ||
			!between(lines[1], 100, 128) || !between(lines[3], 70, 96) {
			t.Errorf("Got(filling d's workspace and root) = %q, %+v, %v; want ENOSPC for each at ~128 and ~96 MiB", out, st, err)
		}
		out, _, st, err = run(ctx, c, sh("sb-d", "cat /workspace/keep.txt /home/sandbox/keep.txt"))
		if out != "kept\nkept\n" || st.Code != 0 {
			t.Errorf("Got(d's files after the fill) = %q, %+v, %v; want both kept: the sandbox still runs", out, st, err)
		}
		if stats, err := c.SandboxStats(ctx, "sb-d"); err != nil || stats.State != agentproto.SandboxRunning || stats.OOMKills != 0 ||
			stats.WorkspaceSize != 128<<20 || stats.DiskSize != 96<<20 {
			t.Errorf("Got(SandboxStats(d)) = %+v, %v; want running, no OOM kill, sizes 128 and 96 MiB", stats, err)
		}
		if out, _, _, err := run(ctx, c, sh("sb-b", "echo alive")); out != "alive\n" {
			t.Errorf("Got(exec in neighbour b) = %q, %v; want alive", out, err)
		}
	})

	t.Run("lifetime", func(t *testing.T) {
		if _, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: "sb-c", Template: "busybox", LifetimeSeconds: 3}); err != nil {
			t.Fatal(err)
		}
		_, _, st, err := run(ctx, c, agentproto.ExecRequest{Sandbox: "sb-c", Argv: []string{"sleep", "60"}})
		if err != nil || st.Reason != agentproto.ReasonTimeout || st.Signal != "KILL" {
			t.Errorf("Got(exec past the lifetime) = %+v, %v; want reason timeout", st, err)
		}
		list, _ := c.ListSandboxes(ctx)
		var got agentproto.SandboxInfo
		for _, s := range list.Sandboxes {
			if s.ID == "sb-c" {
				got = s
			}
		}
		if got.State != agentproto.SandboxStopped || got.Reason != agentproto.ReasonTimeout {
			t.Errorf("Got(sb-c in ListSandboxes()) = %+v; want stopped by timeout", got)
		}
		if _, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: "sb-c", Argv: []string{"true"}}, nil, nil, nil); !errors.Is(err, agentproto.ErrConflict) {
			t.Errorf("Got(Exec() in a stopped sandbox) = %v; want ErrConflict", err)
		}
		info, err := c.DestroySandbox(ctx, "sb-c")
		if err != nil || info.State != agentproto.SandboxDestroyed || info.Reason != agentproto.ReasonTimeout {
			t.Errorf("Got(DestroySandbox(sb-c)) = %+v, %v; want destroyed, reason timeout", info, err)
		}
	})

	t.Run("idle timeout and io limits", func(t *testing.T) {
		if _, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: "sb-d", Template: "busybox", IdleSeconds: 2,
			Limits: agentproto.Limits{IO: &agentproto.IOLimits{ReadBPS: 1 << 20, ReadIOPS: 100}}}); err != nil {
			t.Fatal(err)
		}
		// A command that runs longer than the idle timeout keeps it alive.
		out, _, _, err := run(ctx, c, sh("sb-d", "sleep 3; cat /sys/fs/cgroup/io.max"))
		if err != nil || !strings.Contains(out, "rbps=1048576") || !strings.Contains(out, "riops=100") {
			t.Errorf("Got(io.max) = %q, %v; want the read limits on the template disk", out, err)
		}
		var info agentproto.SandboxInfo
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			list, _ := c.ListSandboxes(ctx)
			for _, s := range list.Sandboxes {
				if s.ID == "sb-d" {
					info = s
				}
			}
			if info.State == agentproto.SandboxStopped {
				break
			}
		}
		if info.State != agentproto.SandboxStopped || info.Reason != agentproto.ReasonIdle {
			t.Errorf("Got(sb-d after idling) = %+v; want stopped, reason idle", info)
		}
		if _, err := c.DestroySandbox(ctx, "sb-d"); err != nil {
			t.Error(err)
		}
	})

	t.Run("destroy leaves nothing", func(t *testing.T) {
		for _, id := range []string{"sb-a", "sb-b"} {
			info, err := c.DestroySandbox(ctx, id)
			if err != nil || info.State != agentproto.SandboxDestroyed {
				t.Errorf("Got(DestroySandbox(%s)) = %+v, %v; want destroyed", id, info, err)
			}
		}
		if _, err := c.DestroySandbox(ctx, "sb-a"); !errors.Is(err, agentproto.ErrNotFound) {
			t.Errorf("Got(DestroySandbox(sb-a) again) = %v; want ErrNotFound", err)
		}
		after, err := c.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if after.Mounts != before.Mounts || after.SandboxCgroups != 0 || after.SandboxBundles != 0 || after.Sandboxes != 0 {
			t.Errorf("Got(guest after destroy) = mounts %d (before %d), cgroups %d, bundles %d, sandboxes %d; want all gone",
				after.Mounts, before.Mounts, after.SandboxCgroups, after.SandboxBundles, after.Sandboxes)
		}
		t.Logf("guest memory available: before %d MiB, after %d MiB", before.MemAvailable>>20, after.MemAvailable>>20)
	})
}

// BenchmarkSandboxes measures inside one warm VM: sandbox create -> first
// output of a command (through the channel) against raw `crun run` of the
// same template timed in the guest, and an exec round trip of `true`
// against `crun exec` in the guest. It reports; it asserts nothing.
func BenchmarkSandboxes(b *testing.B) {
	_, c := bootTestVM(b, 1024)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const n = 30
	for range b.N {
		// Warm up once: the first of everything pays TCG translation.
		if _, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: "warm", Template: "busybox"}); err != nil {
			b.Fatal(err)
		}
		c.Exec(ctx, agentproto.ExecRequest{Sandbox: "warm", Argv: []string{"true"}}, nil, nil, nil)
		if _, err := c.Baseline(ctx, agentproto.BaselineRequest{Kind: agentproto.BaselineRun, Template: "busybox", Count: 1}); err != nil {
			b.Fatal(err)
		}

		memBefore, err := c.Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var first, ready []time.Duration
		var steps []agentproto.Startup
		for i := range n {
			id := fmt.Sprintf("bench-%d", i)
			start := time.Now()
			info, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: id, Template: "busybox"})
			if err != nil {
				b.Fatal(err)
			}
			out := &firstWrite{start: start}
			if _, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: id, Argv: []string{"echo", "ready"}}, nil, out, nil); err != nil {
				b.Fatal(err)
			}
			first = append(first, out.at)
			ready = append(ready, info.Startup.Ready)
			steps = append(steps, info.Startup)
			if _, err := c.DestroySandbox(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
		memAfter, err := c.Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("guest MemAvailable before %d sandboxes created and destroyed: %d MiB, after: %d MiB",
			n, memBefore.MemAvailable>>20, memAfter.MemAvailable>>20)
		base, err := c.Baseline(ctx, agentproto.BaselineRequest{Kind: agentproto.BaselineRun, Template: "busybox", Count: n})
		if err != nil {
			b.Fatal(err)
		}
		// Like for like: crun without address randomization, as create runs it.
		baseNoASLR, err := c.Baseline(ctx, agentproto.BaselineRequest{Kind: agentproto.BaselineRun, Template: "busybox", Count: n, NoASLR: true})
		if err != nil {
			b.Fatal(err)
		}

		var rtt []time.Duration
		for range n {
			start := time.Now()
			if _, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: "warm", Argv: []string{"true"}}, nil, nil, nil); err != nil {
				b.Fatal(err)
			}
			rtt = append(rtt, time.Since(start))
		}
		crunExec, err := c.Baseline(ctx, agentproto.BaselineRequest{Kind: agentproto.BaselineExec, Sandbox: "warm", Count: n})
		if err != nil {
			b.Fatal(err)
		}
		crunExecNoASLR, err := c.Baseline(ctx, agentproto.BaselineRequest{Kind: agentproto.BaselineExec, Sandbox: "warm", Count: n, NoASLR: true})
		if err != nil {
			b.Fatal(err)
		}
		c.DestroySandbox(ctx, "warm")

		// Idle sandboxes: what each costs the guest.
		const idle = 10
		st0, _ := c.Stats(ctx)
		var cg uint64
		for i := range idle {
			id := fmt.Sprintf("idle-%d", i)
			if _, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: id, Template: "busybox"}); err != nil {
				b.Fatal(err)
			}
		}
		time.Sleep(time.Second)
		for i := range idle {
			st, _ := c.SandboxStats(ctx, fmt.Sprintf("idle-%d", i))
			cg += st.MemoryCurrent
		}
		st1, _ := c.Stats(ctx)
		for i := range idle {
			c.DestroySandbox(ctx, fmt.Sprintf("idle-%d", i))
		}
		perSandbox := float64(st0.MemAvailable-st1.MemAvailable) / idle / (1 << 20)
		b.Logf("idle sandbox: guest MemAvailable drops %.1f MiB each; its cgroup holds %.1f MiB", perSandbox, float64(cg)/idle/(1<<20))
		b.ReportMetric(perSandbox, "idle-sandbox-MiB")

		report := func(name, rawName string, ours, raw []time.Duration) {
			o50, o95 := percentiles(ours)
			r50, r95 := percentiles(raw)
			b.Logf("%-22s p50 %6.1f ms p95 %6.1f ms | %-20s p50 %6.1f ms p95 %6.1f ms | ratio p50 %.2f p95 %.2f",
				name, ms(o50), ms(o95), rawName, ms(r50), ms(r95), float64(o50)/float64(r50), float64(o95)/float64(r95))
			b.ReportMetric(ms(o50), name+"-p50-ms")
			b.ReportMetric(float64(o50)/float64(r50), name+"-vs-"+rawName+"-p50")
		}
		report("create->first-output", "crun-run", first, base.Samples)
		report("create->first-output", "crun-run-noaslr", first, baseNoASLR.Samples)
		b.Logf("create steps in the guest (p50): mounts %.1f ms, crun run --detach %.1f ms, init answers %.1f ms",
			ms(p50Of(steps, func(s agentproto.Startup) time.Duration { return s.Mounts })),
			ms(p50Of(steps, func(s agentproto.Startup) time.Duration { return s.Crun })),
			ms(p50Of(steps, func(s agentproto.Startup) time.Duration { return s.Ready })))
		report("exec-true-roundtrip", "crun-exec", rtt, crunExec.Samples)
		report("exec-true-roundtrip", "crun-exec-noaslr", rtt, crunExecNoASLR.Samples)
		r50, r95 := percentiles(ready)
		b.Logf("create in the guest (until init answers): p50 %.1f ms p95 %.1f ms", ms(r50), ms(r95))
	}
}

// firstWrite records when the first output arrived.
type firstWrite struct {
	once  sync.Once
	start time.Time
	at    time.Duration
}

func (f *firstWrite) Write(p []byte) (int, error) {
	f.once.Do(func() { f.at = time.Since(f.start) })
	return len(p), nil
}

func percentiles(d []time.Duration) (p50, p95 time.Duration) {
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)*50/100], s[min(len(s)-1, len(s)*95/100)]
}

func p50Of(s []agentproto.Startup, f func(agentproto.Startup) time.Duration) time.Duration {
	d := make([]time.Duration, len(s))
	for i := range s {
		d[i] = f(s[i])
	}
	p50, _ := percentiles(d)
	return p50
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// waitStubInits waits until at least n sandboxes of the guest have the stub
// init as PID 1 (idle: hypervisor/image/stubinit); it fails when they never do.
func waitStubInits(ctx context.Context, t *testing.T, c *agentproto.Client, n int) {
	t.Helper()
	got := 0
	for range 300 {
		st, err := c.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got = st.StubInits; got >= n {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("Got(sandboxes with the stub init) = %d; want %d: they never went idle", got, n)
}
