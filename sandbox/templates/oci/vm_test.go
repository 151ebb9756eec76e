package oci_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/sandbox/templates/oci"
	. "github.com/stockade-dev/stockade/sandbox/templates/oci/ocitest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

// busyboxImage is a runnable image: a static busybox with applets linked
// by absolute symlinks (confined: they resolve inside the image), a file
// the next layer deletes with a whiteout, an Env and a WorkingDir, and a
// root user (which becomes the sandbox user).
func busyboxImage(t *testing.T) []byte {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("a static busybox for the test image: %v", err)
	}
	base := []Entry{Dir("bin"), Mode(File("bin/busybox", string(bb)), 0o755), Dir("etc"), File("etc/hostname", "img\n"),
		Dir("srv"), File("srv/hello.txt", "hello from an OCI image\n"), File("srv/gone.txt", "deleted by the next layer\n"),
		Dir("opt"), Dir("opt/cache"), File("opt/cache/old", "old")}
	for _, app := range []string{"sh", "cat", "pwd", "echo", "id", "ls", "test", "["} {
		base = append(base, Symlink("bin/"+app, "/bin/busybox"))
	}
	top := []Entry{Whiteout("srv", "gone.txt"), Dir("opt/cache"), Opaque("opt/cache"), File("opt/cache/new", "new"),
		File("srv/added.txt", "from the second layer\n")}
	return DockerTar(t, Image(t, []string{"PATH=/bin", "GREETING=hello from the image env"}, "/srv", "root",
		Layer(t, base...), Layer(t, top...)))
}

// TestImportedTemplateOnVM: an image tarball made here imports; a sandbox
// from it on a real VM sees its files, not the one a whiteout deleted nor
// the lower contents of an opaque folder, and the image's env and working
// folder, as the sandbox user.
func TestImportedTemplateOnVM(t *testing.T) {
	dataDir := sandboxtest.NeedVMs(t)
	db := dbtest.SQLite(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Template images live where libvirt can read them.
	dir, err := os.MkdirTemp("/var/tmp", "oci-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var sbx *sandbox.Service
	reg, err := templates.New(templates.Config{DB: db, DataDir: dir, Logger: log, Builtins: func() []image.Template {
		if sbx == nil {
			return nil
		}
		return sbx.Templates()
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, sbx = sandboxtest.Start(t, db, vmpool.Config{DataDir: dataDir, Logger: log},
		sandbox.Config{DefaultTemplate: image.TemplateBusybox, TenantTemplates: reg})
	st := tenants.NewStore(db, nil)
	tn, err := st.CreateTenant(context.Background(), audit.Actor{Kind: audit.ActorSystem, ID: "test"}, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.New(db, []byte("0123456789abcdef0123456789abcdef"), secrets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := egress.New(egress.Config{Policies: egress.PoliciesFunc(func(context.Context, string) (egress.Rules, int, error) {
		return egress.Rules{Default: egress.DefaultDeny}, 1, nil
	}), AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	im, err := oci.New(oci.Config{Templates: reg, Quota: st.Quota, Audit: audit.NewLog(db, nil), ScratchDir: filepath.Join(dir, "template-imports"),
		Gateway: gw, Secrets: sec, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	up, err := im.Receive(bytes.NewReader(busyboxImage(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	v, err := im.Import(ctx, tn.ID, oci.Request{Name: "img", Actor: dev, Upload: up})
	if err != nil {
		t.Fatalf("Got(Import) = %v; want nil", err)
	}
	sb, err := sbx.Create(ctx, dev, tn.ID, sandbox.Spec{Template: "img"})
	if err != nil {
		t.Fatalf("Create(img) = %v", err)
	}
	defer sbx.Destroy(context.Background(), dev, tn.ID, sb.ID)
	if sb.TemplateVersion != v.ID {
		t.Errorf("Got(sandbox's template version) = %s; want %s", sb.TemplateVersion, v.ID)
	}
	var out, errOut bytes.Buffer
	r, err := sbx.Exec(ctx, dev, tn.ID, sb.ID, sandbox.ExecRequest{Cmd: []string{"sh", "-c",
		`cat hello.txt added.txt; pwd; echo "$GREETING"; id -u; ls /opt/cache; test -e gone.txt && echo "gone.txt is there"; test -e /opt/cache/old && echo "old is there"; true`},
		TimeoutSeconds: 120}, &out, &errOut)
	if err != nil {
		t.Fatalf("Exec = %v", err)
	}
	want := "hello from an OCI image\nfrom the second layer\n/srv\nhello from the image env\n1000\nnew\n"
	if r.ExitCode != 0 || out.String() != want {
		t.Errorf("Got(the sandbox's view) = %d %q %q; want %q", r.ExitCode, out.String(), errOut.String(), want)
	}
}
