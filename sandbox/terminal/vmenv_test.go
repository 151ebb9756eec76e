package terminal_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

const systemURI = "qemu:///system"

// vmEnv is the whole web app on real VMs: the VM pools on the local
// libvirtd, the sandbox service, and terminals in its sandboxes; tenant
// A with one running busybox sandbox, and tokens of a developer and an
// auditor. Everything it booted is destroyed when the test ends.
type vmEnv struct {
	web    *webtest.Env
	vms    *vmpool.Service
	sbx    *sandbox.Service
	terms  *terminal.Service
	a      tenants.Tenant
	dev    string // developer token of A
	aud    string // auditor token of A
	sb     sandbox.Sandbox
	sysAct audit.Actor
}

func vmLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("TERMINAL_TEST_LOG") == "info" {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// newVMEnv sets up a vmEnv, or stops the test: Unavailable (a failure
// under CI=true) without root or libvirt.
func newVMEnv(tb testing.TB) *vmEnv {
	tb.Helper()
	if os.Geteuid() != 0 {
		hypervisortest.Unavailable(tb, "VM tests need root (qemu:///system relabels the guest files)")
	}
	conn, err := libvirt.NewConnect(systemURI)
	if err != nil {
		hypervisortest.Unavailable(tb, fmt.Sprintf("libvirt at %s: %v (scripts/libvirtd.sh starts it)", systemURI, err))
	}
	conn.Close()
	ctx := context.Background()
	dataDir := sandboxtest.DataDir()
	if _, err := sandboxtest.GuestImage(ctx, dataDir); err != nil {
		tb.Fatalf("guest image: %v", err)
	}
	db := dbtest.SQLite(tb)
	e := &vmEnv{sysAct: audit.Actor{Kind: audit.ActorSystem, ID: "test"}}
	install, err := tenants.NewStore(db, nil).InstallationID(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	// Last: whatever the services left running goes (only this
	// installation's domains: other tests share the libvirtd).
	tb.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := destroyDomains(dctx, install); err != nil {
			tb.Errorf("destroy the test's VMs: %v", err)
		}
	})
	log := vmLogger()
	e.vms, err = vmpool.New(ctx, db, vmpool.Config{URIs: []string{systemURI}, DataDir: dataDir, Logger: log, ConnectTimeout: 30 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := e.vms.Start(sctx); err != nil {
		e.vms.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.vms.Close() })
	e.sbx = sandbox.New(db, e.vms, sandbox.Config{DataDir: dataDir, Logger: log, SyncInterval: 500 * time.Millisecond, DefaultTemplate: "busybox"})
	if err := e.sbx.Start(sctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.sbx.Close() })
	e.terms = terminal.New(db, terminal.SandboxPTYs{Service: e.sbx}, terminal.Config{DataDir: tb.TempDir(), Logger: log,
		CheckInterval: 200 * time.Millisecond, Env: []string{"TERM=xterm-256color", "PS1=$ "}})
	if err := e.terms.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	e.sbx.OnEnd(e.terms.EndSandbox) // as serve wires it
	e.web = webtest.New(tb, webtest.Options{DB: db, VMs: e.vms, Sandboxes: e.sbx, Terminals: e.terms})
	e.a = e.web.TenantNamed(tb, "term-a", "Terminal Tenant A")
	e.dev, e.aud = e.web.Token(tb, e.a, tenants.RoleDeveloper), e.web.Token(tb, e.a, tenants.RoleAuditor)
	if _, err := e.vms.SetPool(ctx, e.sysAct, e.a.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, RecycleAfterHours: 24}); err != nil {
		tb.Fatal(err)
	}
	begin := time.Now()
	cctx, cancel2 := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel2()
	e.sb, err = e.sbx.Create(cctx, e.sysAct, e.a.ID, sandbox.Spec{Template: "busybox", MemoryMiB: 128})
	if err != nil {
		tb.Fatalf("create a sandbox: %v", err)
	}
	tb.Logf("sandbox %s running on vm %s after %v (boot included)", e.sb.ID, e.sb.VMID, time.Since(begin).Round(time.Millisecond))
	return e
}

// destroyDomains destroys every domain of the installation.
func destroyDomains(ctx context.Context, install string) error {
	h, err := hypervisor.Connect(ctx, hypervisor.Config{URI: systemURI, InstallationID: install})
	if err != nil {
		return err
	}
	defer h.Close()
	doms, err := h.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range doms {
		if err := h.Destroy(ctx, d.ID); err != nil && !errors.Is(err, hypervisor.ErrNotFound) {
			errs = append(errs, fmt.Errorf("destroy %s: %w", d.Name, err))
		}
	}
	return errors.Join(errs...)
}
