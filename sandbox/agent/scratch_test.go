package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stockade-dev/stockade/hypervisor/image"
)

// TestXFSLabel: the agent finds the scratch disk the host makes (XFS, by
// its label), and takes neither a template's ext4 disk nor an empty one
// for it.
func TestXFSLabel(t *testing.T) {
	for _, tool := range []string{"mkfs.xfs", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not installed (scripts/deps.sh installs it)", tool)
			}
			t.Skipf("%s not installed", tool)
		}
	}
	dir := t.TempDir()
	scratch := filepath.Join(dir, "scratch.img")
	if err := image.CreateScratch(context.Background(), scratch, image.MinScratchMiB); err != nil {
		t.Fatal(err)
	}
	ext4 := filepath.Join(dir, "template.img")
	if err := os.WriteFile(ext4, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(ext4, 8<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", ScratchLabel, ext4).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	empty := filepath.Join(dir, "empty.img")
	if err := os.WriteFile(empty, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, path, want string }{
		{"the host's scratch disk", scratch, ScratchLabel},
		{"ext4 with the same label", ext4, ""},
		{"zeros", empty, ""},
	}
	for _, tt := range tests {
		if got, err := xfsLabel(tt.path); err != nil || got != tt.want {
			t.Errorf("Got(xfsLabel(%s)) = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	if ScratchLabel != image.ScratchLabel {
		t.Errorf("Got(agent ScratchLabel) = %q; want the host's %q", ScratchLabel, image.ScratchLabel)
	}
}
