package sandbox_test

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/web/webtest"
)

// writeImage writes a data dir whose image manifest lists the templates
// (files of a few bytes: nothing boots from it) and returns it.
func writeImage(t *testing.T, templates ...string) string {
	t.Helper()
	dir := t.TempDir()
	images := filepath.Join(dir, "images")
	if err := os.MkdirAll(images, 0o755); err != nil {
		t.Fatal(err)
	}
	m := image.Manifest{Guest: image.Guest{Version: "g1", Kernel: "images/vmlinux", Initramfs: "images/initramfs"},
		Files: map[string]image.FileStamp{}, BuiltAt: time.Now().UTC()}
	write := func(rel string) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.WriteFile(p, []byte("not really "+rel), 0o644); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		m.Files[rel] = image.FileStamp{Size: fi.Size(), ModTime: fi.ModTime().UTC()}
	}
	write("images/vmlinux")
	write("images/initramfs")
	for _, name := range templates {
		rel := "images/" + name + ".ext4"
		write(rel)
		m.Templates = append(m.Templates, image.Template{Name: name, Version: name + "-v1", Path: rel, Format: image.FormatExt4})
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(images, "manifest.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := image.Load(dir); err != nil || len(got.Templates) != len(templates) {
		t.Fatalf("the written image does not load: %d templates, %v", len(got.Templates), err)
	}
	return dir
}

// testDriverPools are VM pools on db over libvirt's in-process test driver:
// pool settings are real, nothing boots unless asked.
func testDriverPools(t *testing.T, db *gorm.DB, log *slog.Logger) *vmpool.Service {
	t.Helper()
	vms, err := vmpool.New(ctx, db, vmpool.Config{URIs: []string{guestTestURI}, DataDir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := vms.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vms.Close() })
	return vms
}

// TestCreateOptions: what the create form offers a tenant is the tenant
// policy's defaults and bounds within the size of its VMs, from the
// service Create decides with; real SQLite, the VM pools on libvirt's
// in-process test driver (nothing boots).
func TestCreateOptions(t *testing.T) {
	db := dbtest.SQLite(t)
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test", Name: "test"}
	ts := tenants.NewStore(db, nil)
	tn, err := ts.CreateTenant(ctx, sys, "opts", "Options")
	if err != nil {
		t.Fatal(err)
	}
	small, err := ts.CreateTenant(ctx, sys, "opts-small", "Small VMs")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	vms := testDriverPools(t, db, log)
	for _, p := range []struct {
		tenant string
		mib    int
	}{{tn.ID, 2048}, {small.ID, 256}} {
		if _, err := vms.SetPool(ctx, sys, p.tenant, vmpool.PoolSettings{VCPUs: 2, MemoryMiB: p.mib, MaxVMs: 1, RecycleAfterHours: 24}); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := policy.NewStore(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	doc := policy.Defaults()
	doc.Resources.MaxVCPUs, doc.Resources.MaxMemoryMiB, doc.Resources.DefaultMemoryMiB = 1, 256, 96
	doc.Lifetime.MaxTimeoutSeconds, doc.Lifetime.DefaultTimeoutSeconds, doc.Lifetime.MaxIdleTimeoutSeconds = 7200, 1800, 600
	var pv int
	for _, id := range []string{tn.ID, small.ID} {
		if id == small.ID {
			doc.Resources.DefaultMemoryMiB = 200 // more than its VMs hold for a sandbox
		}
		v, err := ps.Save(ctx, sys, id, policy.Edit{Doc: doc, Reason: "create options test"})
		if err != nil {
			t.Fatal(err)
		}
		pv = v.Version
	}
	dataDir := writeImage(t, "busybox", "debian")

	tests := []struct {
		name     string
		policies sandbox.Policies
		tenant   string
		want     sandbox.CreateOptions // Templates and Unavailable aside
	}{
		{"service defaults without a policy", nil, tn.ID, sandbox.CreateOptions{
			Defaults: sandbox.Spec{Template: "debian", VCPUs: 1, MemoryMiB: 128, TimeoutSeconds: 3600},
			MaxVCPUs: 2, MaxMemoryMiB: 2048 - 128, MaxTimeoutSeconds: sandbox.MaxTimeoutSeconds}},
		{"the policy's defaults and bounds", ps, tn.ID, sandbox.CreateOptions{
			Defaults: sandbox.Spec{Template: "debian", VCPUs: 1, MemoryMiB: 96, TimeoutSeconds: 1800},
			MaxVCPUs: 1, MaxMemoryMiB: 256, MaxTimeoutSeconds: 7200, MaxIdleTimeoutSeconds: 600, PolicyVersion: pv}},
		{"within VMs smaller than the policy", ps, small.ID, sandbox.CreateOptions{
			Defaults: sandbox.Spec{Template: "debian", VCPUs: 1, MemoryMiB: 256 - 128, TimeoutSeconds: 1800},
			MaxVCPUs: 1, MaxMemoryMiB: 256 - 128, MaxTimeoutSeconds: 7200, MaxIdleTimeoutSeconds: 600, PolicyVersion: pv}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := sandbox.New(db, vms, sandbox.Config{DataDir: dataDir, Logger: log, Policies: tt.policies})
			t.Cleanup(func() { svc.Close() })
			got, err := svc.CreateOptions(ctx, tt.tenant)
			if err != nil {
				t.Fatalf("CreateOptions() = %v", err)
			}
			if got.Unavailable != nil || len(got.Templates) != 2 || got.Templates[0].Name != "busybox" {
				t.Errorf("Got(CreateOptions) = templates %+v, unavailable %v; want busybox and debian, available", got.Templates, got.Unavailable)
			}
			got.Templates, got.Unavailable = nil, nil
			if !equalOptions(got, tt.want) {
				t.Errorf("Got(CreateOptions) = %+v; want %+v", got, tt.want)
			}
		})
	}

	t.Run("templates loaded once", func(t *testing.T) {
		dir := writeImage(t, "busybox")
		svc := sandbox.New(db, vms, sandbox.Config{DataDir: dir, Logger: log})
		t.Cleanup(func() { svc.Close() })
		// A broken manifest after the start does not change what was loaded.
		if err := os.WriteFile(filepath.Join(dir, "images", "manifest.json"), []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := svc.CreateOptions(ctx, tn.ID)
		if err != nil || len(got.Templates) != 1 || got.Defaults.Template != "busybox" || svc.TemplatesAvailable() != nil {
			t.Errorf("Got(CreateOptions after the manifest broke) = %+v, %v; want busybox as loaded at start", got, err)
		}
	})
}

func equalOptions(a, b sandbox.CreateOptions) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// TestBrokenImage: a guest image that cannot be read is an error the
// service reports (its readiness, the create form, every create: 503),
// never "no templates"; an image not built is a plain "none built".
func TestBrokenImage(t *testing.T) {
	db := dbtest.SQLite(t)
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test", Name: "test"}
	tn, err := tenants.NewStore(db, nil).CreateTenant(ctx, sys, "broken", "Broken")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	vms := testDriverPools(t, db, log)

	garbled := writeImage(t, "busybox")
	if err := os.WriteFile(filepath.Join(garbled, "images", "manifest.json"), []byte(`{"guest":`), 0o644); err != nil {
		t.Fatal(err)
	}
	changed := writeImage(t, "busybox")
	if err := os.WriteFile(filepath.Join(changed, "images", "busybox.ext4"), []byte("rebuilt behind the manifest's back"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		dataDir string
		broken  error  // want TemplatesAvailable to wrap it; nil: available
		says    string // in CreateOptions.Unavailable
	}{
		{"garbled manifest", garbled, vmpool.ErrUnavailable, "sandbox templates: load image"},
		{"file changed since the build", changed, image.ErrChanged, "busybox.ext4"},
		{"not built", t.TempDir(), nil, "no sandbox templates are built"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := sandbox.New(db, vms, sandbox.Config{DataDir: tt.dataDir, Logger: log})
			t.Cleanup(func() { svc.Close() })
			err := svc.TemplatesAvailable()
			if tt.broken == nil && err != nil || tt.broken != nil && (!errors.Is(err, tt.broken) || !errors.Is(err, vmpool.ErrUnavailable)) {
				t.Errorf("Got(TemplatesAvailable) = %v; want %v (unavailable)", err, tt.broken)
			}
			o, err := svc.CreateOptions(ctx, tn.ID)
			if err != nil || o.Unavailable == nil || !strings.Contains(o.Unavailable.Error(), tt.says) || len(o.Templates) != 0 {
				t.Errorf("Got(CreateOptions) = %+v, %v; want no templates and unavailable saying %q", o, err, tt.says)
			}
			before := dbtest.Count(t, db)
			_, err = svc.Create(ctx, sys, tn.ID, sandbox.Spec{Template: "busybox"})
			var fe *errdefs.FieldError
			switch {
			case tt.broken != nil && !errors.Is(err, vmpool.ErrUnavailable):
				t.Errorf("Got(Create with a broken image) = %v; want unavailable", err)
			case tt.broken == nil && (!errors.As(err, &fe) || fe.Field != "template"):
				t.Errorf("Got(Create with no image) = %v; want a field error on template", err)
			}
			if ok, diff := dbtest.Equal(before, dbtest.Count(t, db)); !ok {
				t.Errorf("Got(refused Create) wrote %s; want nothing", diff)
			}
		})
	}

	t.Run("readiness and page", func(t *testing.T) {
		svc := sandbox.New(db, vms, sandbox.Config{DataDir: garbled, Logger: log})
		t.Cleanup(func() { svc.Close() })
		w := webtest.New(t, webtest.Options{DB: db, VMs: vms, Sandboxes: svc})
		var ready struct {
			Checks map[string]string `json:"checks"`
		}
		if s, body := w.Anonymous().JSON(t, http.MethodGet, "/readyz", nil, &ready); s != http.StatusServiceUnavailable ||
			!strings.Contains(ready.Checks["templates"], "sandbox templates: load image") {
			t.Errorf("Got(GET /readyz with a broken image) = %d %s; want 503 naming the templates", s, body)
		}
		w.Member(t, tn, "dev@broken.test", tenants.RoleDeveloper)
		s, page := w.Login(t, "dev@broken.test").GetPage(t, "/sandboxes")
		if s != http.StatusOK || !strings.Contains(page, `id="sandbox-unavailable"`) || !strings.Contains(page, "sandbox templates: load image") {
			t.Errorf("Got(GET /sandboxes with a broken image) = %d; want the page saying the image is broken", s)
		}
	})
}
