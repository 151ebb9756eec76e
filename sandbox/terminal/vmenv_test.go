package terminal_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

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
	dataDir := sandboxtest.NeedVMs(tb)
	ctx := context.Background()
	db := dbtest.SQLite(tb)
	e := &vmEnv{sysAct: audit.Actor{Kind: audit.ActorSystem, ID: "test"}}
	log := vmLogger()
	// TERMINAL_BENCH_CHANNEL_STREAM=1 puts the agent channel on libvirt's
	// stream API instead of the direct socket, to compare the two.
	stream := os.Getenv("TERMINAL_BENCH_CHANNEL_STREAM") == "1"
	e.vms, e.sbx = sandboxtest.Start(tb, db, vmpool.Config{DataDir: dataDir, Logger: log, ChannelStream: stream},
		sandbox.Config{SyncInterval: 500 * time.Millisecond, DefaultTemplate: "busybox"})
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
	var err error
	e.sb, err = e.sbx.Create(cctx, e.sysAct, e.a.ID, sandbox.Spec{Template: "busybox", MemoryMiB: 128})
	if err != nil {
		tb.Fatalf("create a sandbox: %v", err)
	}
	tb.Logf("sandbox %s running on vm %s after %v (boot included)", e.sb.ID, e.sb.VMID, time.Since(begin).Round(time.Millisecond))
	return e
}
