package agent

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/templates/oci"
)

// TestUpperOverRealOverlay: changes made through a real overlayfs mount
// (a new file, a changed one, a deleted one: a whiteout; a folder removed
// and made again: an opaque folder; a symlink; a setuid file; a FIFO)
// come out of writeUpper as a tar that, applied over the lower tree with
// the OCI importer's writer, gives the merged view, setuid stripped and
// the FIFO left out.
func TestUpperOverRealOverlay(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root for an overlay mount")
		}
		if os.Getenv("CI") != "" {
			t.Fatal("CI and not root: an overlay mount needs root")
		}
		t.Skip("needs root for an overlay mount")
	}
	d := t.TempDir()
	lower, upper, work, merged := filepath.Join(d, "lower"), filepath.Join(d, "upper"), filepath.Join(d, "work"), filepath.Join(d, "merged")
	for _, p := range []string{lower, upper, work, merged, lower + "/etc", lower + "/opt/cache", lower + "/srv"} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(lower+"/etc/keep", "keep\n")
	write(lower+"/etc/changed", "old\n")
	write(lower+"/srv/gone", "gone\n")
	write(lower+"/opt/cache/old", "old\n")
	if err := unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mount overlay: %v", err)
		}
		t.Skipf("mount overlay: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(merged, unix.MNT_DETACH) })
	write(merged+"/etc/changed", "new\n")
	write(merged+"/etc/added", "added\n")
	if err := os.Remove(merged + "/srv/gone"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(merged + "/opt/cache"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(merged+"/opt/cache", 0o755); err != nil {
		t.Fatal(err)
	}
	write(merged+"/opt/cache/new", "new\n")
	if err := os.Symlink("../etc/keep", merged+"/srv/link"); err != nil {
		t.Fatal(err)
	}
	write(merged+"/srv/suid", "x")
	if err := os.Chmod(merged+"/srv/suid", 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(merged+"/srv/fifo", 0o644); err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := writeUpper(tw, upper); err != nil {
		t.Fatalf("writeUpper = %v", err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	names := tarNames(t, buf.Bytes())
	for _, want := range []string{"srv/.wh.gone", "opt/cache/.wh..wh..opq", "etc/added", "srv/link"} {
		if !contains(names, want) {
			t.Errorf("Got(upper tar) = %v; want %s", names, want)
		}
	}
	if contains(names, "srv/fifo") {
		t.Errorf("Got(upper tar) = %v; want no FIFO", names)
	}

	// Apply over a copy of lower: the merged view, without the FIFO.
	tree := filepath.Join(d, "tree")
	if err := os.CopyFS(tree, os.DirFS(lower)); err != nil {
		t.Fatal(err)
	}
	if _, err := oci.ApplyLayer(tree, bytes.NewReader(buf.Bytes()), oci.Limits{MaxBytes: 1 << 20}); err != nil {
		t.Fatalf("ApplyLayer = %v", err)
	}
	got, want := listTree(t, tree), listTree(t, merged)
	delete(want, "srv/fifo")
	want["srv/suid"] = strings.Replace(want["srv/suid"], "-rwsr-xr-x", "-rwxr-xr-x", 1)
	if len(got) != len(want) {
		t.Errorf("Got(tree) = %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Got(tree %s) = %q; want %q", k, got[k], v)
		}
	}
}

func tarNames(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.TrimSuffix(h.Name, "/"))
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// listTree maps each path below root to its mode and content (a link's
// target).
func listTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var keys []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			v += " -> " + l
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			v += " " + string(b)
		}
		out[rel] = v
		keys = append(keys, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	return out
}
