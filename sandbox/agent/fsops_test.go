package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// fsSandbox is a host sandbox (init as the sandbox user) with a root that
// has escaping links a sandbox process could plant.
func fsSandbox(t *testing.T) (*agentproto.Client, *sandbox, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("files are given to uid 1000: needs root")
		}
		t.Skip("files are given to uid 1000: needs root")
	}
	c, sb := hostSandboxAs(t, true)
	root := sb.rootfs
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nsandbox:x:1000:1000::/home/sandbox:/bin/sh\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nsandbox:x:1000:\n"), 0o644))
	must(os.MkdirAll(filepath.Join(root, "tmp"), 0o777))
	must(os.Chmod(filepath.Join(root, "tmp"), 0o777|os.ModeSticky))
	ws := filepath.Join(root, "workspace")
	for _, d := range []string{"proj/src/deep", "proj/empty"} {
		must(os.MkdirAll(filepath.Join(ws, d), 0o755))
	}
	must(os.WriteFile(filepath.Join(ws, "proj/a.txt"), []byte("hello"), 0o640))
	must(os.WriteFile(filepath.Join(ws, "proj/src/main.go"), []byte("package main\n"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "proj/src/deep/x"), []byte("x"), 0o644))
	must(os.Symlink("a.txt", filepath.Join(ws, "proj/link")))
	must(filepath.Walk(ws, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, sandboxUID, sandboxGID)
	}))
	// Links aiming out of the root.
	must(os.Symlink("/", filepath.Join(ws, "slash")))
	must(os.Symlink("../../../../../../..", filepath.Join(ws, "up")))
	return c, sb, root
}

func TestFsOps(t *testing.T) {
	c, sb, root := fsSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws := filepath.Join(root, "workspace")
	req := func(p string) agentproto.FsRequest { return agentproto.FsRequest{Sandbox: sb.id, Path: p} }

	t.Run("stat", func(t *testing.T) {
		e, err := c.Stat(ctx, req("proj/a.txt"))
		want := agentproto.FsEntry{Name: "a.txt", Type: agentproto.FsFile, Path: "/workspace/proj/a.txt", Size: 5, Mode: 0o640,
			Permissions: "-rw-r-----", UID: 1000, GID: 1000, Owner: "sandbox", Group: "sandbox"}
		e.Modified = time.Time{}
		if err != nil || e != want {
			t.Errorf("Got(Stat(a.txt)) = %+v, %v; want %+v", e, err, want)
		}
		e, err = c.Stat(ctx, req("proj/link"))
		if err != nil || e.Type != agentproto.FsSymlink || e.SymlinkTarget != "a.txt" || e.Permissions[0] != 'L' {
			t.Errorf("Got(Stat(link)) = %+v, %v; want the symlink itself, target a.txt", e, err)
		}
		e, err = c.Stat(ctx, req("/"))
		if err != nil || e.Type != agentproto.FsDir || e.Name != "/" || e.Owner != "root" {
			t.Errorf("Got(Stat(/)) = %+v, %v; want the root folder, root's", e, err)
		}
		if _, err := c.Stat(ctx, req("nope")); !errors.Is(err, agentproto.ErrNotFound) {
			t.Errorf("Got(Stat(nope)) = %v; want ErrNotFound", err)
		}
	})

	t.Run("list", func(t *testing.T) {
		names := func(es []agentproto.FsEntry) []string {
			var out []string
			for _, e := range es {
				out = append(out, e.Path)
			}
			return out
		}
		es, trunc, err := c.ListDir(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: "proj", Depth: 1})
		want := []string{"/workspace/proj/a.txt", "/workspace/proj/empty", "/workspace/proj/link", "/workspace/proj/src"}
		if err != nil || trunc || !slices.Equal(names(es), want) {
			t.Errorf("Got(ListDir(proj, 1)) = %v, %v, %v; want %v", names(es), trunc, err, want)
		}
		es, _, err = c.ListDir(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: "/workspace/proj", Depth: 3})
		want = []string{"/workspace/proj/a.txt", "/workspace/proj/empty", "/workspace/proj/link", "/workspace/proj/src",
			"/workspace/proj/src/deep", "/workspace/proj/src/deep/x", "/workspace/proj/src/main.go"}
		if err != nil || !slices.Equal(names(es), want) {
			t.Errorf("Got(ListDir(proj, 3)) = %v, %v; want %v", names(es), err, want)
		}
		// Through links aiming out: the sandbox's root, not the host's.
		for _, p := range []string{"slash", "up", "/workspace/up/workspace/slash"} {
			es, _, err = c.ListDir(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: p, Depth: 1})
			var got []string
			for _, e := range es {
				got = append(got, e.Name)
			}
			if err != nil || !slices.Equal(got, []string{"etc", "tmp", "workspace"}) {
				t.Errorf("Got(ListDir(%s)) = %v, %v; want the sandbox root's [etc tmp workspace]", p, got, err)
			}
		}
		for _, d := range []int{0, -1, agentproto.MaxListDepth + 1} {
			if _, _, err := c.ListDir(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: "proj", Depth: d}); !errors.Is(err, agentproto.ErrBadRequest) {
				t.Errorf("Got(ListDir(depth %d)) = %v; want ErrBadRequest", d, err)
			}
		}
		if _, _, err := c.ListDir(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: "proj/a.txt", Depth: 1}); !errors.Is(err, agentproto.ErrBadRequest) {
			t.Errorf("Got(ListDir(a file)) = %v; want ErrBadRequest", err)
		}
	})

	t.Run("mkdir", func(t *testing.T) {
		e, created, err := c.MakeDir(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: "new/a/b", Mode: 0o700})
		if err != nil || !created || e.Type != agentproto.FsDir || e.Mode != 0o700 || e.UID != sandboxUID {
			t.Errorf("Got(MakeDir(new/a/b)) = %+v, %v, %v; want created, mode 0700, the sandbox user's", e, created, err)
		}
		if _, created, err := c.MakeDir(ctx, req("new/a/b")); err != nil || created {
			t.Errorf("Got(MakeDir(again)) = %v, %v; want not created, no error", created, err)
		}
		if _, _, err := c.MakeDir(ctx, req("proj/a.txt")); !errors.Is(err, agentproto.ErrConflict) {
			t.Errorf("Got(MakeDir(over a file)) = %v; want ErrConflict", err)
		}
		// Through an escaping link: made in the sandbox root (which the
		// sandbox user may not write), never on the host.
		if _, _, err := c.MakeDir(ctx, req("up/stockade-escape")); !errors.Is(err, agentproto.ErrPermission) {
			t.Errorf("Got(MakeDir(up/stockade-escape)) = %v; want ErrPermission (the sandbox root)", err)
		}
		if _, _, err := c.MakeDir(ctx, req("slash/tmp/in-root")); err != nil {
			t.Errorf("Got(MakeDir(slash/tmp/in-root)) = %v", err)
		}
		if _, err := os.Stat(filepath.Join(root, "tmp/in-root")); err != nil {
			t.Errorf("Got(root/tmp/in-root) = %v; want it made inside the root", err)
		}
		for _, p := range []string{"/stockade-escape", "/tmp/in-root"} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("Got(host %s) = exists; want nothing outside the root", p)
			}
		}
	})

	t.Run("chmod", func(t *testing.T) {
		e, err := c.Chmod(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: "proj/a.txt", Mode: 0o600})
		if err != nil || e.Mode != 0o600 {
			t.Errorf("Got(Chmod(a.txt, 0600)) = %+v, %v; want mode 0600", e, err)
		}
		if st, _ := os.Stat(filepath.Join(ws, "proj/a.txt")); st == nil || st.Mode().Perm() != 0o600 {
			t.Errorf("Got(a.txt mode on disk) = %v; want 0600", st)
		}
		// The root is root's: the sandbox user may not, through any link.
		for _, p := range []string{"/", "slash", "up"} {
			if _, err := c.Chmod(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: p, Mode: 0o777}); !errors.Is(err, agentproto.ErrPermission) {
				t.Errorf("Got(Chmod(%s)) = %v; want ErrPermission", p, err)
			}
		}
	})

	t.Run("move", func(t *testing.T) {
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(os.WriteFile(filepath.Join(ws, "m.txt"), []byte("m"), 0o644))
		must(os.Chown(filepath.Join(ws, "m.txt"), sandboxUID, sandboxGID))
		e, err := c.Move(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: "m.txt", Dest: "moved/here/m2.txt"})
		if err != nil || e.Path != "/workspace/moved/here/m2.txt" || e.Size != 1 {
			t.Errorf("Got(Move()) = %+v, %v; want it at moved/here/m2.txt", e, err)
		}
		if _, err := os.Stat(filepath.Join(ws, "m.txt")); err == nil {
			t.Error("Got(m.txt after the move) = exists; want gone")
		}
		bad := []struct {
			name      string
			src, dest string
			want      error
		}{
			{"missing source", "nope", "x", agentproto.ErrNotFound},
			{"into itself", "proj", "proj/src/proj", agentproto.ErrBadRequest},
			{"the root", "/", "/workspace/root", agentproto.ErrBadRequest},
			{"onto the root", "proj/a.txt", "/", agentproto.ErrBadRequest},
			{"out through a link", "moved/here/m2.txt", "up/m3.txt", agentproto.ErrPermission},
		}
		for _, tc := range bad {
			_, err := c.Move(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: tc.src, Dest: tc.dest})
			if !errors.Is(err, tc.want) {
				t.Errorf("Got(Move(%s)) = %v; want %v", tc.name, err, tc.want)
			}
		}
		if _, err := os.Stat(filepath.Join(ws, "moved/here/m2.txt")); err != nil {
			t.Errorf("Got(m2.txt after refused moves) = %v; want it still there", err)
		}
		if _, err := os.Stat(filepath.Join(ws, "nope")); err == nil {
			t.Error("Got(missing source) made something; want nothing")
		}
	})

	t.Run("archive", func(t *testing.T) {
		var buf bytes.Buffer
		if _, err := c.Archive(ctx, req("proj"), &buf); err != nil {
			t.Fatalf("Got(Archive(proj)) = %v", err)
		}
		got := map[string]string{}
		tr := tar.NewReader(&buf)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(tr)
			switch h.Typeflag {
			case tar.TypeSymlink:
				got[h.Name] = "-> " + h.Linkname
			case tar.TypeDir:
				got[h.Name] = "dir"
			default:
				got[h.Name] = string(b)
			}
		}
		want := map[string]string{"a.txt": "hello", "empty/": "dir", "link": "-> a.txt", "src/": "dir", "src/deep/": "dir",
			"src/deep/x": "x", "src/main.go": "package main\n"}
		if len(got) != len(want) {
			t.Errorf("Got(archive entries) = %v; want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("Got(archive %s) = %q; want %q", k, got[k], v)
			}
		}
		buf.Reset()
		if _, err := c.Archive(ctx, req("proj/src/main.go"), &buf); err != nil {
			t.Fatal(err)
		}
		if h, err := tar.NewReader(&buf).Next(); err != nil || h.Name != "main.go" || h.Size != 13 {
			t.Errorf("Got(Archive(a file)) = %+v, %v; want one entry main.go", h, err)
		}
		big := bytes.Repeat([]byte("b"), 700<<10)
		if err := os.WriteFile(filepath.Join(ws, "proj/big1"), big, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "proj/big2"), big, 0o644); err != nil {
			t.Fatal(err)
		}
		// Over the agent's bound (1 MiB in this test): an error, not a cut tar.
		if _, err := c.Archive(ctx, req("proj"), io.Discard); !errors.Is(err, agentproto.ErrFileTooLarge) {
			t.Errorf("Got(Archive(over the bound)) = %v; want ErrFileTooLarge", err)
		}
		os.Remove(filepath.Join(ws, "proj/big1"))
		os.Remove(filepath.Join(ws, "proj/big2"))
	})

	t.Run("remove", func(t *testing.T) {
		if err := c.Remove(ctx, req("proj")); !errors.Is(err, agentproto.ErrConflict) {
			t.Errorf("Got(Remove(a full folder)) = %v; want ErrConflict", err)
		}
		if _, err := os.Stat(filepath.Join(ws, "proj/a.txt")); err != nil {
			t.Errorf("Got(proj after the refusal) = %v; want untouched", err)
		}
		for _, p := range []string{"/", "/workspace/../.."} {
			if err := c.Remove(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: p, Recursive: true}); !errors.Is(err, agentproto.ErrBadRequest) {
				t.Errorf("Got(Remove(%s)) = %v; want ErrBadRequest", p, err)
			}
		}
		// A link goes, not what it points at.
		if err := c.Remove(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: "slash", Recursive: true}); err != nil {
			t.Errorf("Got(Remove(slash)) = %v", err)
		}
		if _, err := os.Stat(filepath.Join(root, "etc/passwd")); err != nil {
			t.Errorf("Got(root/etc/passwd after removing a link to /) = %v; want untouched", err)
		}
		if err := c.Remove(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: "proj", Recursive: true}); err != nil {
			t.Errorf("Got(Remove(proj, recursive)) = %v", err)
		}
		if _, err := os.Lstat(filepath.Join(ws, "proj")); err == nil {
			t.Error("Got(proj after recursive remove) = exists; want gone")
		}
		if err := c.Remove(ctx, req("proj")); !errors.Is(err, agentproto.ErrNotFound) {
			t.Errorf("Got(Remove(gone)) = %v; want ErrNotFound", err)
		}
	})
}

func TestFsWatch(t *testing.T) {
	c, sb, root := fsSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws := filepath.Join(root, "workspace")

	if _, err := c.Watch(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: "proj/a.txt"}); !errors.Is(err, agentproto.ErrBadRequest) {
		t.Errorf("Got(Watch(a file)) = %v; want ErrBadRequest", err)
	}
	if _, err := c.Watch(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: "nope"}); !errors.Is(err, agentproto.ErrNotFound) {
		t.Errorf("Got(Watch(missing)) = %v; want ErrNotFound", err)
	}
	w, err := c.Watch(ctx, agentproto.FsRequest{Sandbox: sb.id, Path: "proj", Recursive: true})
	if err != nil {
		t.Fatalf("Got(Watch(proj)) = %v", err)
	}
	defer w.Close()
	// await reads events until one matches; the rest of its batch stays
	// for the next await.
	var pending []agentproto.FsEvent
	await := func(name, typ string) {
		t.Helper()
		for {
			for len(pending) > 0 {
				ev := pending[0]
				pending = pending[1:]
				if ev.Name == name && ev.Type == typ {
					return
				}
			}
			evs, err := w.Next()
			if err != nil {
				t.Fatalf("Got(Next()) = %v; want %s %s", err, typ, name)
			}
			pending = evs
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "proj/new.txt"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	await("new.txt", agentproto.FsEventCreate)
	await("new.txt", agentproto.FsEventWrite)
	// Below: an existing folder, and one made after the watch began.
	if err := os.WriteFile(filepath.Join(ws, "proj/src/deep/y"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	await("src/deep/y", agentproto.FsEventCreate)
	if err := os.Mkdir(filepath.Join(ws, "proj/later"), 0o755); err != nil {
		t.Fatal(err)
	}
	await("later", agentproto.FsEventCreate)
	if err := os.WriteFile(filepath.Join(ws, "proj/later/z"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	await("later/z", agentproto.FsEventCreate)
	if err := os.Chmod(filepath.Join(ws, "proj/a.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	await("a.txt", agentproto.FsEventChmod)
	if err := os.Rename(filepath.Join(ws, "proj/new.txt"), filepath.Join(ws, "proj/renamed.txt")); err != nil {
		t.Fatal(err)
	}
	await("new.txt", agentproto.FsEventRename)
	await("renamed.txt", agentproto.FsEventCreate)
	if err := os.Remove(filepath.Join(ws, "proj/renamed.txt")); err != nil {
		t.Fatal(err)
	}
	await("renamed.txt", agentproto.FsEventRemove)
	// The watched folder going ends the watch with not found.
	if err := os.RemoveAll(filepath.Join(ws, "proj")); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := w.Next()
		if err != nil {
			if !errors.Is(err, agentproto.ErrNotFound) {
				t.Errorf("Got(Next() after the folder went) = %v; want ErrNotFound", err)
			}
			break
		}
	}
}

func TestWatchRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := agentproto.NewWatchRate(t0)
	evs := make([]agentproto.FsEvent, agentproto.MaxWatchRate+10)
	for i := range evs {
		evs[i] = agentproto.FsEvent{Name: "f", Type: agentproto.FsEventWrite}
	}
	evs = append(evs, agentproto.FsEvent{Name: "../escape", Type: agentproto.FsEventCreate},
		agentproto.FsEvent{Name: "/abs", Type: agentproto.FsEventCreate}, agentproto.FsEvent{Name: "x", Type: "bogus"})
	if got := r.Admit(t0, evs); len(got) != agentproto.MaxWatchRate {
		t.Errorf("Got(admitted in one second) = %d; want %d", len(got), agentproto.MaxWatchRate)
	}
	got := r.Admit(t0.Add(time.Second), []agentproto.FsEvent{{Name: "g", Type: agentproto.FsEventCreate}})
	want := []agentproto.FsEvent{{Type: agentproto.FsEventOverflow, Dropped: 10}, {Name: "g", Type: agentproto.FsEventCreate}}
	if !slices.Equal(got, want) {
		t.Errorf("Got(next second) = %+v; want %+v", got, want)
	}
}
