package volumes_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/volumes"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

var actor = audit.Actor{Kind: audit.ActorUser, ID: "u-1", Name: "dev@example.test"}

func newTenant(t *testing.T, db *gorm.DB, slug string) tenants.Tenant {
	t.Helper()
	tn, err := tenants.NewStore(db, nil).CreateTenant(context.Background(), audit.Actor{Kind: audit.ActorSystem, ID: "test"}, slug, "")
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

// newVM records a running VM of the tenant (no domain: the disk calls go
// to the recording hotplug).
func newVM(t *testing.T, db *gorm.DB, tenantID string) string {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := db.Exec(`INSERT INTO hosts (uri, health, first_seen_at, updated_at) VALUES ('test:///volumes', 'ok', ?, ?) ON CONFLICT DO NOTHING`, now, now).Error; err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("vm-%d", time.Now().UnixNano())
	if err := db.Exec(`INSERT INTO vms (id, tenant_id, host_uri, state, phase, phase_at, vcpus, memory_mib, created_at) VALUES (?, ?, 'test:///volumes', 'running', 'running', ?, 1, 512, ?)`,
		id, tenantID, now, now).Error; err != nil {
		t.Fatal(err)
	}
	return id
}

// disks records what the service asked the hypervisor and the guest to do.
type disks struct {
	mu  sync.Mutex
	ops []string
}

func (d *disks) add(s string) {
	d.mu.Lock()
	d.ops = append(d.ops, s)
	d.mu.Unlock()
}

func (d *disks) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.ops
	d.ops = nil
	return out
}

func (d *disks) AttachDisk(_ context.Context, _, vmID string, k volumes.Disk) error {
	d.add(fmt.Sprintf("attach %s ro=%v %s", k.Serial, k.ReadOnly, vmID))
	return nil
}

func (d *disks) DetachDisk(_ context.Context, _, vmID string, k volumes.Disk) error {
	d.add(fmt.Sprintf("detach %s %s", k.Serial, vmID))
	return nil
}

func (d *disks) MountVolume(_ context.Context, id string, ro bool) error {
	d.add(fmt.Sprintf("mount %s ro=%v", id, ro))
	return nil
}

func (d *disks) UnmountVolume(_ context.Context, id string) error {
	d.add("unmount " + id)
	return nil
}

func newService(t *testing.T, db *gorm.DB, hp volumes.Hotplug) (*volumes.Service, string) {
	t.Helper()
	dir := t.TempDir()
	svc, err := volumes.New(db, volumes.Config{DataDir: dir, InstallationID: "inst-test", Hotplug: hp})
	if err != nil {
		t.Fatal(err)
	}
	return svc, dir
}

func images(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "volumes", "*", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func count(t *testing.T, db *gorm.DB, table, tenantID string) int64 {
	t.Helper()
	var n int64
	if err := db.Table(table).Where("tenant_id = ?", tenantID).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// TestVolumeCRUD: create, resize and delete on SQLite and PostgreSQL, and
// every bad input a clear error with nothing written (no row, no image).
func TestVolumeCRUD(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			tn := newTenant(t, d.DB, "vol-crud-"+d.Name)
			q := tenants.DefaultQuota()
			q.MaxVolumeGiB = 5
			if _, err := tenants.NewStore(d.DB, nil).SetQuota(ctx, actor, tn.ID, q); err != nil {
				t.Fatal(err)
			}
			svc, dir := newService(t, d.DB, &disks{})
			v, err := svc.Create(ctx, actor, tn.ID, "cache", 2)
			if err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(images(t, dir)[0]); err != nil || fi.Size() != 2<<30 {
				t.Fatalf("Got(image of 2 GiB) = %v, %v; want a 2 GiB file", fi, err)
			}
			for _, c := range []struct {
				name, vol string
				size      int
				want      error
				field     string
			}{
				{"name clash", "cache", 1, errdefs.ErrConflict, ""},
				{"over quota", "big", 4, errdefs.ErrQuota, ""},
				{"bad name", "Bad Name", 1, errdefs.ErrInvalid, "name"},
				{"zero size", "zero", 0, errdefs.ErrInvalid, "size_gib"},
				{"huge size", "huge", volumes.MaxSizeGiB + 1, errdefs.ErrInvalid, "size_gib"},
			} {
				_, err := svc.Create(ctx, actor, tn.ID, c.vol, c.size)
				if !errors.Is(err, c.want) {
					t.Errorf("%s: Got(Create) = %v; want %v", c.name, err, c.want)
				}
				var fe *errdefs.FieldError
				if c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field) {
					t.Errorf("%s: Got(field) = %v; want %s", c.name, err, c.field)
				}
			}
			if n := count(t, d.DB, "volumes", tn.ID); n != 1 {
				t.Errorf("Got(volume rows) = %d; want 1", n)
			}
			if got := images(t, dir); len(got) != 1 {
				t.Errorf("Got(images) = %v; want the one", got)
			}

			if _, err := svc.Resize(ctx, actor, tn.ID, "cache", 1); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Got(Resize smaller) = %v; want invalid", err)
			}
			if _, err := svc.Resize(ctx, actor, tn.ID, "cache", 6); !errors.Is(err, errdefs.ErrQuota) {
				t.Errorf("Got(Resize over quota) = %v; want quota", err)
			}
			got, err := svc.Resize(ctx, actor, tn.ID, "cache", 3)
			if err != nil || got.SizeGiB != 3 {
				t.Fatalf("Got(Resize to 3) = %+v, %v; want 3 GiB", got, err)
			}
			if fi, _ := os.Stat(images(t, dir)[0]); fi == nil || fi.Size() != 3<<30 {
				t.Errorf("Got(image after resize) = %v; want 3 GiB", fi)
			}
			if err := svc.Delete(ctx, actor, tn.ID, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(Delete unknown) = %v; want not found", err)
			}
			if err := svc.Delete(ctx, actor, tn.ID, "cache"); err != nil {
				t.Fatal(err)
			}
			if got := images(t, dir); len(got) != 0 {
				t.Errorf("Got(images after delete) = %v; want none", got)
			}
			var types []string
			if err := d.DB.Table("audit_events").Where("tenant_id = ? AND target_id = ?", tn.ID, v.ID).Order("id").Pluck("type", &types).Error; err != nil {
				t.Fatal(err)
			}
			if want := "volume.created,volume.resized,volume.deleted"; strings.Join(types, ",") != want {
				t.Errorf("Got(audit) = %v; want %s", types, want)
			}
		})
	}
}

// TestVolumeAttachRules: read-write for one sandbox at a time, read-only
// for many; read-only users of a volume attached read-write go to that VM;
// a volume in use cannot be deleted or resized; the last user's release
// detaches it; another tenant can neither name the volume nor have its own
// attached to this tenant's VM. On SQLite and PostgreSQL.
func TestVolumeAttachRules(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			tn := newTenant(t, d.DB, "vol-rules-"+d.Name)
			other := newTenant(t, d.DB, "vol-other-"+d.Name)
			hp := &disks{}
			svc, _ := newService(t, d.DB, hp)
			v, err := svc.Create(ctx, actor, tn.ID, "data", 1)
			if err != nil {
				t.Fatal(err)
			}
			vm1, vm2 := newVM(t, d.DB, tn.ID), newVM(t, d.DB, tn.ID)
			sb := func() string { return sandboxtest.Record(t, d.DB, tn.ID, actor.ID).ID }
			rw := []volumes.Request{{Name: "data", Path: "/workspace/data"}}
			ro := []volumes.Request{{Name: "data", Path: "/data", ReadOnly: true}}
			guest := func(string) (volumes.Guest, error) { return hp, nil }

			s1 := sb()
			if _, err := svc.Attach(ctx, actor, tn.ID, s1, vm1, rw, hp); err != nil {
				t.Fatal(err)
			}
			if got, want := strings.Join(hp.take(), "; "), fmt.Sprintf("attach %s ro=false %s; mount %s ro=false", v.ID, vm1, v.ID); got != want {
				t.Errorf("Got(ops) = %q; want %q", got, want)
			}
			if _, err := svc.Plan(ctx, tn.ID, rw); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("Got(Plan of a second read-write mount) = %v; want conflict", err)
			}
			if p, err := svc.Plan(ctx, tn.ID, ro); err != nil || p.Pin != vm1 {
				t.Errorf("Got(Plan read-only) = %+v, %v; want pinned to %s", p, err, vm1)
			}
			s2 := sb()
			if _, err := svc.Attach(ctx, actor, tn.ID, s2, vm2, ro, hp); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("Got(Attach read-only on another VM while read-write on %s) = %v; want conflict", vm1, err)
			}
			if _, err := svc.Attach(ctx, actor, tn.ID, s2, vm1, ro, hp); err != nil {
				t.Fatal(err)
			}
			if got, want := strings.Join(hp.take(), "; "), fmt.Sprintf("mount %s ro=false", v.ID); got != want {
				t.Errorf("Got(ops of a read-only user on the read-write VM) = %q; want %q", got, want)
			}
			if err := svc.Delete(ctx, actor, tn.ID, "data"); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("Got(Delete while attached) = %v; want conflict", err)
			}
			if _, err := svc.Resize(ctx, actor, tn.ID, "data", 2); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("Got(Resize while attached) = %v; want conflict", err)
			}

			// The other tenant: the name is unknown to it, and its own
			// volume never goes onto this tenant's VM.
			if _, err := svc.Plan(ctx, other.ID, rw); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "no volume") {
				t.Errorf("Got(Plan of another tenant's volume) = %v; want unknown volume", err)
			}
			if _, err := svc.Get(ctx, other.ID, "data"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(Get of another tenant's volume) = %v; want not found", err)
			}
			if _, err := svc.Create(ctx, actor, other.ID, "data", 1); err != nil {
				t.Fatal(err)
			}
			osb := sandboxtest.Record(t, d.DB, other.ID, actor.ID).ID
			if _, err := svc.Attach(ctx, actor, other.ID, osb, vm1, rw, hp); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(Attach onto another tenant's VM) = %v; want not found", err)
			}
			if ops := hp.take(); len(ops) != 0 || count(t, d.DB, "volume_attachments", other.ID) != 0 {
				t.Errorf("Got(ops, rows of the refused attach) = %v; want none", ops)
			}

			// s1 ends: s2 still reads; s2 ends: the disk is detached.
			end := func(id string) {
				if err := d.DB.Table("sandboxes").Where("id = ?", id).Update("state", sandbox.StateDestroyed).Error; err != nil {
					t.Fatal(err)
				}
				svc.Release(ctx, tn.ID, id, guest)
			}
			end(s1)
			if ops := hp.take(); len(ops) != 0 {
				t.Errorf("Got(ops after the first user ended) = %v; want none", ops)
			}
			end(s2)
			if got, want := strings.Join(hp.take(), "; "), fmt.Sprintf("unmount %s; detach %s %s", v.ID, v.ID, vm1); got != want {
				t.Errorf("Got(ops after the last user ended) = %q; want %q", got, want)
			}
			if n := count(t, d.DB, "volume_attachments", tn.ID) + count(t, d.DB, "volume_mounts", tn.ID); n != 0 {
				t.Errorf("Got(rows after release) = %d; want 0", n)
			}

			// No writer: read-only on two VMs, and then no writer may come.
			s3, s4 := sb(), sb()
			for _, c := range []struct{ sb, vm string }{{s3, vm1}, {s4, vm2}} {
				if _, err := svc.Attach(ctx, actor, tn.ID, c.sb, c.vm, ro, hp); err != nil {
					t.Fatal(err)
				}
			}
			if got, want := strings.Join(hp.take(), "; "), fmt.Sprintf("attach %[1]s ro=true %[2]s; mount %[1]s ro=true; attach %[1]s ro=true %[3]s; mount %[1]s ro=true", v.ID, vm1, vm2); got != want {
				t.Errorf("Got(ops of two readers) = %q; want %q", got, want)
			}
			if _, err := svc.Plan(ctx, tn.ID, rw); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("Got(Plan read-write with readers) = %v; want conflict", err)
			}
			var types []string
			if err := d.DB.Table("audit_events").Where("tenant_id = ? AND target_id = ?", tn.ID, v.ID).Order("id").Pluck("type", &types).Error; err != nil {
				t.Fatal(err)
			}
			if want := "volume.created,volume.attached,volume.detached,volume.attached,volume.attached"; strings.Join(types, ",") != want {
				t.Errorf("Got(audit) = %v; want %s", types, want)
			}
		})
	}
}

// TestCheckRequests: bad paths and repeats are refused naming "volumes".
func TestCheckRequests(t *testing.T) {
	for _, c := range []struct {
		name string
		reqs []volumes.Request
		ok   bool
	}{
		{"workspace subpath", []volumes.Request{{Name: "a", Path: "/workspace/cache"}}, true},
		{"home", []volumes.Request{{Name: "a", Path: "/home/sandbox/.npm"}}, true},
		{"root", []volumes.Request{{Name: "a", Path: "/"}}, false},
		{"proc", []volumes.Request{{Name: "a", Path: "/proc/x"}}, false},
		{"sys", []volumes.Request{{Name: "a", Path: "/sys"}}, false},
		{"dev", []volumes.Request{{Name: "a", Path: "/dev/shm"}}, false},
		{"usr", []volumes.Request{{Name: "a", Path: "/usr/lib"}}, false},
		{"above a system dir", []volumes.Request{{Name: "a", Path: "/var"}}, false},
		{"relative", []volumes.Request{{Name: "a", Path: "workspace"}}, false},
		{"dotdot", []volumes.Request{{Name: "a", Path: "/workspace/../etc"}}, false},
		{"repeated name", []volumes.Request{{Name: "a", Path: "/x"}, {Name: "a", Path: "/y"}}, false},
		{"nested", []volumes.Request{{Name: "a", Path: "/x"}, {Name: "b", Path: "/x/y"}}, false},
		{"too many", make([]volumes.Request, 9), false},
	} {
		err := volumes.CheckRequests(c.reqs)
		var fe *errdefs.FieldError
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: Got(CheckRequests) = %v; want ok", c.name, err)
		case !c.ok && (!errors.As(err, &fe) || fe.Field != "volumes"):
			t.Errorf("%s: Got(CheckRequests) = %v; want a FieldError on volumes", c.name, err)
		}
	}
}
