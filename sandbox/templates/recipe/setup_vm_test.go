package recipe_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/sandbox/templates/recipe"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// hosts resolves the test's host names to the local upstream.
type hosts map[string][]netip.Addr

func (n hosts) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := n[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// setupEnv is a deployment on real VMs as `stockade serve` wires the
// builder: the registry, sandboxes with tenant templates, the egress
// gateway (allowed to reach 127.0.0.0/8, the test-only operator
// allowance; the tenant's policy allows files.test alone), and the recipe
// builder with the SandboxRunner.
type setupEnv struct {
	db     *gorm.DB
	reg    *templates.Service
	sbx    *sandbox.Service
	vms    *vmpool.Service
	events *egress.Store
	b      *recipe.Builder
	dir    string
	tenant string
	upPort string
	upHits func() int
}

func newSetupEnv(t *testing.T) *setupEnv {
	t.Helper()
	needTools(t, "debugfs", "apt-get", "dpkg", "mkfs.ext4")
	dataDir := sandboxtest.NeedVMs(t, image.TemplateDebian)
	ctx := context.Background()
	db := dbtest.SQLite(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dir, err := os.MkdirTemp("/var/tmp", "recipe-setup-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &setupEnv{db: db, dir: dir, events: egress.NewStore(db)}
	hits := make(chan struct{}, 100)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- struct{}{}
		fmt.Fprint(w, "#!/bin/sh\necho \"hello from a setup command, $1\"\n")
	}))
	t.Cleanup(up.Close)
	_, e.upPort, _ = net.SplitHostPort(up.Listener.Addr().String())
	e.upHits = func() int { return len(hits) }
	e.reg, err = templates.New(templates.Config{DB: db, DataDir: dir, Logger: log, Builtins: func() []image.Template {
		if e.sbx == nil {
			return nil
		}
		return e.sbx.Templates()
	}})
	if err != nil {
		t.Fatal(err)
	}
	gw := &sandboxtest.LateGateway{}
	e.vms, e.sbx = sandboxtest.Start(t, db, vmpool.Config{DataDir: dataDir, Logger: log, Egress: gw},
		sandbox.Config{SyncInterval: 500 * time.Millisecond, DefaultTemplate: image.TemplateDebian, TenantTemplates: e.reg})
	lo := netip.MustParseAddr("127.0.0.1")
	g, err := egress.New(egress.Config{Policies: egress.PoliciesFunc(func(context.Context, string) (egress.Rules, int, error) {
		return egress.Rules{Default: egress.DefaultDeny, Allow: []egress.Rule{{Domain: "files.test"}}}, 1, nil
	}), Store: e.events, Sandboxes: egress.StoredSandboxes(e.sbx.Store()), Logger: log,
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver:   hosts{"files.test": {lo}, "denied.test": {lo}}})
	if err != nil {
		t.Fatal(err)
	}
	gw.Set(g)
	ts := tenants.NewStore(db, nil)
	tn, err := ts.CreateTenant(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	e.tenant = tn.ID
	if _, err := e.vms.SetPool(ctx, actor, e.tenant, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	e.b, err = recipe.New(recipe.Options{Store: recipe.NewStore(db, nil), Registry: e.reg, Bases: e.sbx.Templates, DataDir: dir, Logger: log,
		Runner: &recipe.SandboxRunner{Sandboxes: e.sbx, Images: e.reg, Quota: ts.Quota}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.b.Close)
	return e
}

// build runs src to its end and returns the build and its log.
func (e *setupEnv) build(t *testing.T, name, src string) (recipe.Build, string) {
	t.Helper()
	ctx := context.Background()
	b, _, err := e.b.Start(ctx, actor, e.tenant, []byte(src))
	if err != nil {
		t.Fatalf("Start(%s) = %v", name, err)
	}
	e.b.Wait()
	got, err := e.b.Store().Get(ctx, e.tenant, name, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, rc, err := e.b.Log(ctx, e.tenant, name, b.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return got, readAll(t, rc)
}

// noBuilderLeft checks that no builder sandbox runs, no builder image is
// on disk and no VM of the tenant holds a tenant template disk other than
// the keep ones' in-VM names.
func (e *setupEnv) noBuilderLeft(t *testing.T, keep ...string) {
	t.Helper()
	ctx := context.Background()
	var sbs []sandbox.Sandbox
	if err := e.db.Where("tenant_id = ?", e.tenant).Find(&sbs).Error; err != nil {
		t.Fatal(err)
	}
	vmIDs := map[string]bool{}
	for _, sb := range sbs {
		if sb.Metadata()[recipe.MetaTemplateBuild] == "" {
			continue
		}
		if sb.State != sandbox.StateDestroyed && sb.State != sandbox.StateFailed {
			t.Errorf("Got(builder sandbox %s) = %s; want destroyed", sb.ID, sb.State)
		}
		if sb.VMID != "" {
			vmIDs[sb.VMID] = true
		}
	}
	if len(vmIDs) == 0 {
		t.Errorf("no builder sandbox recorded; want one labelled %s", recipe.MetaTemplateBuild)
	}
	filepath.WalkDir(e.dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".builder.ext4") {
			t.Errorf("builder image %s left", p)
		}
		return nil
	})
	for vm := range vmIDs {
		disks, err := e.vms.Disks(ctx, e.tenant, vm)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range disks {
			if len(d.Serial) == 13 && d.Serial[0] == 't' && !contains(keep, d.Serial) {
				t.Errorf("Got(vm %s disk) = %s; want no builder disk attached", vm, d.Serial)
			}
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// TestSetupCommandsOnVM: a recipe's setup commands run in a builder
// sandbox on a real VM: one fetching a file through the egress gateway
// builds a template whose sandboxes run it (the version recorded on the
// sandbox); one exiting 3 fails with the command and the exit code in its
// log and leaves no image, no ready row, no builder image, no builder
// sandbox, no disk on the VM; one reaching a domain the policy denies is
// refused, its egress event recorded.
func TestSetupCommandsOnVM(t *testing.T) {
	e := newSetupEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	head := "apiVersion: stockade.dev/template/v1\nbase: debian\n"

	t.Run("exit 3 fails and leaves nothing", func(t *testing.T) {
		got, logText := e.build(t, "broken", head+"name: broken\nsetup:\n  - echo before the failure\n  - exit 3\n  - echo never\n")
		if got.State != recipe.StateFailed || got.Step != recipe.StepSetup || !strings.Contains(got.Error, "exit code 3") ||
			!strings.Contains(got.Error, `"exit 3"`) {
			t.Errorf("Got(build) = %s at step %d: %q; want failed at step 4 naming the command and exit code 3", got.State, got.Step, got.Error)
		}
		for _, want := range []string{"$ echo before the failure\nbefore the failure\n", "$ exit 3\n", "exit code 3", "build failed"} {
			if !strings.Contains(logText, want) {
				t.Errorf("log lacks %q:\n%s", want, logText)
			}
		}
		if strings.Contains(logText, "$ echo never") {
			t.Errorf("log runs the command after the failure:\n%s", logText)
		}
		if _, err := e.reg.Resolve(ctx, e.tenant, "broken"); !errdefs.IsNotFound(err) {
			t.Errorf("Resolve(broken) = %v; want not found", err)
		}
		if v, err := e.reg.VersionByID(ctx, e.tenant, got.VersionID); err != nil || v.State != templates.StateFailed {
			t.Errorf("Got(version) = %+v, %v; want failed", v, err)
		}
		if files := leftovers(t, e.dir); len(files) != 0 {
			t.Errorf("files after a failed build = %v; want none", files)
		}
		e.noBuilderLeft(t)
	})

	t.Run("denied domain", func(t *testing.T) {
		got, logText := e.build(t, "denied", head+"name: denied\nsetup:\n  - curl -fsS http://denied.test:"+e.upPort+"/x -o /tmp/x\n")
		if got.State != recipe.StateFailed || !strings.Contains(got.Error, "exit code") {
			t.Errorf("Got(build) = %s: %q; want failed on the command's exit code\n%s", got.State, got.Error, logText)
		}
		evs, err := e.events.Events(ctx, e.tenant, egress.Filter{Decision: egress.DecisionDeny})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ev := range evs {
			found = found || ev.Host == "denied.test"
		}
		if !found {
			t.Errorf("Got(deny events) = %+v; want one for denied.test", evs)
		}
		e.noBuilderLeft(t)
	})

	t.Run("fetch through the gateway", func(t *testing.T) {
		src := head + "name: hello-tools\npackages: [jq]\nworkdir: /opt/app\nenv: {WHO: the recipe}\nsetup:\n" +
			"  - curl -fsS http://files.test:" + e.upPort + "/hello -o hello && chmod 755 hello\n" +
			"  - mkdir -p /home/sandbox/.cache && echo junk > /home/sandbox/.cache/junk && echo scratch > /tmp/scratch\n" +
			"  - ./hello \"$WHO\"\n"
		before := e.upHits()
		got, logText := e.build(t, "hello-tools", src)
		if got.State != recipe.StateSucceeded {
			t.Fatalf("Got(build) = %s: %q; want succeeded\n%s", got.State, got.Error, logText)
		}
		if e.upHits() != before+1 {
			t.Errorf("Got(upstream requests) = %d; want 1", e.upHits()-before)
		}
		for _, want := range []string{"builder sandbox", "$ ./hello \"$WHO\"\nhello from a setup command, the recipe\n", "build succeeded"} {
			if !strings.Contains(logText, want) {
				t.Errorf("log lacks %q:\n%s", want, logText)
			}
		}
		v, err := e.reg.Resolve(ctx, e.tenant, "hello-tools")
		if err != nil || v.ID != got.VersionID {
			t.Fatalf("Resolve(hello-tools) = %+v, %v; want version %s", v, err, got.VersionID)
		}
		e.noBuilderLeft(t)
		sb, err := e.sbx.Create(ctx, actor, e.tenant, sandbox.Spec{Template: "hello-tools"})
		if err != nil {
			t.Fatalf("Create(hello-tools) = %v", err)
		}
		defer e.sbx.Destroy(context.Background(), actor, e.tenant, sb.ID)
		if sb.TemplateVersion != v.ID {
			t.Errorf("Got(sandbox's template version) = %s; want %s", sb.TemplateVersion, v.ID)
		}
		var out, errOut bytes.Buffer
		r, err := e.sbx.Exec(ctx, actor, e.tenant, sb.ID, sandbox.ExecRequest{Cmd: []string{"/bin/sh", "-c",
			`./hello again; pwd; jq -n 1; test -e /home/sandbox/.cache/junk && echo cache kept; test -e /tmp/scratch && echo tmp kept; true`},
			TimeoutSeconds: 120}, &out, &errOut)
		if err != nil {
			t.Fatalf("Exec = %v", err)
		}
		want := "hello from a setup command, again\n/opt/app\n1\n"
		if r.ExitCode != 0 || out.String() != want {
			t.Errorf("Got(the template's sandbox) = %d %q %q; want %q", r.ExitCode, out.String(), errOut.String(), want)
		}

		// sandbox.upper: only a paused sandbox, only the tenant's, bounded.
		if _, err := e.sbx.Exec(ctx, actor, e.tenant, sb.ID, sandbox.ExecRequest{Cmd: []string{"/bin/sh", "-c",
			"head -c 8192 /dev/zero > big && echo small > small"}, TimeoutSeconds: 60}, nil, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := e.sbx.ReadUpper(ctx, e.tenant, sb.ID, 1<<20, "q", io.Discard); !errdefs.IsConflict(err) {
			t.Errorf("Got(ReadUpper of a running sandbox) = %v; want conflict", err)
		}
		if _, err := e.sbx.Pause(ctx, actor, e.tenant, sb.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.sbx.ReadUpper(ctx, "another-tenant", sb.ID, 1<<20, "q", io.Discard); !errdefs.IsNotFound(err) {
			t.Errorf("Got(ReadUpper of another tenant's sandbox) = %v; want not found", err)
		}
		var qe *errdefs.QuotaError
		if _, err := e.sbx.ReadUpper(ctx, e.tenant, sb.ID, 4096, "q", io.Discard); !errors.As(err, &qe) {
			t.Errorf("Got(ReadUpper over its bound) = %v; want a quota error", err)
		}
		var layer bytes.Buffer
		if _, err := e.sbx.ReadUpper(ctx, e.tenant, sb.ID, 1<<20, "q", &layer); err != nil {
			t.Fatalf("ReadUpper = %v", err)
		}
		names := map[string]int64{}
		tr := tar.NewReader(&layer)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			names[h.Name] = h.Size
		}
		if names["opt/app/big"] != 8192 || names["opt/app/small"] != 6 {
			t.Errorf("Got(upper entries) = %v; want opt/app/big of 8192 bytes and opt/app/small", names)
		}
	})
}
