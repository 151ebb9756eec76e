package vminit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestRootIsRootfs(t *testing.T) {
	tests := []struct {
		name, mountinfo string
		want            bool
		wantErr         bool
	}{
		{"initramfs", "1 1 0:2 / / rw - rootfs rootfs rw,size=240000k\n", true, false},
		{"after switch root", "22 1 0:19 / / rw,relatime - tmpfs tmpfs rw,mode=755\n23 22 0:20 / /proc rw - proc proc rw\n", false, false},
		{"disk root", "25 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n", false, false},
		{"no root", "23 22 0:20 / /proc rw - proc proc rw\n", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "mountinfo")
			if err := os.WriteFile(p, []byte(tc.mountinfo), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := rootIsRootfs(p)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Got(rootIsRootfs() error) = %v; want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("Got(rootIsRootfs()) = %v; want %v", got, tc.want)
			}
		})
	}
	// This process's own root is not the initramfs.
	if got, err := rootIsRootfs("/proc/self/mountinfo"); err != nil || got {
		t.Errorf("Got(rootIsRootfs(/proc/self/mountinfo)) = %v, %v; want false, nil", got, err)
	}
}

// TestSwitchRoot checks, in a child process with its own mount namespace
// chrooted into a folder that is no mount point (pivot_root refuses such a
// root, as it refuses the initramfs rootfs), that after switchRoot the root
// is a mount pivot_root accepts, still holding the same files.
func TestSwitchRoot(t *testing.T) {
	if os.Getenv("STOCKADE_TEST_SWITCH_ROOT") == "child" {
		switchRootChild()
		return
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("switchRoot mounts and chroots: needs root")
		}
		t.Skip("switchRoot mounts and chroots: needs root")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "init"), []byte("agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSwitchRoot$")
	cmd.Env = append(os.Environ(), "STOCKADE_TEST_SWITCH_ROOT=child", "STOCKADE_TEST_ROOT="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("switch root child: %v\n%s", err, out)
	}
	t.Logf("child:\n%s", out)
	for _, want := range []string{"before: pivot_root: invalid argument", "after: pivot_root ok", "init: agent"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("Got(child output) = %q; want %q", out, want)
		}
	}
}

// switchRootChild prints what pivot_root says before and after switchRoot.
func switchRootChild() {
	fail := func(what string, err error) {
		fmt.Println(what+":", err)
		os.Exit(1)
	}
	// Nothing of this test may reach the host's mounts.
	if err := unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		fail("make mounts private", err)
	}
	if err := unix.Chroot(os.Getenv("STOCKADE_TEST_ROOT")); err != nil {
		fail("chroot", err)
	}
	if err := unix.Chdir("/"); err != nil {
		fail("chdir", err)
	}
	pivot := func() error {
		if err := os.MkdirAll("/next", 0o755); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", "/next", "tmpfs", 0, ""); err != nil {
			return err
		}
		defer unix.Unmount("/next", unix.MNT_DETACH)
		if err := os.Mkdir("/next/old", 0o755); err != nil {
			return err
		}
		return unix.PivotRoot("/next", "/next/old")
	}
	fmt.Println("before: pivot_root:", pivot())
	if err := switchRoot(); err != nil {
		fail("switchRoot", err)
	}
	b, err := os.ReadFile("/init")
	if err != nil {
		fail("read /init", err)
	}
	fmt.Println("init:", string(b))
	if err := pivot(); err != nil {
		fail("after: pivot_root", err)
	}
	fmt.Println("after: pivot_root ok")
	os.Exit(0)
}

func TestReadModuleList(t *testing.T) {
	dir := t.TempDir()
	list := "kernel/a.ko\nkernel/b.ko\nlater:\nkernel/c.ko\n"
	if err := os.WriteFile(filepath.Join(dir, ModuleListName), []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	now, later, err := readModuleList(dir)
	if err != nil {
		t.Fatalf("readModuleList() = %v", err)
	}
	wantNow := []string{filepath.Join(dir, "kernel/a.ko"), filepath.Join(dir, "kernel/b.ko")}
	wantLater := []string{filepath.Join(dir, "kernel/c.ko")}
	if !slices.Equal(now, wantNow) || !slices.Equal(later, wantLater) {
		t.Errorf("Got(readModuleList()) = %v, %v; want %v, %v", now, later, wantNow, wantLater)
	}
	if _, _, err := readModuleList(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Got(readModuleList(empty dir)) = %v; want os.ErrNotExist", err)
	}
}

func TestLoadModuleMissingFile(t *testing.T) {
	err := loadModules([]string{filepath.Join(t.TempDir(), "nope.ko")})
	if !errors.Is(err, unix.ENOENT) {
		t.Errorf("Got(loadModules(missing)) = %v; want ENOENT", err)
	}
}

func TestFindPort(t *testing.T) {
	sys := t.TempDir()
	for port, name := range map[string]string{"vport0p1": "org.qemu.guest_agent.0", "vport0p2": "org.stockade.agent.0"} {
		if err := os.MkdirAll(filepath.Join(sys, port), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sys, port, "name"), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	// The device node does not exist on this host: findPort keeps looking
	// until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := findPort(ctx, sys, "org.stockade.agent.0", log); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Got(findPort() without /dev node) = %v; want context.DeadlineExceeded", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := findPort(ctx2, sys, "org.other", log); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Got(findPort(unknown name)) = %v; want context.DeadlineExceeded", err)
	}
}
