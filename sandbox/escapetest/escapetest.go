// Package escapetest holds the escape checks of the sandbox suite: what a
// command in a sandbox tries in order to reach the VM, the agent or the
// sandbox beside it, and the answer each try must get. The image's sandbox
// test runs them on a freshly booted VM; the snapshot tests run them on a
// restored one, so both are held to the very same list.
package escapetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Pair is two running sandboxes of one VM, both from the busybox template:
// the checks run in A and look for A's processes from B.
type Pair struct {
	A, B string
	// Hostname and Limits are A's, as created (the checks expect them).
	Hostname string
	Limits   agentproto.Limits
}

// Run runs every escape check in p.A through the agent session c, each as
// a subtest, then checks that B does not see A's processes.
func Run(ctx context.Context, t *testing.T, c *agentproto.Client, p Pair) {
	t.Helper()
	// A process of a, to look for from b.
	marker, err := c.StartExec(ctx, agentproto.ExecRequest{Sandbox: p.A, Argv: []string{"sleep", "7777"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer marker.Close()
	tests := []struct{ name, script, want string }{
		{"capabilities", "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t ' ' '",
			"CapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\nNoNewPrivs: 1\nSeccomp: 2\n"},
		// busybox words EPERM from mount(2) this way.
		{"mount", "mount -t tmpfs none /tmp 2>&1; echo $?", "mount: permission denied (are you root?)\n1\n"},
		{"unshare userns", "unshare -U -r true 2>&1; echo $?", "unshare: unshare(0x10000000): Operation not permitted\n1\n"},
		{"load a module", "echo x > /tmp/m.ko; insmod /tmp/m.ko 2>&1; echo $?", "insmod: can't insert '/tmp/m.ko': Operation not permitted\n1\n"},
		{"raw socket", "ping -c 1 -W 1 127.0.0.1 >/dev/null 2>&1; echo $?", "1\n"},
		{"packet socket", "arping -c 1 -w 1 -I lo 127.0.0.1 >/dev/null 2>&1; echo $?", "1\n"},
		{"virtio port", "ls /dev | grep -c vport; ls /sys/class/virtio-ports | wc -l; mknod /tmp/p c 248 1 2>/dev/null; echo $?", "0\n0\n1\n"},
		// The agent binary and the idle sandboxes' stub init, both read-only.
		{"agent files", "ls /run/stockade /init 2>/dev/null | wc -l; ls /.stockade; touch /.stockade/init /.stockade/stub 2>/dev/null; echo $?", "0\ninit\nstub\n1\n"},
		{"init is out of reach", "cat /proc/1/environ >/dev/null 2>&1; echo $?; ls /proc/1/fd >/dev/null 2>&1; echo $?", "1\n1\n"},
		{"init ignores kill", "kill -9 1; kill -TERM 1; kill -SEGV 1; echo alive", "alive\n"},
		{"hostname", "hostname evil 2>/dev/null; echo $?; hostname", "1\n" + p.Hostname + "\n"},
		{"network", "ls /sys/class/net; ip link show lo | grep -c UP", "lo\n1\n"},
		{"own cgroup", "cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory.swap.max /sys/fs/cgroup/pids.max /sys/fs/cgroup/cpu.max",
			fmt.Sprintf("%d\n0\n%d\n%d 100000\n", p.Limits.MemoryMiB<<20, p.Limits.PidsMax, int(p.Limits.VCPUs*100000))},
		// crun starts without address randomization; commands have it.
		{"aslr", "cat /proc/self/personality", "00000000\n"},
		{"sysrq", "echo b > /proc/sysrq-trigger 2>/dev/null; echo $?", "1\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, err := sh(ctx, c, p.A, tc.script)
			if err != nil || out != tc.want {
				t.Errorf("Got(%s) = %q (stderr %q), %v; want %q", tc.script, out, errOut, err, tc.want)
			}
		})
	}
	out, _, _ := sh(ctx, c, p.B, "ps -o pid,args")
	if strings.Contains(out, "7777") || !strings.Contains(out, "1 /.stockade/init sandbox-init") {
		t.Errorf("Got(ps in b) = %q; want b's own init as PID 1 and not a's sleep", out)
	}
	out, _, _ = sh(ctx, c, p.A, "ps -o args | grep -c '^sleep 7777'")
	if out != "1\n" {
		t.Errorf("Got(ps in a) = %q; want a's own sleep", out)
	}
}

// sh runs sh -c script in the sandbox id and returns its output.
func sh(ctx context.Context, c *agentproto.Client, id, script string) (string, string, error) {
	var out, errOut bytes.Buffer
	_, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: id, Argv: []string{"sh", "-c", script}}, nil, &out, &errOut)
	return out.String(), errOut.String(), err
}

// QuotaProjects checks, in the sandbox id, that a folder's quota project
// and its inheritance (which hold a sandbox to its share of the VM's
// scratch disk) cannot be changed by their owner: the seccomp profile
// refuses both ioctls on /workspace, a folder in it and one in /tmp.
func QuotaProjects(ctx context.Context, t *testing.T, c *agentproto.Client, id string) {
	t.Helper()
	bin, err := os.ReadFile(buildQuotaEscape(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, agentproto.FileWriteRequest{Sandbox: id, Path: "/workspace/escape", Mode: 0o755}, bytes.NewReader(bin)); err != nil {
		t.Fatal(err)
	}
	defer sh(ctx, c, id, "rm -f /workspace/escape")
	out, errOut, err := sh(ctx, c, id, "mkdir -p /workspace/d /tmp/d; /workspace/escape /workspace /workspace/d /tmp/d")
	want := ""
	for _, p := range []string{"/workspace", "/workspace/d", "/tmp/d"} {
		want += p + " fssetxattr: operation not permitted\n" + p + " setflags: operation not permitted\n"
	}
	if out != want || err != nil {
		t.Errorf("Got(changing quota projects) = %q, %q, %v; want %q", out, errOut, err, want)
	}
}

// quotaEscapeSource tries, on each folder named, to move it out of its
// quota project (FS_IOC_FSSETXATTR with project 0, no inheritance) and to
// stop it passing the project on (FS_IOC_SETFLAGS without
// FS_PROJINHERIT_FL), and prints what each got.
const quotaEscapeSource = `package main

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

func ioctl(fd uintptr, req uintptr, p unsafe.Pointer) error {
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(p)); e != 0 {
		return e
	}
	return nil
}

func main() {
	for _, p := range os.Args[1:] {
		f, err := os.Open(p)
		if err != nil {
			fmt.Println(p, err)
			continue
		}
		var fa struct{ XFlags, ExtSize, NExtents, ProjID, CowExtSize uint32; pad [8]byte }
		res := "get: " + fmt.Sprint(ioctl(f.Fd(), 0x801c581f, unsafe.Pointer(&fa)))
		if res == "get: <nil>" {
			fa.ProjID, fa.XFlags = 0, fa.XFlags&^0x200
			err := ioctl(f.Fd(), 0x401c5820, unsafe.Pointer(&fa))
			res = "ok"
			if err != nil {
				res = err.Error()
			}
		}
		fmt.Println(p, "fssetxattr:", res)
		var flags int64
		res = "get: " + fmt.Sprint(ioctl(f.Fd(), 0x80086601, unsafe.Pointer(&flags)))
		if res == "get: <nil>" {
			flags &^= 0x20000000
			err := ioctl(f.Fd(), 0x40086602, unsafe.Pointer(&flags))
			res = "ok"
			if err != nil {
				res = err.Error()
			}
		}
		fmt.Println(p, "setflags:", res)
		f.Close()
	}
}
`

// buildQuotaEscape builds quotaEscapeSource static and returns its path.
func buildQuotaEscape(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module escape\n\ngo 1.21\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(quotaEscapeSource), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "escape")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build the quota escape: %v: %s", err, b)
	}
	return out
}
