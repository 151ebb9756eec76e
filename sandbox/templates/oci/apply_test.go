package oci_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/templates/oci"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// TestApplyLayerHostile: a layer a builder sandbox's guest could send is
// applied over an existing tree without ever leaving it: '..', absolute
// names, writes through a symlink the tree holds, devices and links out
// of the root are refused, and nothing lands outside the tree.
func TestApplyLayerHostile(t *testing.T) {
	type ent struct {
		name, link string
		typ        byte
	}
	tests := []struct {
		name string
		ents []ent
		rule string
	}{
		{"dot-dot", []ent{{name: "../escape", typ: tar.TypeReg}}, "path_escape"},
		{"absolute", []ent{{name: "/escape", typ: tar.TypeReg}}, "absolute_path"},
		{"through the tree's symlink", []ent{{name: "out/escape", typ: tar.TypeReg}}, "symlink_parent"},
		{"device", []ent{{name: "dev-null", typ: tar.TypeChar}}, "device"},
		{"symlink out", []ent{{name: "up", link: "../../..", typ: tar.TypeSymlink}}, ""},
		{"hard link out", []ent{{name: "hl", link: "../outside/secret", typ: tar.TypeLink}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := t.TempDir()
			outside, tree := filepath.Join(d, "outside"), filepath.Join(d, "tree")
			for _, p := range []string{outside, tree} {
				if err := os.Mkdir(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(tree, "out")); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, e := range tt.ents {
				h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644}
				if e.typ == tar.TypeReg {
					h.Size = 4
				}
				if err := tw.WriteHeader(h); err != nil {
					t.Fatal(err)
				}
				if e.typ == tar.TypeReg {
					tw.Write([]byte("evil"))
				}
			}
			tw.Close()
			_, err := oci.ApplyLayer(tree, &buf, oci.Limits{MaxBytes: 1 << 20})
			var fe *errdefs.FieldError
			if err == nil || !errors.As(err, &fe) {
				t.Fatalf("Got(ApplyLayer) = %v; want a refusal", err)
			}
			if tt.rule != "" && fe.Rule != tt.rule {
				t.Errorf("Got(rule) = %s (%v); want %s", fe.Rule, err, tt.rule)
			}
			ents, _ := os.ReadDir(outside)
			if len(ents) != 1 {
				t.Errorf("Got(outside) = %v; want the secret alone", ents)
			}
			if _, err := os.Lstat(filepath.Join(d, "escape")); err == nil {
				t.Errorf("a file landed outside the tree")
			}
		})
	}
}
