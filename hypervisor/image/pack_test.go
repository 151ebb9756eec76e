package image

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackTemplate: a plain tree becomes an ext4 image with the marker and
// the sandbox user; a tree whose etc/passwd is a symlink out of it is
// refused and leaves no image.
func TestPackTemplate(t *testing.T) {
	ctx := context.Background()
	tree := t.TempDir()
	os.MkdirAll(filepath.Join(tree, "etc"), 0o755)
	os.WriteFile(filepath.Join(tree, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
	dst := filepath.Join(t.TempDir(), "img.ext4")
	p, err := PackTemplate(ctx, tree, dst, "t0123456789ab", "v1")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Size() != p.Size || len(p.SHA256) != 64 {
		t.Fatalf("Got(PackTemplate) = %+v, %v; want the image's size and digest", p, err)
	}
	b, _ := os.ReadFile(filepath.Join(tree, "etc/passwd"))
	if !strings.Contains(string(b), "root:x:0:0") || !strings.Contains(string(b), "sandbox:x:1000:1000") {
		t.Errorf("Got(etc/passwd) = %q; want root kept and the sandbox user added", b)
	}
	mk, _ := os.ReadFile(filepath.Join(tree, templateMarker))
	if !strings.Contains(string(mk), `"name":"t0123456789ab"`) {
		t.Errorf("Got(marker) = %q; want the in-VM name", mk)
	}
	if _, err := PackTemplate(ctx, tree, dst, "t0123456789ab", "v1"); err == nil {
		t.Errorf("Got(PackTemplate over an existing image) = nil; want an error")
	}

	evil := t.TempDir()
	os.MkdirAll(filepath.Join(evil, "etc"), 0o755)
	outside := filepath.Join(t.TempDir(), "host-passwd")
	os.WriteFile(outside, []byte("host\n"), 0o644)
	os.Symlink(outside, filepath.Join(evil, "etc/passwd"))
	dst2 := filepath.Join(t.TempDir(), "img.ext4")
	if _, err := PackTemplate(ctx, evil, dst2, "tevil", "v1"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Got(PackTemplate with a symlinked etc/passwd) = %v; want refused", err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "host\n" {
		t.Errorf("Got(the file the symlink names) = %q; want untouched", b)
	}
	if _, err := os.Stat(dst2); err == nil {
		t.Errorf("Got(image after a refusal) exists; want none")
	}
	if _, err := PackTemplate(ctx, tree, dst2, "Bad", "v1"); err == nil {
		t.Errorf("Got(PackTemplate with a bad in-VM name) = nil; want an error")
	}
}
