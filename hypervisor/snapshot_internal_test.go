package hypervisor

import (
	"errors"
	"strings"
	"testing"
)

// TestRestoredXMLDisks: a restored domain keeps the saved read-only disks
// and gets the spec's own file for a writable disk at the saved target; a
// spec whose read-only disks or targets differ is a mismatch.
func TestRestoredXMLDisks(t *testing.T) {
	spec := func(id, scratch, tpl string) DomainSpec {
		return DomainSpec{ID: id, TenantID: "t", InstallationID: "i", Type: "qemu", VCPUs: 1, MemoryMiB: 512,
			Kernel: "/k/vmlinux", Initramfs: "/k/initramfs", Cmdline: "console=ttyS0", ChannelName: "org.stockade.agent.0",
			Disks: []Disk{{Path: tpl, Target: "vdb", ReadOnly: true}, {Path: scratch, Target: "vdc", Discard: true}}}
	}
	saved, err := BuildDomain(spec("snapshot-1", "/d/snapshot.scratch.tmp-1", "/t/busybox.ext4"))
	if err != nil {
		t.Fatal(err)
	}
	saved.Description = snapshotRoom
	x, err := saved.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	hdr := SnapshotHeader{XMLLen: int64(len(x)) + 1}

	want, err := BuildDomain(spec("vm-2", "/d/scratch/vm-2.img", "/t/busybox.ext4"))
	if err != nil {
		t.Fatal(err)
	}
	if err := matchSnapshot(saved, want); err != nil {
		t.Fatalf("matchSnapshot(another scratch file) = %v; want nil", err)
	}
	out, err := restoredXML(saved, want, spec("vm-2", "/d/scratch/vm-2.img", "/t/busybox.ext4"), hdr)
	if err != nil {
		t.Fatalf("restoredXML = %v", err)
	}
	got := string(out)
	for _, s := range []string{"/d/scratch/vm-2.img", "/t/busybox.ext4", DomainName("vm-2")} {
		if !strings.Contains(got, s) {
			t.Errorf("Got(restored xml) has no %q", s)
		}
	}
	if strings.Contains(got, "snapshot.scratch") {
		t.Errorf("Got(restored xml) still names the snapshot VM's scratch disk")
	}

	for _, tt := range []struct {
		name string
		spec DomainSpec
	}{
		{"other template file", spec("vm-3", "/d/scratch/vm-3.img", "/t/other.ext4")},
		{"no scratch disk", func() DomainSpec { s := spec("vm-4", "", "/t/busybox.ext4"); s.Disks = s.Disks[:1]; return s }()},
	} {
		w, err := BuildDomain(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := matchSnapshot(saved, w); !errors.Is(err, ErrSnapshotMismatch) {
			t.Errorf("%s: matchSnapshot = %v; want ErrSnapshotMismatch", tt.name, err)
		}
	}
}
