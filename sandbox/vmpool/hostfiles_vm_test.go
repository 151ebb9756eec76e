package vmpool_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// TestDefaultFilesMode: a URI without a network transport is local, any
// other remote; a setting names each host's mode or is refused.
func TestDefaultFilesMode(t *testing.T) {
	for _, tc := range []struct {
		uri  string
		want vmpool.FilesMode
	}{
		{"qemu:///system", vmpool.FilesLocal},
		{"qemu+unix:///system?socket=/tmp/lvd/sock", vmpool.FilesLocal},
		{"test:///default", vmpool.FilesLocal},
		{"qemu+tcp://127.0.0.1:16519/system", vmpool.FilesRemote},
		{"qemu+ssh://root@host-b/system", vmpool.FilesRemote},
		{"qemu+tls://host-b.example/system", vmpool.FilesRemote},
		{"qemu://host-b/system", vmpool.FilesRemote},
		{"%zz", vmpool.FilesRemote},
	} {
		if got := vmpool.DefaultFilesMode(tc.uri); got != tc.want {
			t.Errorf("Got(DefaultFilesMode(%q)) = %s; want %s", tc.uri, got, tc.want)
		}
	}
	got, err := vmpool.ParseFilesModes("STOCKADE_HOST_FILES", "qemu+tcp://a:1/system=local, qemu:///system=remote")
	if err != nil || got["qemu+tcp://a:1/system"] != vmpool.FilesLocal || got["qemu:///system"] != vmpool.FilesRemote || len(got) != 2 {
		t.Errorf("Got(ParseFilesModes) = %v, %v; want the two modes", got, err)
	}
	for _, bad := range []string{"qemu:///system", "qemu:///system=shared", "=local"} {
		if _, err := vmpool.ParseFilesModes("STOCKADE_HOST_FILES", bad); err == nil || !strings.Contains(err.Error(), "STOCKADE_HOST_FILES") {
			t.Errorf("Got(ParseFilesModes(%q)) = %v; want an error naming the setting", bad, err)
		}
	}
}

var filesActor = audit.Actor{Kind: audit.ActorSystem, ID: "test"}

// remoteService starts a VM pool whose only host is a private libvirtd on
// qemu+tcp (remote files by default), with poolDir as its pool folder ("":
// the default), and a tenant whose pool holds one 512 MiB VM.
func remoteService(t *testing.T, poolDir string) (string, *hypervisortest.Libvirtd, *vmpool.Service, tenants.Tenant) {
	t.Helper()
	dataDir, _ := needVMs(t)
	second := hypervisortest.StartLibvirtd(t)
	db := freshDB(t)
	svc := startService(t, db, vmpool.Config{URIs: []string{second.URI}, DataDir: dataDir, Logger: testLogger(t),
		ConnectTimeout: 60 * time.Second, DomainType: "qemu", BootTimeout: 5 * time.Minute, PoolDir: poolDir,
		HostFilesInterval: 2 * time.Second, ReconcileInterval: time.Second})
	tn, err := tenants.NewStore(db, nil).CreateTenantWithAdmin(ctx, filesActor, "files-a", "Remote Files", "ann@files.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SetPool(ctx, filesActor, tn.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 512, MaxVMs: 1, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	return dataDir, second, svc, tn
}

// TestRemoteHostFiles (real VM on a second libvirtd over qemu+tcp, its own
// /var/lib/libvirt): the VM boots from volumes of the installation's pool
// on that host only (kernel, initramfs, template disks and scratch disk in
// the pool's folder, nothing from the data dir); a tenant template
// hot-plugged into it comes from the pool too, a writable disk is refused;
// its scratch volume is gone once it is destroyed.
func TestRemoteHostFiles(t *testing.T) {
	dataDir, second, svc, tn := remoteService(t, "")
	poolDir := hypervisor.DefaultPoolDir(svc.InstallationID())
	// Left on the host by an older image and a crash: for GC and the sweep.
	h := hypervisortest.Connect(t, hypervisor.Config{URI: second.URI, InstallationID: svc.InstallationID()})
	junk := filepath.Join(t.TempDir(), "old")
	if err := os.WriteFile(junk, []byte("an initramfs of an older image"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("an initramfs of an older image"))
	stale := hypervisor.VolumeName(hypervisor.KindInitramfs, hex.EncodeToString(sum[:]), "")
	if _, err := h.EnsureVolume(ctx, stale, junk, hex.EncodeToString(sum[:])); err != nil {
		t.Fatal(err)
	}
	orphan := hypervisor.ScratchVolumeName("01a00000-0000-7000-8000-000000000000")
	if _, err := h.UploadVolume(ctx, orphan, junk); err != nil {
		t.Fatal(err)
	}
	vm, err := svc.Create(ctx, filesActor, tn.ID)
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	f := &fixture{svc: svc}
	// The first boot on a new host waits for 1.5 GB of templates.
	vm, phases := f.waitVM(t, tn.ID, vm.ID, vmpool.StateRunning, 10*time.Minute)
	if !phases[vmpool.PhaseDefining] {
		t.Errorf("Got(phases) = %v; want defining among them (the upload's)", phases)
	}

	paths := domainFiles(t, second.URI, vm.ID) // the domain's files, as the second host's libvirt says
	for _, p := range paths {
		if filepath.Dir(p) != poolDir || strings.HasPrefix(p, dataDir) {
			t.Errorf("Got(domain file) = %s; want it in the pool's folder %s, not the data dir", p, poolDir)
		}
	}
	scratch := filepath.Join(poolDir, hypervisor.ScratchVolumeName(vm.ID))
	if paths[len(paths)-1] != scratch {
		t.Errorf("Got(last disk) = %s; want the scratch volume %s", paths[len(paths)-1], scratch)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "scratch", svc.InstallationID(), vm.ID+".img")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Got(stat of a scratch file in the data dir) = %v; want none", err)
	}
	// The pool's folder is the second host's own /var/lib/libvirt.
	if _, err := os.Stat(filepath.Join(second.Dir, "lib", "stockade", svc.InstallationID(), hypervisor.ScratchVolumeName(vm.ID))); err != nil {
		t.Errorf("Got(stat of the scratch volume in the second host's /var/lib/libvirt) = %v; want it there", err)
	}

	// A tenant template hot-plugged: from the pool; a writable disk: refused.
	tpl := filepath.Join(t.TempDir(), "tenant-tpl.ext4")
	b := make([]byte, 4<<20)
	_, _ = rand.Read(b)
	if err := os.WriteFile(tpl, b, 0o644); err != nil {
		t.Fatal(err)
	}
	const serial = "t0123456789ab"
	if plugged, err := svc.EnsureDisk(ctx, tn.ID, vm.ID, tpl, serial, true, nil); err != nil || !plugged {
		t.Fatalf("Got(EnsureDisk(tenant template)) = %v, %v; want true, nil", plugged, err)
	}
	disks, err := svc.Disks(ctx, tn.ID, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range disks {
		if d.Serial == serial {
			found = true
			if filepath.Dir(d.Path) != poolDir || !strings.HasPrefix(filepath.Base(d.Path), hypervisor.KindTenantTemplate+"-") {
				t.Errorf("Got(tenant template disk path) = %s; want a %s volume in %s", d.Path, hypervisor.KindTenantTemplate, poolDir)
			}
		}
	}
	if !found {
		t.Errorf("Got(disks) = %+v; want serial %s", disks, serial)
	}
	if _, err := svc.EnsureDisk(ctx, tn.ID, vm.ID, tpl, "v0123456789ab", false, nil); !errors.Is(err, vmpool.ErrUnavailable) {
		t.Errorf("Got(EnsureDisk(writable) on a remote host) = %v; want ErrUnavailable", err)
	}

	// Destroyed: its scratch volume goes with it; the shared ones stay. The
	// leader's visits have deleted the older image's volume and swept the
	// orphan scratch volume (waited for: a visit every 2 s).
	if _, err := svc.Destroy(ctx, filesActor, tn.ID, vm.ID); err != nil {
		t.Fatalf("Destroy = %v", err)
	}
	names := map[string]bool{}
	deadline := time.Now().Add(2 * time.Minute) // a bound on the wait, not the assertion
	for {
		vols, err := h.Volumes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		names = map[string]bool{}
		for _, v := range vols {
			names[v.Name] = true
		}
		if (!names[stale] && !names[orphan]) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, gone := range []string{hypervisor.ScratchVolumeName(vm.ID), stale, orphan} {
		if names[gone] {
			t.Errorf("Got(volumes after Destroy) = %v; want %s gone", names, gone)
		}
	}
	for _, p := range paths[:len(paths)-1] {
		if !names[filepath.Base(p)] {
			t.Errorf("Got(volumes after Destroy) = %v; want %s kept (the current image)", names, filepath.Base(p))
		}
	}
}

// TestRemoteHostBadPoolDir: a remote host whose pool folder cannot be made
// fails the boot with a reason naming the folder (never silently), and
// leaves no domain.
func TestRemoteHostBadPoolDir(t *testing.T) {
	_, second, svc, tn := remoteService(t, "/proc/stockade-no-such-pool")
	vm, err := svc.Create(ctx, filesActor, tn.ID)
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	deadline := time.Now().Add(2 * time.Minute) // a bound on the wait, not the assertion
	for {
		got, err := svc.Store().VM(ctx, tn.ID, vm.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == vmpool.StateFailed {
			if !strings.Contains(got.StateReason, "/proc/stockade-no-such-pool") {
				t.Errorf("Got(reason) = %q; want it to name the pool folder", got.StateReason)
			}
			break
		}
		if !got.State.Active() || time.Now().After(deadline) {
			t.Fatalf("Got(vm) = %s (%s); want failed", got.State, got.StateReason)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, ok := hypervisortest.RawInfo(t, second.URI, hypervisor.DomainName(vm.ID)); ok {
		t.Errorf("Got(domain of the failed boot) = there; want none")
	}
}

// domainFiles are the kernel, initramfs and disk files of vm's domain on
// the host at uri.
func domainFiles(t *testing.T, uri, vmID string) []string {
	t.Helper()
	conn, err := libvirt.NewConnect(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dom, err := conn.LookupDomainByName(hypervisor.DomainName(vmID))
	if err != nil {
		t.Fatal(err)
	}
	desc, err := dom.GetXMLDesc(0)
	dom.Free()
	if err != nil {
		t.Fatal(err)
	}
	var def libvirtxml.Domain
	if err := def.Unmarshal(desc); err != nil {
		t.Fatal(err)
	}
	paths := []string{def.OS.Kernel, def.OS.Initrd}
	for _, d := range def.Devices.Disks {
		if d.Source != nil && d.Source.File != nil {
			paths = append(paths, d.Source.File.File)
		}
	}
	if len(paths) < 4 {
		t.Fatalf("Got(domain files) = %v; want kernel, initramfs, templates and scratch", paths)
	}
	return paths
}
