package agent

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

func TestSandboxPath(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"/etc/passwd", "/etc/passwd", true},
		{"notes.txt", "/workspace/notes.txt", true},
		{"a/../b", "/workspace/b", true},
		{"../../etc/shadow", "/etc/shadow", true},
		{"/../../..", "/", true},
		{"", "", false},
		{"a\x00b", "", false},
		{strings.Repeat("a", 5000), "", false},
	}
	for _, tc := range tests {
		got, err := sandboxPath(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Got(sandboxPath(%.20q)) = %q, %v; want %q ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if !tc.ok && !errors.Is(err, agentproto.ErrBadRequest) {
			t.Errorf("Got(sandboxPath(%.20q) error) = %v; want ErrBadRequest", tc.in, err)
		}
	}
}

func TestFilesStayInRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("files are given to uid 1000: needs root")
		}
		t.Skip("files are given to uid 1000: needs root")
	}
	// Init runs as the sandbox user, as in a real sandbox: the files API
	// has its rights, no more.
	c, sb := hostSandboxAs(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := sb.rootfs
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("sandbox's passwd\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "etc/shadow"), []byte("root:$6$secret:19000::::::\n"), 0o600))
	must(os.MkdirAll(filepath.Join(root, "tmp"), 0o777))
	must(os.Chmod(filepath.Join(root, "tmp"), 0o777|os.ModeSticky))
	must(os.MkdirAll(filepath.Join(root, "home/sandbox"), 0o755))
	must(os.Chown(filepath.Join(root, "home/sandbox"), sandboxUID, sandboxGID))
	must(os.Symlink("/etc/shadow", filepath.Join(root, "workspace/shadow")))
	// Links a sandbox process could plant, aiming out of the root.
	must(os.Symlink("../../../../../../..", filepath.Join(root, "workspace/up")))
	must(os.Symlink("/etc", filepath.Join(root, "workspace/etc")))
	must(os.Symlink("/etc/passwd", filepath.Join(root, "workspace/passwd")))
	must(unix.Mkfifo(filepath.Join(root, "workspace/fifo"), 0o644))

	read := func(req agentproto.FileReadRequest) (string, error) {
		req.Sandbox = sb.id
		var b bytes.Buffer
		_, err := c.ReadFile(ctx, req, &b)
		return b.String(), err
	}
	write := func(req agentproto.FileWriteRequest, data []byte) (agentproto.FileInfo, error) {
		req.Sandbox = sb.id
		return c.WriteFile(ctx, req, bytes.NewReader(data))
	}

	t.Run("round trip", func(t *testing.T) {
		info, err := write(agentproto.FileWriteRequest{Path: "dir/sub/hello.txt", Mode: 0o600}, []byte("hello"))
		if err != nil || info.Size != 5 || info.Mode != 0o600 {
			t.Fatalf("Got(WriteFile()) = %+v, %v; want 5 bytes mode 0600", info, err)
		}
		got, err := read(agentproto.FileReadRequest{Path: "/workspace/dir/sub/hello.txt"})
		if err != nil || got != "hello" {
			t.Errorf("Got(ReadFile()) = %q, %v; want hello", got, err)
		}
		for _, p := range []string{"workspace/dir", "workspace/dir/sub", "workspace/dir/sub/hello.txt"} {
			var st syscall.Stat_t
			must(syscall.Stat(filepath.Join(root, p), &st))
			if st.Uid != sandboxUID || st.Gid != sandboxGID {
				t.Errorf("Got(owner of %s) = %d:%d; want %d:%d", p, st.Uid, st.Gid, sandboxUID, sandboxGID)
			}
		}
		got, err = read(agentproto.FileReadRequest{Path: "dir/sub/hello.txt", Offset: 1, Limit: 3})
		if err != nil || got != "ell" {
			t.Errorf("Got(ReadFile(offset 1, limit 3)) = %q, %v; want ell", got, err)
		}
		if _, err := write(agentproto.FileWriteRequest{Path: "dir/sub/hello.txt", Append: true}, []byte(" world")); err != nil {
			t.Fatal(err)
		}
		if got, _ := read(agentproto.FileReadRequest{Path: "dir/sub/hello.txt"}); got != "hello world" {
			t.Errorf("Got(ReadFile() after append) = %q; want hello world", got)
		}
	})

	t.Run("escapes resolve inside", func(t *testing.T) {
		for _, p := range []string{"/etc/passwd", "../../../etc/passwd", "/workspace/up/etc/passwd",
			"/workspace/etc/passwd", "passwd", "/../../../../etc/passwd"} {
			got, err := read(agentproto.FileReadRequest{Path: p})
			if err != nil || got != "sandbox's passwd\n" {
				t.Errorf("Got(ReadFile(%s)) = %q, %v; want the sandbox's own passwd", p, got, err)
			}
		}
		// Written through an escaping link: lands in the sandbox's /tmp.
		if _, err := write(agentproto.FileWriteRequest{Path: "/workspace/up/tmp/planted"}, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(root, "tmp/planted")); err != nil {
			t.Errorf("Got(planted file in the sandbox root) = %v; want it there", err)
		}
		if _, err := os.Stat("/tmp/planted"); err == nil {
			t.Error("Got(/tmp/planted on the host) = exists; want nothing outside the root")
		}
	})

	// Item 9 of the hardening issue: the API used to act as root.
	t.Run("only what the sandbox user may", func(t *testing.T) {
		tests := []struct {
			name string
			err  error
		}{
			{"read /etc/shadow", second(read(agentproto.FileReadRequest{Path: "/etc/shadow"}))},
			{"read /etc/shadow through a link", second(read(agentproto.FileReadRequest{Path: "shadow"}))},
			{"write into /etc", second(write(agentproto.FileWriteRequest{Path: "/etc/planted"}, []byte("x")))},
			{"write into /", second(write(agentproto.FileWriteRequest{Path: "/planted"}, []byte("x")))},
			{"append to /etc/passwd", second(write(agentproto.FileWriteRequest{Path: "/etc/passwd", Append: true}, []byte("x")))},
			{"make a folder in /etc", second(write(agentproto.FileWriteRequest{Path: "/etc/newdir/f"}, []byte("x")))},
			{"replace /etc/passwd", second(write(agentproto.FileWriteRequest{Path: "/etc/passwd"}, []byte("x")))},
		}
		for _, tc := range tests {
			if !errors.Is(tc.err, agentproto.ErrPermission) {
				t.Errorf("Got(%s) = %v; want ErrPermission", tc.name, tc.err)
			}
		}
		for _, p := range []string{"etc/planted", "planted", "etc/newdir"} {
			if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
				t.Errorf("Got(%s after the refused write) = exists; want nothing", p)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); string(b) != "sandbox's passwd\n" {
			t.Errorf("Got(/etc/passwd after refused writes) = %q; want it untouched", b)
		}
		// The sandbox user's own places still work, and what is made there
		// is the sandbox user's.
		for _, p := range []string{"/home/sandbox/notes/n.txt", "/tmp/t.txt", "/workspace/w.txt"} {
			if _, err := write(agentproto.FileWriteRequest{Path: p, Mode: 0o640}, []byte(p)); err != nil {
				t.Errorf("Got(WriteFile(%s)) = %v; want it written", p, err)
				continue
			}
			if got, err := read(agentproto.FileReadRequest{Path: p}); err != nil || got != p {
				t.Errorf("Got(ReadFile(%s)) = %q, %v; want what was written", p, got, err)
			}
			var st syscall.Stat_t
			must(syscall.Stat(filepath.Join(root, p), &st))
			if st.Uid != sandboxUID || st.Gid != sandboxGID || st.Mode&0o7777 != 0o640 {
				t.Errorf("Got(%s) = %d:%d mode %o; want %d:%d mode 640", p, st.Uid, st.Gid, st.Mode&0o7777, sandboxUID, sandboxGID)
			}
		}
	})

	t.Run("refusals", func(t *testing.T) {
		tests := []struct {
			name string
			err  error
			want error
		}{
			{"missing", second(read(agentproto.FileReadRequest{Path: "nope"})), agentproto.ErrNotFound},
			{"folder", second(read(agentproto.FileReadRequest{Path: "/workspace"})), agentproto.ErrBadRequest},
			{"fifo", second(read(agentproto.FileReadRequest{Path: "fifo"})), agentproto.ErrBadRequest},
			{"unknown sandbox", func() error {
				_, err := c.ReadFile(ctx, agentproto.FileReadRequest{Sandbox: "nope", Path: "x"}, &bytes.Buffer{})
				return err
			}(), agentproto.ErrNotFound},
			{"write over a folder", second(write(agentproto.FileWriteRequest{Path: "/workspace/dir"}, []byte("x"))), agentproto.ErrBadRequest},
			{"write to the root", second(write(agentproto.FileWriteRequest{Path: "/"}, []byte("x"))), agentproto.ErrBadRequest},
		}
		for _, tc := range tests {
			if !errors.Is(tc.err, tc.want) {
				t.Errorf("Got(%s) = %v; want %v", tc.name, tc.err, tc.want)
			}
		}
	})

	t.Run("size bounds", func(t *testing.T) {
		big := bytes.Repeat([]byte("a"), 2<<20) // over the test bound of 1 MiB
		must(os.WriteFile(filepath.Join(root, "workspace/keep.txt"), []byte("old"), 0o644))
		if _, err := write(agentproto.FileWriteRequest{Path: "keep.txt"}, big); !errors.Is(err, agentproto.ErrFileTooLarge) {
			t.Errorf("Got(WriteFile(2 MiB)) = %v; want ErrFileTooLarge", err)
		}
		if _, err := write(agentproto.FileWriteRequest{Path: "keep.txt", MaxBytes: 2}, []byte("new")); !errors.Is(err, agentproto.ErrFileTooLarge) {
			t.Errorf("Got(WriteFile(over MaxBytes)) = %v; want ErrFileTooLarge", err)
		}
		if b, _ := os.ReadFile(filepath.Join(root, "workspace/keep.txt")); string(b) != "old" {
			t.Errorf("Got(keep.txt after refused writes) = %q; want old (untouched)", b)
		}
		if m, _ := filepath.Glob(filepath.Join(root, "workspace/.stockade-upload-*")); len(m) != 0 {
			t.Errorf("Got(temporary files) = %v; want none left", m)
		}
		must(os.WriteFile(filepath.Join(root, "workspace/big"), big, 0o644))
		if _, err := read(agentproto.FileReadRequest{Path: "big"}); !errors.Is(err, agentproto.ErrFileTooLarge) {
			t.Errorf("Got(ReadFile(2 MiB)) = %v; want ErrFileTooLarge", err)
		}
		if got, err := read(agentproto.FileReadRequest{Path: "big", Limit: 10}); err != nil || got != "aaaaaaaaaa" {
			t.Errorf("Got(ReadFile(big, limit 10)) = %q, %v; want 10 bytes", got, err)
		}
	})
}

func second[T any](_ T, err error) error { return err }
