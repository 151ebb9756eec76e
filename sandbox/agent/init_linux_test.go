package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

func TestMoveTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("moveTree keeps owners and makes device nodes: needs root")
	}
	src := t.TempDir()
	mustWrite := func(p string, data string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(filepath.Join(src, "init"), "agent", 0o755)
	mustWrite(filepath.Join(src, "lib/x/libc.so.6"), "libc", 0o644)
	mustWrite(filepath.Join(src, "etc/owned"), "1000", 0o600)
	if err := os.Chown(filepath.Join(src, "etc/owned"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("busybox", filepath.Join(src, "lib/sh")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(src, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "tmp"), 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(src, "console"), unix.S_IFCHR|0o600, int(unix.Mkdev(5, 1))); err != nil {
		t.Fatal(err)
	}
	// dst inside src is skipped, as /newroot is.
	inner := filepath.Join(src, "newroot")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}

	if err := moveTree(src, inner); err != nil {
		t.Fatalf("moveTree() = %v", err)
	}
	for _, c := range []struct {
		rel, data string
		mode      os.FileMode
	}{{"init", "agent", 0o755}, {"lib/x/libc.so.6", "libc", 0o644}, {"etc/owned", "1000", 0o600}} {
		b, err := os.ReadFile(filepath.Join(inner, c.rel))
		if err != nil || string(b) != c.data {
			t.Errorf("Got(%s) = %q, %v; want %q", c.rel, b, err, c.data)
		}
		if fi, err := os.Stat(filepath.Join(inner, c.rel)); err == nil && fi.Mode().Perm() != c.mode {
			t.Errorf("Got(%s mode) = %v; want %v", c.rel, fi.Mode().Perm(), c.mode)
		}
		if _, err := os.Stat(filepath.Join(src, c.rel)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Got(source %s after move) = %v; want removed", c.rel, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(inner, "etc/owned"), &st); err != nil || st.Uid != 1000 || st.Gid != 1000 {
		t.Errorf("Got(etc/owned owner) = %d:%d, %v; want 1000:1000", st.Uid, st.Gid, err)
	}
	if l, err := os.Readlink(filepath.Join(inner, "lib/sh")); err != nil || l != "busybox" {
		t.Errorf("Got(lib/sh link) = %q, %v; want busybox", l, err)
	}
	if fi, err := os.Stat(filepath.Join(inner, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("Got(tmp mode) = %v, %v; want sticky", fi.Mode(), err)
	}
	if err := unix.Stat(filepath.Join(inner, "console"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != unix.Mkdev(5, 1) {
		t.Errorf("Got(console) = mode %o rdev %d, %v; want char 5:1", st.Mode, st.Rdev, err)
	}
	if _, err := os.Stat(filepath.Join(inner, "newroot")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Got(newroot copied into itself) = %v; want not there", err)
	}
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

func TestReaperRun(t *testing.T) {
	r := newReaper(slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.loop(ctx)

	tests := []struct {
		name    string
		path    string
		args    []string
		want    string
		wantErr bool
	}{
		{"stdout", "/bin/sh", []string{"-c", "echo hi; echo there"}, "hi\nthere\n", false},
		{"exit status", "/bin/sh", []string{"-c", "echo partial; exit 3"}, "partial\n", true},
		{"missing", "/nonexistent", nil, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := r.Run(ctx, tc.path, tc.args...)
			if (err != nil) != tc.wantErr {
				t.Errorf("Got(Run() error) = %v; want error %v", err, tc.wantErr)
			}
			if string(out) != tc.want {
				t.Errorf("Got(Run() output) = %q; want %q", out, tc.want)
			}
		})
	}

	t.Run("context ends a hung child", func(t *testing.T) {
		cctx, ccancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer ccancel()
		start := time.Now()
		_, err := r.Run(cctx, "/bin/sleep", "30")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Got(Run(sleep) error) = %v; want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("Got(Run(sleep) duration) = %v; want bounded by the context", d)
		}
	})

	t.Run("many concurrent", func(t *testing.T) {
		errs := make(chan error, 20)
		for i := range 20 {
			go func() {
				out, err := r.Run(ctx, "/bin/echo", strings.Repeat("x", i))
				if err == nil && !bytes.Equal(out, []byte(strings.Repeat("x", i)+"\n")) {
					err = errors.New("wrong output " + string(out))
				}
				errs <- err
			}()
		}
		for range 20 {
			if err := <-errs; err != nil {
				t.Errorf("Got(concurrent Run()) = %v; want nil", err)
			}
		}
	})
}
