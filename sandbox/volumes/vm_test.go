package volumes_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/sandbox/volumes"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// lateHotplug is the pools' hot-plug once the pools exist (they are built
// with the sandbox service, which needs the volume service first).
type lateHotplug struct {
	p atomic.Pointer[vmpool.Service]
}

func (l *lateHotplug) AttachDisk(ctx context.Context, tenantID, vmID string, d volumes.Disk) error {
	return volumes.PoolHotplug(l.p.Load()).AttachDisk(ctx, tenantID, vmID, d)
}

func (l *lateHotplug) DetachDisk(ctx context.Context, tenantID, vmID string, d volumes.Disk) error {
	return volumes.PoolHotplug(l.p.Load()).DetachDisk(ctx, tenantID, vmID, d)
}

func sh(t *testing.T, sbx *sandbox.Service, tenantID, id, script string) (string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := sbx.Exec(ctx, actor, tenantID, id, sandbox.ExecRequest{Cmd: []string{"sh", "-c", script}, TimeoutSeconds: 120}, &out, &errOut)
	if err != nil {
		t.Fatalf("Exec(%q) = %v", script, err)
	}
	return out.String() + errOut.String(), r.ExitCode
}

// TestVolumesOnVMs, on real VMs: a volume written by one sandbox is read by
// the next after the first is destroyed (the disk hot-plugged into the VM
// by its serial, mounted, bound at the asked path, owned by the sandbox
// user, detached in between); a second read-write mount is refused while
// the first lives, and so is deleting it; read-only mounts by two
// sandboxes work and cannot write; another tenant cannot name it; a bad
// path is refused before anything is written.
func TestVolumesOnVMs(t *testing.T) {
	dataDir := sandboxtest.NeedVMs(t)
	db := dbtest.SQLite(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dir, err := os.MkdirTemp("/var/tmp", "vol-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hp := &lateHotplug{}
	vols, err := volumes.New(db, volumes.Config{DataDir: dir, InstallationID: "vol-vm-test", Logger: log, Hotplug: hp})
	if err != nil {
		t.Fatal(err)
	}
	vms, sbx := sandboxtest.Start(t, db, vmpool.Config{DataDir: dataDir, Logger: log},
		sandbox.Config{DefaultTemplate: image.TemplateBusybox, Volumes: vols})
	hp.p.Store(vms)
	acme, other := newTenant(t, db, "vol-acme"), newTenant(t, db, "vol-other")
	ctx := context.Background()
	if _, err := vols.Create(ctx, actor, acme.ID, "cache", 1); err != nil {
		t.Fatal(err)
	}
	create := func(tenantID string, reqs ...volumes.Request) (sandbox.Sandbox, error) {
		cctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		defer cancel()
		return sbx.Create(cctx, actor, tenantID, sandbox.Spec{Volumes: reqs})
	}
	destroy := func(id string) {
		if _, err := sbx.Destroy(ctx, actor, acme.ID, id); err != nil {
			t.Fatal(err)
		}
	}
	rw := volumes.Request{Name: "cache", Path: "/workspace/cache"}
	ro := volumes.Request{Name: "cache", Path: "/data", ReadOnly: true}

	first, err := create(acme.ID, rw)
	if err != nil {
		t.Fatal(err)
	}
	if out, code := sh(t, sbx, acme.ID, first.ID, "echo kept > /workspace/cache/note && stat -c %u /workspace/cache && grep ' /workspace/cache ' /proc/mounts"); code != 0 ||
		!strings.HasPrefix(out, "1000\n") || !strings.Contains(out, "nosuid,nodev") {
		t.Errorf("Got(write to the volume) = %q, exit %d; want it written, the root the sandbox user's (1000), mounted nosuid,nodev", out, code)
	}

	// While the first lives: a second read-write mount and a delete are
	// refused, with nothing written.
	before := countSandboxes(t, sbx, acme.ID)
	if _, err := create(acme.ID, rw); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Got(second read-write mount) = %v; want conflict", err)
	}
	if err := vols.Delete(ctx, actor, acme.ID, "cache"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Got(delete while attached) = %v; want conflict", err)
	}
	for _, c := range []struct {
		name string
		req  volumes.Request
	}{{"bad path", volumes.Request{Name: "cache", Path: "/proc/x"}}, {"unknown", volumes.Request{Name: "nope", Path: "/x"}}} {
		if _, err := create(acme.ID, c.req); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: Got(create) = %v; want invalid", c.name, err)
		}
	}
	// Another tenant cannot name it.
	if _, err := create(other.ID, rw); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "no volume") {
		t.Errorf("Got(create in another tenant naming it) = %v; want unknown volume", err)
	}
	if n := countSandboxes(t, sbx, acme.ID); n != before {
		t.Errorf("Got(sandboxes after the refusals) = %d; want %d (nothing written)", n, before)
	}

	destroy(first.ID)
	if st, err := vols.Get(ctx, acme.ID, "cache"); err != nil || len(st.Attachments)+len(st.Mounts) != 0 {
		t.Errorf("Got(volume after its user ended) = %+v, %v; want detached", st, err)
	}

	// The next sandbox reads what the first wrote; two read-only users.
	r1, err := create(acme.ID, ro)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := create(acme.ID, ro)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{r1.ID, r2.ID} {
		if out, code := sh(t, sbx, acme.ID, id, "cat /data/note"); code != 0 || out != "kept\n" {
			t.Errorf("Got(read in %s) = %q, exit %d; want kept", id, out, code)
		}
		if out, code := sh(t, sbx, acme.ID, id, "echo x > /data/other"); code == 0 {
			t.Errorf("Got(write to a read-only mount in %s) = %q, exit 0; want refused", id, out)
		}
	}
	if _, err := create(acme.ID, rw); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Got(read-write mount with readers) = %v; want conflict", err)
	}
	destroy(r1.ID)
	destroy(r2.ID)
	if err := vols.Delete(ctx, actor, acme.ID, "cache"); err != nil {
		t.Errorf("Got(delete once unused) = %v; want it deleted", err)
	}
}

func countSandboxes(t *testing.T, sbx *sandbox.Service, tenantID string) int {
	t.Helper()
	list, err := sbx.List(context.Background(), tenantID)
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}
