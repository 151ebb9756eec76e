package hypervisor_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
)

// TestSnapshotVolumeRemote (real VMs on the second libvirtd, qemu+tcp, its
// own /var/lib/libvirt): a guest saved into the host's pool is a volume
// there that this process cannot see on its own disk; two VMs restore from
// it at once and answer; no clone is left; a flipped byte in the saved
// domain XML and a spec of another size are refused with nothing started
// and no clone left.
func TestSnapshotVolumeRemote(t *testing.T) {
	t.Parallel()
	guest := systemGuest(t)
	h, _ := storageHost(t, "")
	ctx := context.Background()
	id := bootReady(t, h, guest)
	vs, err := h.SaveSnapshotVolume(ctx, id, "snapshot-test.snap")
	if err != nil {
		t.Fatalf("SaveSnapshotVolume(%s) error = %v", id, err)
	}
	if _, err := h.Lookup(ctx, id); !errors.Is(err, hypervisor.ErrNotFound) {
		t.Fatalf("Lookup(%s) after save error = %v; want ErrNotFound (the saved domain ends)", id, err)
	}
	if _, err := h.SaveSnapshotVolume(ctx, id, "snapshot-test.snap"); !errors.Is(err, hypervisor.ErrConflict) {
		t.Errorf("SaveSnapshotVolume onto an existing volume error = %v; want ErrConflict", err)
	}
	path := h.VolumePath(vs.Volume)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Got(stat %s on this machine) = %v; want not there (the pool folder must be the host's own)", path, err)
	}
	if vs.Size < 1<<20 || vs.HeadLen <= 92 || vs.HeadLen > vs.Size || len(vs.HeadSHA256) != 64 {
		t.Fatalf("Got(saved volume) = %+v; want a size, a head and its sum", vs)
	}
	if got := volumeSize(t, h, vs.Volume); got != uint64(vs.Size) {
		t.Errorf("Got(volume %s capacity) = %d; want %d", vs.Volume, got, vs.Size)
	}
	snap := hypervisor.Snapshot{Path: path, Volume: &vs}
	restoreAndTalk(t, h, guest, snap, 2)
	noClones(t, h)

	// A flipped byte in the saved domain XML (the volume's head).
	conn, err := libvirt.NewConnect(second.URI(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pool, err := conn.LookupStoragePoolByName(hypervisor.PoolName(h.InstallationID()))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	vol, err := pool.LookupStorageVolByName(vs.Volume)
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Free()
	orig := readAt(t, conn, vol, 200, 1)
	writeAt(t, conn, vol, 200, []byte{orig[0] ^ 0x20})
	small := guest.Spec(hypervisortest.NewID("restored-"), "tenant-b")
	small.MemoryMiB = 256
	tests := []struct {
		name string
		spec hypervisor.DomainSpec
		want error
	}{
		{"flipped byte in the head", guest.Spec(hypervisortest.NewID("restored-"), "tenant-b"), hypervisor.ErrSnapshotCorrupt},
	}
	for _, tt := range tests {
		if _, err := h.Restore(ctx, tt.spec, snap); !errors.Is(err, tt.want) {
			t.Errorf("%s: Restore error = %v; want %v", tt.name, err, tt.want)
		}
		if _, err := h.Lookup(ctx, tt.spec.ID); !errors.Is(err, hypervisor.ErrNotFound) {
			t.Errorf("%s: Lookup after a refused restore error = %v; want ErrNotFound", tt.name, err)
		}
	}
	// A head of the right bytes but another memory size in the spec.
	writeAt(t, conn, vol, 200, orig)
	if _, err := h.Restore(ctx, small, snap); !errors.Is(err, hypervisor.ErrSnapshotMismatch) {
		t.Errorf("other memory size: Restore error = %v; want ErrSnapshotMismatch", err)
	}
	noClones(t, h)
}

// bootReady boots the busybox guest on h and waits for its READY line.
func bootReady(t *testing.T, h *hypervisor.Host, guest hypervisortest.Guest) string {
	t.Helper()
	id := hypervisortest.NewID("snapsrc-")
	if _, err := h.Create(context.Background(), guest.Spec(id, "tenant-src")); err != nil {
		t.Fatalf("Create(%s) error = %v", id, err)
	}
	ch := openChannel(t, h, id, guest.Channel)
	if got := readLine(t, ch, 120*time.Second); !strings.HasPrefix(got, "READY ") {
		t.Fatalf("first line = %q; want READY <uptime>", got)
	}
	ch.Close()
	return id
}

func volumeSize(t *testing.T, h *hypervisor.Host, name string) uint64 {
	t.Helper()
	vols, err := h.Volumes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.Name == name {
			return v.Capacity
		}
	}
	t.Fatalf("Got(volumes) = %v; want %s among them", vols, name)
	return 0
}

func noClones(t *testing.T, h *hypervisor.Host) {
	t.Helper()
	vols, err := h.Volumes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if strings.Contains(v.Name, hypervisor.RestoreSuffix) {
			t.Errorf("Got(volume %s) left behind; want every restore clone deleted", v.Name)
		}
	}
}

// writeAt overwrites bytes of vol at off through libvirt.
func writeAt(t *testing.T, conn *libvirt.Connect, vol *libvirt.StorageVol, off uint64, b []byte) {
	t.Helper()
	st, err := conn.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Free()
	if err := vol.Upload(st, off, uint64(len(b)), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Send(b); err != nil {
		t.Fatal(err)
	}
	if err := st.Finish(); err != nil {
		t.Fatal(err)
	}
}

// readAt downloads n bytes of vol at off through libvirt.
func readAt(t *testing.T, conn *libvirt.Connect, vol *libvirt.StorageVol, off, n uint64) []byte {
	t.Helper()
	st, err := conn.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Free()
	if err := vol.Download(st, off, n, 0); err != nil {
		t.Fatal(err)
	}
	var out []byte
	if err := st.RecvAll(func(_ *libvirt.Stream, b []byte) (int, error) { out = append(out, b...); return len(b), nil }); err != nil {
		t.Fatal(err)
	}
	if err := st.Finish(); err != nil {
		t.Fatal(err)
	}
	return out
}
