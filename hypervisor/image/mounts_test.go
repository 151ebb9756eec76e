package image

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A tree with /proc left mounted in it (an interrupted debootstrap) is
// unmounted before it is copied or removed.
func TestUnmountUnder(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI and not root: mounting /proc needs root")
		}
		t.Skip("mounting /proc needs root")
	}
	dir := t.TempDir()
	proc := filepath.Join(dir, "root", "proc")
	if err := os.MkdirAll(proc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("proc", proc, "proc", 0, ""); err != nil {
		t.Fatalf("mount proc: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(proc, unix.MNT_DETACH) })
	got, err := mountsUnder(dir)
	if err != nil || len(got) != 1 || got[0] != proc {
		t.Fatalf("Got(mountsUnder) = %v, %v; want [%s]", got, err, proc)
	}
	if err := unmountUnder(filepath.Join(dir, "root")); err != nil {
		t.Fatalf("Got(unmountUnder) = %v; want nil", err)
	}
	if got, _ := mountsUnder(dir); len(got) != 0 {
		t.Fatalf("Got(mounts after unmountUnder) = %v; want none", got)
	}
	if _, err := os.Stat(filepath.Join(proc, "kmsg")); err == nil {
		t.Fatal("Got(/proc/kmsg in the tree after unmountUnder) = present; want gone")
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`} {
		if got := unescapeMount(in); got != want {
			t.Errorf("Got(unescapeMount(%q)) = %q; want %q", in, got, want)
		}
	}
}
