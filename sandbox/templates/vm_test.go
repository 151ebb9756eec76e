package templates_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// toolTree is a usable template root: a static busybox with a few applets
// and a file of the template's own.
func toolTree(t testing.TB) string {
	t.Helper()
	tree := t.TempDir()
	for _, d := range []string{"bin", "opt/tool"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("a static busybox for the test template: %v", err)
	}
	if err := os.WriteFile(filepath.Join(tree, "bin/busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, app := range []string{"sh", "cat", "pwd", "echo", "id", "ls", "true"} {
		if err := os.Symlink("busybox", filepath.Join(tree, "bin", app)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tree, "opt/tool/hello.txt"), []byte("hello from a tenant template\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return tree
}

type vmEnv struct {
	db    dbtest.DB
	vms   *vmpool.Service
	sbx   *sandbox.Service
	tpl   *templates.Service
	dir   string
	acme  string
	other string
}

func startVMEnv(t testing.TB) vmEnv {
	t.Helper()
	dataDir := sandboxtest.NeedVMs(t)
	db := dbtest.DB{Name: "sqlite", DB: dbtest.SQLite(t)}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The registry's images live in their own folder here (the server
	// uses its data dir); libvirt reads them from there.
	dir, err := os.MkdirTemp("/var/tmp", "tpl-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var sbx *sandbox.Service
	tpl, err := templates.New(templates.Config{DB: db.DB, DataDir: dir, Logger: log, Builtins: func() []image.Template {
		if sbx == nil {
			return nil
		}
		return sbx.Templates()
	}})
	if err != nil {
		t.Fatal(err)
	}
	vms, svc := sandboxtest.Start(t, db.DB, vmpool.Config{DataDir: dataDir, Logger: log},
		sandbox.Config{DefaultTemplate: image.TemplateBusybox, TenantTemplates: tpl})
	sbx = svc
	return vmEnv{db: db, vms: vms, sbx: svc, tpl: tpl, dir: dir, acme: newTenant(t, db.DB, "acme"), other: newTenant(t, db.DB, "other")}
}

func (e vmEnv) sh(t testing.TB, ctx context.Context, tenantID, id, script string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	r, err := e.sbx.Exec(ctx, testActor, tenantID, id, sandbox.ExecRequest{Cmd: []string{"sh", "-c", script}, TimeoutSeconds: 120}, &out, &errOut)
	if err != nil {
		t.Fatalf("Exec(%q) = %v", script, err)
	}
	if r.ExitCode != 0 {
		t.Fatalf("Exec(%q) exited %d: %s%s", script, r.ExitCode, out.String(), errOut.String())
	}
	return out.String()
}

func (e vmEnv) build(t testing.TB, ctx context.Context, tenantID, name string, d templates.Defaults) templates.Version {
	t.Helper()
	v, err := e.tpl.Begin(ctx, tenantID, templates.Begin{Name: name, Source: templates.SourceRecipe, SourceRef: "test", Actor: testActor})
	if err != nil {
		t.Fatal(err)
	}
	v, err = e.tpl.Finish(ctx, tenantID, v.ID, toolTree(t), d)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func serials(t testing.TB, ctx context.Context, e vmEnv, tenantID, vmID string) []string {
	t.Helper()
	disks, err := e.vms.Disks(ctx, tenantID, vmID)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range disks {
		out = append(out, d.Serial)
	}
	return out
}

// TestTenantTemplateOnVMs: a tenant template made with Begin/Finish is
// hot-plugged into the tenant's running VM; a sandbox from it sees its
// files and defaults and records the version; another tenant can neither
// use nor see it; deleting it is refused while the sandbox lives, and
// after the sandbox ends it succeeds, the disk is unplugged and the image
// removed.
func TestTenantTemplateOnVMs(t *testing.T) {
	e := startVMEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// A running VM first, from a built-in.
	base, err := e.sbx.Create(ctx, testActor, e.acme, sandbox.Spec{})
	if err != nil {
		t.Fatalf("Create(busybox) = %v", err)
	}
	defer e.sbx.Destroy(ctx, testActor, e.acme, base.ID)

	v := e.build(t, ctx, e.acme, "tool", templates.Defaults{Env: map[string]string{"TOOL_HOME": "/opt/tool", "MINE": "template"},
		User: "root", Workdir: "/opt/tool"})
	if got := serials(t, ctx, e, e.acme, base.VMID); slices.Contains(got, v.InVMName) {
		t.Fatalf("Got(disks before any sandbox of the template) = %v; want no %s", got, v.InVMName)
	}

	sb, err := e.sbx.Create(ctx, testActor, e.acme, sandbox.Spec{Template: "tool", Env: map[string]string{"MINE": "sandbox"}})
	if err != nil {
		t.Fatalf("Create(tool) = %v", err)
	}
	if sb.VMID != base.VMID {
		t.Logf("the template's sandbox landed on another VM (%s, not %s)", sb.VMID, base.VMID)
	}
	if sb.Template != "tool" || sb.TemplateVersion != v.ID || sb.TemplateWorkdir != "/opt/tool" || sb.TemplateUser != "root" {
		t.Errorf("Got(sandbox) template %q version %q workdir %q user %q; want tool %s /opt/tool root",
			sb.Template, sb.TemplateVersion, sb.TemplateWorkdir, sb.TemplateUser, v.ID)
	}
	if got := serials(t, ctx, e, e.acme, sb.VMID); !slices.Contains(got, v.InVMName) {
		t.Errorf("Got(disks of the VM) = %v; want %s hot-plugged", got, v.InVMName)
	}
	out := e.sh(t, ctx, e.acme, sb.ID, `cat /opt/tool/hello.txt; pwd; echo "$TOOL_HOME $MINE"; id -u`)
	if want := "hello from a tenant template\n/opt/tool\n/opt/tool sandbox\n1000\n"; out != want {
		t.Errorf("Got(the sandbox's view) = %q; want %q", out, want)
	}
	// A second sandbox of the same version reuses the disk.
	sb2, err := e.sbx.Create(ctx, testActor, e.acme, sandbox.Spec{Template: "tool"})
	if err != nil {
		t.Fatalf("Create(tool again) = %v", err)
	}
	if out := e.sh(t, ctx, e.acme, sb2.ID, `echo "$MINE"`); out != "template\n" {
		t.Errorf("Got(MINE in the second sandbox) = %q; want the template's", out)
	}
	if _, err := e.sbx.Destroy(ctx, testActor, e.acme, sb2.ID); err != nil {
		t.Fatal(err)
	}

	// Another tenant: not its template.
	if _, err := e.sbx.Create(ctx, testActor, e.other, sandbox.Spec{Template: "tool"}); !errdefs.IsInvalid(err) {
		t.Errorf("Got(other tenant's Create(tool)) = %v; want an unknown template", err)
	}
	if _, err := e.tpl.Get(ctx, e.other, "tool"); !errdefs.IsNotFound(err) {
		t.Errorf("Got(other tenant's Get(tool)) = %v; want not found", err)
	}

	// Delete: refused while the sandbox lives.
	if _, err := e.tpl.Delete(ctx, testActor, e.acme, "tool"); !errdefs.IsConflict(err) {
		t.Fatalf("Got(Delete in use) = %v; want conflict", err)
	}
	if _, err := e.sbx.Destroy(ctx, testActor, e.acme, sb.ID); err != nil {
		t.Fatal(err)
	}
	gone, err := e.tpl.Delete(ctx, testActor, e.acme, "tool")
	if err != nil {
		t.Fatalf("Got(Delete after the sandbox ended) = %v; want ok", err)
	}
	e.sbx.DetachTemplateVersions(ctx, e.acme, gone)
	if got := serials(t, ctx, e, e.acme, sb.VMID); slices.Contains(got, v.InVMName) {
		t.Errorf("Got(disks after Delete) = %v; want %s unplugged", got, v.InVMName)
	}
	if _, err := os.Stat(v.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Got(image after Delete) = %v; want removed", err)
	}
	// The VM still serves its built-in sandbox, and a new version of the
	// name works again (a fresh disk in the freed slot).
	if out := e.sh(t, ctx, e.acme, base.ID, "echo ok"); out != "ok\n" {
		t.Errorf("Got(the built-in sandbox after the unplug) = %q; want ok", out)
	}
	v2 := e.build(t, ctx, e.acme, "tool", templates.Defaults{})
	sb3, err := e.sbx.Create(ctx, testActor, e.acme, sandbox.Spec{Template: "tool"})
	if err != nil {
		t.Fatalf("Create(tool v2) = %v", err)
	}
	defer e.sbx.Destroy(ctx, testActor, e.acme, sb3.ID)
	if sb3.TemplateVersion != v2.ID || !strings.Contains(e.sh(t, ctx, e.acme, sb3.ID, "cat /opt/tool/hello.txt"), "tenant template") {
		t.Errorf("Got(sandbox of v2) version %s; want %s with the file", sb3.TemplateVersion, v2.ID)
	}
}
