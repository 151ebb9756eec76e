package hypervisor_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
)

// saveBooted boots the busybox guest on h, waits for its READY line and
// saves it to a snapshot file QEMU's user can read.
func saveBooted(t *testing.T, h *hypervisor.Host, guest hypervisortest.Guest, dir string) hypervisor.Snapshot {
	t.Helper()
	ctx := context.Background()
	id := bootReady(t, h, guest) // snapshot_remote_test.go
	path := filepath.Join(dir, "guest.snap")
	if err := h.SaveSnapshot(ctx, id, path); err != nil {
		t.Fatalf("SaveSnapshot(%s) error = %v", id, err)
	}
	if _, err := h.Lookup(ctx, id); !errors.Is(err, hypervisor.ErrNotFound) {
		t.Fatalf("Lookup(%s) after save error = %v; want ErrNotFound (the saved domain ends)", id, err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	if _, err := hypervisor.CheckSnapshot(f, st.Size()); err != nil {
		t.Fatalf("CheckSnapshot(fresh save) error = %v", err)
	}
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		t.Fatal(err)
	}
	return hypervisor.Snapshot{Path: path, SHA256: hex.EncodeToString(sum.Sum(nil))}
}

// restoreAndTalk restores n VMs from path at once and checks each answers
// on its own channel, under its own name and UUID.
func restoreAndTalk(t *testing.T, h *hypervisor.Host, guest hypervisortest.Guest, snap hypervisor.Snapshot, n int) {
	t.Helper()
	ctx := context.Background()
	var ids []string
	uuids := map[string]string{}
	for range n {
		id := hypervisortest.NewID("restored-")
		d, err := h.Restore(ctx, guest.Spec(id, "tenant-b"), snap)
		if err != nil {
			t.Fatalf("Restore(%s) error = %v", id, err)
		}
		if other, dup := uuids[d.UUID]; dup {
			t.Fatalf("Restore(%s) UUID = %s; the same as %s's", id, d.UUID, other)
		}
		uuids[d.UUID] = id
		if d.Name != hypervisor.DomainName(id) {
			t.Errorf("Restore(%s) name = %q; want %q", id, d.Name, hypervisor.DomainName(id))
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		ch := openChannel(t, h, id, guest.Channel)
		if _, err := io.WriteString(ch, "uptime\n"); err != nil {
			t.Fatalf("write to %s: %v", id, err)
		}
		if got := readLine(t, ch, 120*time.Second); !strings.HasPrefix(got, "UPTIME ") {
			t.Fatalf("restored %s answered %q; want UPTIME <s>", id, got)
		}
		if _, err := io.WriteString(ch, "hello-"+id+"\n"); err != nil {
			t.Fatalf("write to %s: %v", id, err)
		}
		if got := readLine(t, ch, 30*time.Second); got != "hello-"+id {
			t.Fatalf("restored %s echoed %q; want %q", id, got, "hello-"+id)
		}
		info, err := h.Lookup(ctx, id)
		if err != nil {
			t.Fatalf("Lookup(%s) error = %v", id, err)
		}
		if info.State != hypervisor.StateRunning || info.TenantID != "tenant-b" {
			t.Errorf("Lookup(%s) = state %s tenant %s; want running, tenant-b", id, info.State, info.TenantID)
		}
	}
}

// TestSnapshotRestore: a saved guest restores as two VMs at once, each with
// its own name and UUID, both answering.
func TestSnapshotRestore(t *testing.T) {
	t.Parallel()
	guest := systemGuest(t)
	h := hypervisortest.Connect(t, hypervisor.Config{URI: systemURI})
	snap := saveBooted(t, h, guest, hypervisortest.VMDir(t))
	restoreAndTalk(t, h, guest, snap, 2)

	// A flipped byte, a different spec: refused before anything starts.
	ctx := context.Background()
	b, err := os.ReadFile(snap.Path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	bad := snap
	bad.Path = snap.Path + ".flipped"
	if err := os.WriteFile(bad.Path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	small := guest.Spec(hypervisortest.NewID("restored-"), "tenant-b")
	small.MemoryMiB = 256
	tests := []struct {
		name string
		spec hypervisor.DomainSpec
		snap hypervisor.Snapshot
		want error
	}{
		{"flipped byte", guest.Spec(hypervisortest.NewID("restored-"), "tenant-b"), bad, hypervisor.ErrSnapshotCorrupt},
		{"other memory size", small, snap, hypervisor.ErrSnapshotMismatch},
	}
	for _, tt := range tests {
		if _, err := h.Restore(ctx, tt.spec, tt.snap); !errors.Is(err, tt.want) {
			t.Errorf("%s: Restore error = %v; want %v", tt.name, err, tt.want)
		}
		if _, err := h.Lookup(ctx, tt.spec.ID); !errors.Is(err, hypervisor.ErrNotFound) {
			t.Errorf("%s: Lookup after a refused restore error = %v; want ErrNotFound", tt.name, err)
		}
	}
	if left, _ := filepath.Glob(snap.Path + ".restore-*"); len(left) > 0 {
		t.Errorf("clones left behind: %v", left)
	}
}

// TestSnapshotRestoreRemote: the same over qemu+tcp to a private libvirtd
// (which shares this machine's /tmp, where the file lives).
func TestSnapshotRestoreRemote(t *testing.T) {
	t.Parallel()
	guest := systemGuest(t)
	h := hypervisortest.Connect(t, hypervisor.Config{URI: hypervisortest.StartLibvirtd(t).URI})
	snap := saveBooted(t, h, guest, hypervisortest.VMDir(t))
	restoreAndTalk(t, h, guest, snap, 1)
}

func TestCheckSnapshotRefusesDamage(t *testing.T) {
	good := make([]byte, 92+8+16)
	copy(good, "LibvirtQemudSave")
	good[20] = 8 // xml length
	copy(good[92+8:], "QEVM")
	tests := []struct {
		name string
		edit func(b []byte) []byte
		want string
	}{
		{"good", func(b []byte) []byte { return b }, ""},
		{"bad magic", func(b []byte) []byte { b[0] = 'X'; return b }, "not a libvirt save file"},
		{"compressed", func(b []byte) []byte { b[28] = 1; return b }, "compressed"},
		{"truncated", func(b []byte) []byte { return b[:92+8+2] }, "truncated"},
		{"stream moved", func(b []byte) []byte { b[20] = 9; return b }, "no QEMU stream"},
	}
	for _, tt := range tests {
		b := tt.edit(append([]byte(nil), good...))
		_, err := hypervisor.CheckSnapshot(strings.NewReader(string(b)), int64(len(b)))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: CheckSnapshot error = %v; want nil", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: CheckSnapshot error = %v; want one saying %q", tt.name, err, tt.want)
		}
	}
}
