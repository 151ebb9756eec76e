package hypervisor_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
)

// second is the second libvirt host of this test binary: qemu+tcp, its own
// /var/lib/libvirt (so a pool there is not the control plane's disk).
var second hypervisortest.Second

func TestMain(m *testing.M) {
	code := m.Run()
	if err := second.Stop(); err != nil {
		println("stop the second libvirtd:", err.Error())
	}
	os.Exit(code)
}

// logCount counts the log records whose message is one of msgs.
type logCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCount) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[r.Message]++
	return nil
}
func (c *logCount) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCount) WithGroup(string) slog.Handler      { return c }
func (c *logCount) get(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[msg]
}

// storageHost connects to the second host for installation id (a fresh
// one when empty) and removes its pool at cleanup.
func storageHost(t *testing.T, id string) (*hypervisor.Host, *logCount) {
	t.Helper()
	uri := second.URI(t)
	logs := &logCount{n: map[string]int{}}
	if id == "" {
		id = hypervisortest.NewID("test-")
	}
	h := hypervisortest.Connect(t, hypervisor.Config{URI: uri, InstallationID: id, Logger: slog.New(logs)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := h.RemovePool(ctx); err != nil {
			t.Errorf("cleanup: RemovePool = %v", err)
		}
	})
	return h, logs
}

// sparseFile writes a file of size bytes with random data at the given
// offsets (1 MiB each) and holes elsewhere, and returns its path and
// SHA-256.
func sparseFile(t *testing.T, size int64, at ...int64) (string, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "file.ext4")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, off := range at {
		b := make([]byte, 1<<20)
		_, _ = rand.Read(b)
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return p, hex.EncodeToString(h.Sum(nil))
}

// rawVolume opens the pool's volume on uri directly (not through the
// driver): what an operator, or a disk fault, does to it.
func rawVolume(t *testing.T, uri, installationID, name string) (*libvirt.Connect, *libvirt.StorageVol) {
	t.Helper()
	conn, err := libvirt.NewConnect(uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	pool, err := conn.LookupStoragePoolByName(hypervisor.PoolName(installationID))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	v, err := pool.LookupStorageVolByName(name)
	if err != nil {
		t.Fatalf("volume %s: %v", name, err)
	}
	t.Cleanup(func() { v.Free() })
	return conn, v
}

// rawSHA256 downloads the volume whole and hashes it.
func rawSHA256(t *testing.T, conn *libvirt.Connect, v *libvirt.StorageVol) string {
	t.Helper()
	st, err := conn.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Free()
	if err := v.Download(st, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if err := st.RecvAll(func(_ *libvirt.Stream, b []byte) (int, error) { return h.Write(b) }); err != nil {
		t.Fatal(err)
	}
	if err := st.Finish(); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// corrupt overwrites 4 KiB of the volume at off through libvirt.
func corrupt(t *testing.T, conn *libvirt.Connect, v *libvirt.StorageVol, off uint64) {
	t.Helper()
	st, err := conn.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Free()
	junk := bytes.Repeat([]byte{0xA5}, 4096)
	if err := v.Upload(st, off, uint64(len(junk)), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Send(junk); err != nil {
		t.Fatal(err)
	}
	if err := st.Finish(); err != nil {
		t.Fatal(err)
	}
}

func volumeNamed(vols []hypervisor.Volume, name string) (hypervisor.Volume, bool) {
	for _, v := range vols {
		if v.Name == name {
			return v, true
		}
	}
	return hypervisor.Volume{}, false
}

// TestEnsureVolume (second host): a file goes to the host's pool under its
// content name, sparse (its holes not written), read back and checksummed;
// a second Ensure uploads nothing; a volume corrupted on the host is found
// by the next process (checksum) and uploaded again; no temporary volume
// stays behind.
func TestEnsureVolume(t *testing.T) {
	id := hypervisortest.NewID("test-")
	h, logs := storageHost(t, id)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	local, sum := sparseFile(t, 64<<20, 0, 40<<20)
	name := hypervisor.VolumeName(hypervisor.KindTemplate+"-busybox", sum, ".ext4")

	path, err := h.EnsureVolume(ctx, name, local, sum)
	if err != nil {
		t.Fatalf("EnsureVolume = %v", err)
	}
	if want := filepath.Join(hypervisor.DefaultPoolDir(id), name); path != want || h.VolumePath(name) != want {
		t.Errorf("Got(EnsureVolume path, VolumePath) = %s, %s; want %s", path, h.VolumePath(name), want)
	}
	vols, err := h.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := volumeNamed(vols, name)
	if !ok || len(vols) != 1 {
		t.Fatalf("Got(volumes) = %+v; want %s alone", vols, name)
	}
	if v.Capacity != 64<<20 || v.Allocation >= 16<<20 {
		t.Errorf("Got(capacity, allocation) = %d, %d; want %d and well under 16 MiB (sparse: 2 MiB of data)", v.Capacity, v.Allocation, 64<<20)
	}
	conn, raw := rawVolume(t, second.URI(t), id, name)
	if got := rawSHA256(t, conn, raw); got != sum {
		t.Errorf("Got(sha256 of the volume on the host) = %s; want %s", got, sum)
	}
	if got := logs.get("volume uploaded"); got != 1 {
		t.Errorf("Got(uploads) = %d; want 1", got)
	}

	// Idempotent.
	if again, err := h.EnsureVolume(ctx, name, local, sum); err != nil || again != path {
		t.Errorf("Got(EnsureVolume again) = %s, %v; want %s, nil", again, err, path)
	}
	if got := logs.get("volume uploaded"); got != 1 {
		t.Errorf("Got(uploads after a second Ensure) = %d; want still 1", got)
	}

	// Corrupted on the host: a new process (control plane restart) checks
	// the content before trusting it.
	corrupt(t, conn, raw, 40<<20+512<<10)
	h2, logs2 := storageHost(t, id)
	if _, err := h2.EnsureVolume(ctx, name, local, sum); err != nil {
		t.Fatalf("EnsureVolume after corruption = %v", err)
	}
	if got := logs2.get("volume checksum mismatch"); got != 1 {
		t.Errorf("Got(checksum mismatches found) = %d; want 1", got)
	}
	if got := logs2.get("volume uploaded"); got != 1 {
		t.Errorf("Got(uploads after corruption) = %d; want 1", got)
	}
	conn2, raw2 := rawVolume(t, second.URI(t), id, name)
	if got := rawSHA256(t, conn2, raw2); got != sum {
		t.Errorf("Got(sha256 after the re-upload) = %s; want %s", got, sum)
	}
	vols, err = h2.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 1 {
		t.Errorf("Got(volumes after the re-upload) = %+v; want %s alone (no .part left)", vols, name)
	}

	// A file that is not what its checksum says is refused, nothing left.
	other, _ := sparseFile(t, 8<<20, 0)
	_, err = h.EnsureVolume(ctx, hypervisor.VolumeName(hypervisor.KindKernel, sum, ""), other, sum)
	if !errors.Is(err, hypervisor.ErrChecksum) {
		t.Errorf("Got(EnsureVolume of a file with the wrong checksum) = %v; want ErrChecksum", err)
	}
	if vols, _ := h.Volumes(ctx); len(vols) != 1 {
		t.Errorf("Got(volumes after a refused upload) = %+v; want %s alone", vols, name)
	}
}

// TestEnsureVolumeRace (second host): two replicas (two connections, each
// its own process state) ensure the same file at once: both get the same
// volume, uploaded whole, and no temporary volume stays.
func TestEnsureVolumeRace(t *testing.T) {
	id := hypervisortest.NewID("test-")
	a, _ := storageHost(t, id)
	b, _ := storageHost(t, id)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	local, sum := sparseFile(t, 32<<20, 0, 8<<20, 30<<20)
	name := hypervisor.VolumeName(hypervisor.KindInitramfs, sum, "")
	var wg sync.WaitGroup
	paths, errs := make([]string, 4), make([]error, 4)
	for i, h := range []*hypervisor.Host{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = h.EnsureVolume(ctx, name, local, sum)
		}()
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != a.VolumePath(name) {
			t.Errorf("Got(EnsureVolume #%d) = %s, %v; want %s, nil", i, paths[i], errs[i], a.VolumePath(name))
		}
	}
	vols, err := a.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 1 || vols[0].Name != name {
		t.Errorf("Got(volumes) = %+v; want %s alone", vols, name)
	}
	conn, raw := rawVolume(t, second.URI(t), id, name)
	if got := rawSHA256(t, conn, raw); got != sum {
		t.Errorf("Got(sha256 on the host) = %s; want %s", got, sum)
	}
}

// TestStorageGC (second host): GC deletes the shared volumes nobody keeps
// and no domain uses; a version a defined domain boots from, the kept
// version, a scratch disk and a snapshot file stay.
func TestStorageGC(t *testing.T) {
	id := hypervisortest.NewID("test-")
	h, _ := storageHost(t, id)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ensure := func(kind string) string {
		t.Helper()
		local, sum := sparseFile(t, 4<<20, 0)
		name := hypervisor.VolumeName(kind, sum, "")
		if _, err := h.EnsureVolume(ctx, name, local, sum); err != nil {
			t.Fatalf("EnsureVolume(%s) = %v", kind, err)
		}
		return name
	}
	old, used, current := ensure(hypervisor.KindInitramfs), ensure(hypervisor.KindKernel), ensure(hypervisor.KindInitramfs)
	scratchLocal, _ := sparseFile(t, 4<<20, 0)
	scratch := hypervisor.ScratchVolumeName("vm1")
	if _, err := h.UploadVolume(ctx, scratch, scratchLocal); err != nil {
		t.Fatalf("UploadVolume = %v", err)
	}
	if _, err := h.UploadVolume(ctx, scratch, scratchLocal); !errors.Is(err, hypervisor.ErrConflict) {
		t.Errorf("Got(UploadVolume of an existing name) = %v; want ErrConflict", err)
	}
	snap := "snapshot-vm1.save"
	if _, err := h.UploadVolume(ctx, snap, scratchLocal); err != nil {
		t.Fatalf("UploadVolume = %v", err)
	}
	// A domain (not started) booting from the "used" kernel.
	dom := hypervisortest.NewID("gc-")
	hypervisortest.DefineRaw(t, second.URI(t), fmt.Sprintf(`<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory>
<os><type arch='x86_64'>hvm</type><kernel>%s</kernel></os></domain>`, dom, h.VolumePath(used)))

	deleted, err := h.GC(ctx, func(name string) bool { return name == current })
	if err != nil {
		t.Fatalf("GC = %v", err)
	}
	if len(deleted) != 1 || deleted[0] != old {
		t.Errorf("Got(GC deleted) = %v; want [%s]", deleted, old)
	}
	vols, err := h.Volumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range vols {
		names = append(names, v.Name)
	}
	for _, want := range []string{used, current, scratch, snap} {
		if _, ok := volumeNamed(vols, want); !ok {
			t.Errorf("Got(volumes after GC) = %v; want %s kept", names, want)
		}
	}
}

// TestStoragePoolBadDir: a pool folder libvirt cannot make is a clear
// error naming it, and no pool stays defined; a relative one is refused
// at Connect.
func TestStoragePoolBadDir(t *testing.T) {
	uri := second.URI(t)
	id := hypervisortest.NewID("test-")
	h := hypervisortest.Connect(t, hypervisor.Config{URI: uri, InstallationID: id, PoolDir: "/proc/stockade-cannot-be/" + id})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := h.EnsurePool(ctx)
	if !errors.Is(err, hypervisor.ErrInvalid) || !strings.Contains(err.Error(), "/proc/stockade-cannot-be/"+id) {
		t.Errorf("Got(EnsurePool with an impossible folder) = %v; want ErrInvalid naming the folder", err)
	}
	conn, err := libvirt.NewConnect(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if p, err := conn.LookupStoragePoolByName(hypervisor.PoolName(id)); err == nil {
		p.Free()
		t.Errorf("Got(pool %s after the failed EnsurePool) = defined; want none", hypervisor.PoolName(id))
	}
	_, err = hypervisor.Connect(ctx, hypervisor.Config{URI: uri, InstallationID: id, PoolDir: "relative/dir"})
	if !errors.Is(err, hypervisor.ErrInvalid) {
		t.Errorf("Got(Connect with a relative pool folder) = %v; want ErrInvalid", err)
	}
}

// TestEnsurePoolRace (second host): several replicas making the same new
// pool at once all succeed, and the pool runs.
func TestEnsurePoolRace(t *testing.T) {
	for round := 0; round < 3; round++ {
		id := hypervisortest.NewID("test-")
		hosts := make([]*hypervisor.Host, 4)
		for i := range hosts {
			hosts[i], _ = storageHost(t, id)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		errs := make([]error, len(hosts))
		var wg sync.WaitGroup
		for i, h := range hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = h.EnsurePool(ctx)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("Got(EnsurePool #%d of 4 at once) = %v; want nil", i, err)
			}
		}
		if _, err := hosts[0].Volumes(ctx); err != nil {
			t.Errorf("Got(Volumes after the race) = %v; want the pool running", err)
		}
		cancel()
	}
}
