package vmpool_test

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"libvirt.org/go/libvirt"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
)

var snapVolRe = regexp.MustCompile(`^snapshot-vm-512m-1c-t[0-9a-f]{16}-[0-9a-f]{12}\.(snap|json)$`)

// TestRemoteSnapshotBoot (real VMs on a second libvirtd over qemu+tcp, its
// own /var/lib/libvirt): the first VM of tenant A cold boots and the
// snapshot is built on the host, in its pool (nothing in the data dir);
// the next VM is restored from it, boots from pool files only, runs a
// sandbox (its /workspace on XFS: the fresh scratch volume hot-plugged
// after the restore; the snapshot has none), and no restore clone is left; tenant B on the same host never
// restores from A's snapshot: it cold boots and then restores from its
// own; a flipped byte in A's snapshot is a cold boot with the reason
// logged; the leader's sweep deletes a deleted tenant's snapshot, an old
// key's and an orphan clone.
func TestRemoteSnapshotBoot(t *testing.T) {
	dataDir, _ := needVMs(t)
	second := hypervisortest.StartLibvirtd(t)
	db := freshDB(t)
	ts := tenants.NewStore(db, nil)
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(&tee{logs, tbWriter{t}}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	svc := startService(t, db, vmpool.Config{URIs: []string{second.URI}, DataDir: dataDir, Logger: log,
		ConnectTimeout: 60 * time.Second, DomainType: "qemu", BootTimeout: 5 * time.Minute, Snapshots: true,
		HostFilesInterval: 2 * time.Second, ReconcileInterval: time.Second})
	var envs []*snapEnv
	for _, slug := range []string{"rsnap-a", "rsnap-b"} {
		tn, err := ts.CreateTenant(ctx, filesActor, slug, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.SetPool(ctx, filesActor, tn.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 512, MaxVMs: 1, RecycleAfterHours: 24}); err != nil {
			t.Fatal(err)
		}
		envs = append(envs, &snapEnv{svc: svc, tn: tn, logs: logs})
	}
	a, b := envs[0], envs[1]
	h := hypervisortest.Connect(t, hypervisor.Config{URI: second.URI, InstallationID: svc.InstallationID()})
	poolDir := hypervisor.DefaultPoolDir(svc.InstallationID())

	// The first boot on a new host waits for the image's upload.
	first := a.start(t, 1)
	if got := first[0].BootKind; got != "cold: none" {
		t.Errorf("Got(first vm boot kind) = %q; want %q", got, "cold: none")
	}
	a.destroy(t, first...)
	a.waitBuilds(t, 1)
	snaps := snapshotVolumes(t, h)
	if len(snaps) != 2 {
		t.Fatalf("Got(snapshot volumes on the host) = %v; want a .snap and its .json", snaps)
	}
	if local, _ := filepath.Glob(filepath.Join(dataDir, "hosts", svc.InstallationID(), "snapshot-*")); len(local) > 0 {
		t.Errorf("Got(snapshot files in the data dir) = %v; want none (the host's pool has it)", local)
	}

	restored := a.start(t, 1)
	if got := restored[0].BootKind; got != vmpool.BootRestored {
		t.Fatalf("Got(second vm boot kind) = %q; want %q", got, vmpool.BootRestored)
	}
	for _, p := range domainFiles(t, second.URI, restored[0].ID) {
		if filepath.Dir(p) != poolDir {
			t.Errorf("Got(restored vm file %s) outside the pool folder %s", p, poolDir)
		}
	}
	a.runIn(t, restored[0])
	a.destroy(t, restored...)
	noRestoreClones(t, h)

	// Tenant B: its own slot, never A's snapshot.
	bFirst := b.start(t, 1)
	if got := bFirst[0].BootKind; got != "cold: none" {
		t.Errorf("Got(tenant B's first vm boot kind) = %q; want %q (never tenant A's snapshot)", got, "cold: none")
	}
	if got := svc.SnapshotCounts().Restores; got != 1 {
		t.Errorf("Got(restores after tenant B's first vm) = %d; want 1 (tenant A's only)", got)
	}
	b.destroy(t, bFirst...)
	b.waitBuilds(t, 2)
	bNext := b.start(t, 1)
	if got := bNext[0].BootKind; got != vmpool.BootRestored {
		t.Errorf("Got(tenant B's second vm boot kind) = %q; want %q (from its own snapshot)", got, vmpool.BootRestored)
	}
	b.destroy(t, bNext...)

	// Corrupt: a flipped byte in the saved domain XML of A's snapshot.
	aSnap := ""
	for _, n := range snaps {
		if strings.HasSuffix(n, ".snap") {
			aSnap = n
		}
	}
	flipVolumeByte(t, second.URI, svc.InstallationID(), aSnap, 200)
	corrupt := a.start(t, 1)
	if got := corrupt[0].BootKind; !strings.HasPrefix(got, "cold: corrupt: ") {
		t.Errorf("Got(boot kind from a corrupt snapshot) = %q; want cold: corrupt: ...", got)
	}
	if !strings.Contains(logs.String(), "reason=corrupt") {
		t.Errorf("log has no restore failure with reason=corrupt")
	}
	a.destroy(t, corrupt...)
	noRestoreClones(t, h)

	// The sweep: a deleted tenant's snapshot, an old key's, an orphan clone.
	gone := "snapshot-vm-512m-1c-t00000000deadbeef-0123456789ab"
	old := strings.TrimSuffix(aSnap, ".snap")[:len(aSnap)-len(".snap")-12] + "ba5eba11ba5e"
	side := func(tenant string) []byte {
		b, _ := json.Marshal(map[string]any{"key": "x", "volume": "v.snap", "inputs": map[string]any{"tenant": tenant, "memory_mib": 512, "vcpus": 1}})
		return b
	}
	junk := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(junk, []byte("not a snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	orphan := aSnap + hypervisor.RestoreSuffix + uuid.NewString()
	for _, v := range []struct {
		name string
		b    []byte
	}{{gone + ".json", side(uuid.NewString())}, {old + ".json", side(a.tn.ID)}} {
		if err := h.WriteVolume(ctx, v.name, v.b); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{gone + ".snap", old + ".snap", orphan} {
		if _, err := h.UploadVolume(ctx, n, junk); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 2*time.Minute, "the sweep of the host's snapshots", func() bool {
		vols, err := h.Volumes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vols {
			if strings.HasPrefix(v.Name, gone) || strings.HasPrefix(v.Name, old) || v.Name == orphan {
				return false
			}
		}
		return true
	})
	if got := snapshotVolumes(t, h); len(got) < 2 {
		t.Errorf("Got(snapshot volumes after the sweep) = %v; want the current ones kept", got)
	}
}

// snapshotVolumes are the snapshot volumes (no clones) on the host.
func snapshotVolumes(t *testing.T, h *hypervisor.Host) []string {
	t.Helper()
	vols, err := h.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range vols {
		if snapVolRe.MatchString(v.Name) {
			out = append(out, v.Name)
		}
	}
	return out
}

func noRestoreClones(t *testing.T, h *hypervisor.Host) {
	t.Helper()
	vols, err := h.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if strings.Contains(v.Name, hypervisor.RestoreSuffix) {
			t.Errorf("Got(volume %s) left behind; want every restore clone deleted", v.Name)
		}
	}
}

// flipVolumeByte flips a byte of the pool volume name at off, through
// libvirt.
func flipVolumeByte(t *testing.T, uri, installationID, name string, off uint64) {
	t.Helper()
	conn, err := libvirt.NewConnect(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pool, err := conn.LookupStoragePoolByName(hypervisor.PoolName(installationID))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	vol, err := pool.LookupStorageVolByName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Free()
	st, err := conn.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := vol.Download(st, off, 1, 0); err != nil {
		t.Fatal(err)
	}
	var b []byte
	if err := st.RecvAll(func(_ *libvirt.Stream, p []byte) (int, error) { b = append(b, p...); return len(p), nil }); err != nil {
		t.Fatal(err)
	}
	st.Finish()
	st.Free()
	if len(b) != 1 {
		t.Fatalf("read %d bytes at %d of %s; want 1", len(b), off, name)
	}
	st, err = conn.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Free()
	if err := vol.Upload(st, off, 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Send([]byte{b[0] ^ 0x20}); err != nil {
		t.Fatal(err)
	}
	if err := st.Finish(); err != nil {
		t.Fatal(err)
	}
}
