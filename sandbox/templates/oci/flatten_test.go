package oci_test

import (
	"archive/tar"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/stockade-dev/stockade/sandbox/templates/oci"
	. "github.com/stockade-dev/stockade/sandbox/templates/oci/ocitest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

var lim = oci.Limits{MaxBytes: 64 << 20, Quota: "max_template_mib"}

// open writes archive to a file and opens it as an upload.
func open(t *testing.T, archive []byte) (*oci.Image, error) {
	t.Helper()
	dir := t.TempDir()
	f := filepath.Join(dir, "upload.tar")
	if err := os.WriteFile(f, archive, 0o600); err != nil {
		t.Fatal(err)
	}
	return oci.OpenArchive(f, dir, 1000)
}

func flatten(t *testing.T, archive []byte, l oci.Limits) (string, error) {
	t.Helper()
	im, err := open(t, archive)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(t.TempDir(), "tree")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = im.Flatten(t.Context(), dst, l)
	return dst, err
}

func goodImage(t *testing.T) v1.Image {
	base := Layer(t,
		Dir("etc"), File("etc/os-release", "ID=test\n"),
		Dir("bin"), Mode(File("bin/tool", "#!/bin/sh\necho tool\n"), 0o4755), Symlink("bin/sh", "/bin/busybox"),
		File("gone.txt", "lower"), Dir("dir"), File("dir/a", "a"), Dir("dir/sub"), File("dir/sub/b", "b"),
		Dir("usr"), Dir("usr/lib"), Symlink("lib", "usr/lib"), Dir("keep"), File("keep/x", "x"), File("keep/y", "y"))
	top := Layer(t,
		Whiteout("", "gone.txt"), Dir("dir"), Opaque("dir"), File("dir/c", "c"),
		Hardlink("bin/tool2", "bin/tool"), Whiteout("keep", "y"), File("keep/new", "n"))
	return Image(t, []string{"PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=hello from the image"}, "/app", "root", base, top)
}

func TestFlattenGood(t *testing.T) {
	img := goodImage(t)
	for _, tc := range []struct {
		name    string
		archive []byte
	}{
		{"docker save", DockerTar(t, img)},
		{"oci layout", LayoutTar(t, img)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst, err := flatten(t, tc.archive, lim)
			if err != nil {
				t.Fatalf("Got(Flatten) = %v; want nil", err)
			}
			for _, p := range []string{"etc/os-release", "bin/tool", "bin/tool2", "dir/c", "keep/x", "keep/new", "app"} {
				if _, err := os.Lstat(filepath.Join(dst, p)); err != nil {
					t.Errorf("Got(Lstat %s) = %v; want it there", p, err)
				}
			}
			for _, p := range []string{"gone.txt", "dir/a", "dir/sub", "keep/y", ".wh.gone.txt", "dir/.wh..wh..opq"} {
				if _, err := os.Lstat(filepath.Join(dst, p)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("Got(Lstat %s) = %v; want it gone", p, err)
				}
			}
			fi, err := os.Stat(filepath.Join(dst, "bin/tool"))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode()&os.ModeSetuid != 0 || fi.Mode().Perm() != 0o755 {
				t.Errorf("Got(mode of bin/tool) = %v; want 0755 without setuid", fi.Mode())
			}
			fi2, err := os.Stat(filepath.Join(dst, "bin/tool2"))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Sys().(*syscall.Stat_t).Ino != fi2.Sys().(*syscall.Stat_t).Ino {
				t.Errorf("Got(bin/tool2) = another file; want a hard link of bin/tool")
			}
			if target, err := os.Readlink(filepath.Join(dst, "bin/sh")); err != nil || target != "/bin/busybox" {
				t.Errorf("Got(bin/sh) = %q, %v; want the symlink to /bin/busybox kept as it is", target, err)
			}
		})
	}
}

func TestFlattenRefused(t *testing.T) {
	outside := t.TempDir() // a host folder no layer may reach
	for _, tc := range []struct {
		name   string
		layers [][]Entry
		rule   string
		detail string
		// whole: refused by the checks of the whole tree, not a layer's
		whole bool
	}{
		{"dot-dot entry", [][]Entry{{File("../x", "escape")}}, "path_escape", `"../x" climbs out of the image root`, false},
		{"dot-dot inside", [][]Entry{{Dir("a"), File("a/../../x", "escape")}}, "path_escape", "climbs out", false},
		{"absolute entry", [][]Entry{{File("/etc/x", "abs")}}, "absolute_path", "absolute path", false},
		{"relative symlink escaping", [][]Entry{{Dir("a"), Symlink("a/evil", "../../etc/shadow")}}, "symlink_escape", `symlink "a/evil" -> "../../etc/shadow" points outside the image root`, false},
		{"absolute symlink escaping", [][]Entry{{Symlink("evil", "/../../etc/shadow")}}, "symlink_escape", "points outside the image root", false},
		{"symlink chain escaping", [][]Entry{{Dir("a"), Dir("a/b"), Dir("a/b/c"), Symlink("a/b/c/s", "../.."), Symlink("t", "a/b/c/s/../../../../etc")}},
			"symlink_escape", "resolves outside the image root", true},
		{"symlink loop", [][]Entry{{Symlink("l1", "l2"), Symlink("l2", "l1/x")}}, "symlink_loop", "too many levels", true},
		{"write through an absolute symlink", [][]Entry{{Symlink("x", outside)}, {File("x/pwned", "host file")}}, "symlink_parent", "a symlink", false},
		{"write through a relative symlink", [][]Entry{{Dir("d"), Symlink("x", "d")}, {File("x/f", "f")}}, "symlink_parent", "a symlink", false},
		{"whiteout through a symlink", [][]Entry{{File("victim", "v"), Symlink("x", outside)}, {Whiteout("x", "victim")}}, "symlink_parent", "a symlink", false},
		{"hard link escaping", [][]Entry{{Hardlink("h", "../../etc/passwd")}}, "hardlink_target", "climbs out", false},
		{"hard link absolute", [][]Entry{{Hardlink("h", "/etc/passwd")}}, "hardlink_target", "absolute", false},
		{"hard link through a symlink", [][]Entry{{Symlink("x", outside)}, {Hardlink("h", "x/victim")}}, "symlink_parent", "a symlink", false},
		{"device node", [][]Entry{{Typed("dev/sda", tar.TypeBlock)}}, "device", "device node", false},
		{"char device", [][]Entry{{Typed("dev/mem", tar.TypeChar)}}, "device", "device node", false},
		{"etc a symlink to the host's", [][]Entry{{Symlink("etc", "/etc")}}, "reserved_path", "/etc", true},
		{"passwd a symlink", [][]Entry{{Dir("etc"), Symlink("etc/passwd", "/etc/shadow")}}, "reserved_path", "/etc/passwd", true},
		{"tmp a symlink", [][]Entry{{Symlink("tmp", "/")}}, "reserved_path", "/tmp", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ents, _ := os.ReadDir(outside)
			for _, e := range ents {
				os.RemoveAll(filepath.Join(outside, e.Name()))
			}
			if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("keep me"), 0o644); err != nil {
				t.Fatal(err)
			}
			var layers []v1.Layer
			for _, es := range tc.layers {
				layers = append(layers, Layer(t, es...))
			}
			_, err := flatten(t, DockerTar(t, Image(t, nil, "", "", layers...)), lim)
			ents, _ = os.ReadDir(outside)
			if len(ents) != 1 {
				t.Errorf("Got(outside) = %d entries; want only victim (nothing written outside)", len(ents))
			}
			if b, err := os.ReadFile(filepath.Join(outside, "victim")); err != nil || string(b) != "keep me" {
				t.Errorf("Got(outside/victim) = %q, %v; want it untouched", b, err)
			}
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != "image" || fe.Rule != tc.rule || !strings.Contains(fe.Detail, tc.detail) {
				t.Fatalf("Got(Flatten) = %v; want a refusal of image, rule %s, naming %q", err, tc.rule, tc.detail)
			}
			if !tc.whole && !strings.Contains(fe.Detail, "layer ") {
				t.Errorf("Got(detail) = %q; want it to name the layer", fe.Detail)
			}
		})
	}
}

func TestFlattenWrongDigest(t *testing.T) {
	one := Layer(t, File("a", "the real layer"))
	other := Layer(t, File("a", "a swapped layer"))
	img := Image(t, nil, "", "", Layer(t, Dir("etc")), one)
	d1, _ := one.Digest()
	swapped := Compressed(t, other)
	md, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		archive []byte
		detail  string
	}{
		{"docker save, layer swapped", Rewrite(t, DockerTar(t, img), func(name string, b []byte) []byte {
			if strings.Contains(name, d1.Hex) {
				return swapped
			}
			return b
		}), "layer 2 of 2 (diff id"},
		{"oci layout, blob swapped", Rewrite(t, LayoutTar(t, img), func(name string, b []byte) []byte {
			if strings.HasSuffix(name, d1.Hex) {
				return swapped
			}
			return b
		}), "layer 2 of 2 (" + d1.Algorithm + ":" + d1.Hex[:12] + "): the blob is larger than"},
		{"oci layout, manifest edited", Rewrite(t, LayoutTar(t, img), func(name string, b []byte) []byte {
			if strings.HasSuffix(name, md.Hex) {
				return append(b, ' ')
			}
			return b
		}), "the manifest does not match its digest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := flatten(t, tc.archive, lim)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Rule != "digest" || !strings.Contains(fe.Detail, tc.detail) {
				t.Fatalf("Got(Flatten) = %v; want a digest refusal naming %q", err, tc.detail)
			}
		})
	}
}

func TestFlattenBounds(t *testing.T) {
	img := Image(t, nil, "", "", Layer(t, File("big", strings.Repeat("x", 4096))))
	_, err := flatten(t, DockerTar(t, img), oci.Limits{MaxBytes: 1000, Quota: "max_template_mib"})
	var qe *errdefs.QuotaError
	if !errors.As(err, &qe) || qe.Quota != "max_template_mib" {
		t.Errorf("Got(Flatten over the quota) = %v; want a QuotaError of max_template_mib", err)
	}
	_, err = flatten(t, DockerTar(t, img), oci.Limits{MaxBytes: 1 << 20, MaxEntries: 0})
	if err != nil {
		t.Errorf("Got(Flatten within bounds) = %v; want nil", err)
	}
	many := Image(t, nil, "", "", Layer(t, File("a", "1"), File("b", "2"), File("c", "3")))
	_, err = flatten(t, DockerTar(t, many), oci.Limits{MaxBytes: 1 << 20, MaxEntries: 2})
	var fe *errdefs.FieldError
	if !errors.As(err, &fe) || fe.Rule != "entries" {
		t.Errorf("Got(Flatten of too many entries) = %v; want rule entries", err)
	}
}
