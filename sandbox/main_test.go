package sandbox_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/cmd/stockade/app"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// The VM tests and benchmarks of this package share one environment: one
// database, one VM pool service and one sandbox service on the local
// libvirtd, the web app, two tenants, and one warm 2 GiB VM of tenant A
// that every sandbox goes to (TCG boots cost seconds of both CPUs: the whole
// package boots two VMs). It is set up by the first test that needs it and
// torn down by TestMain.

const systemURI = hypervisortest.SystemURI

// testFileLimit is the services' MaxFileBytes here: small, so that the
// over-the-limit upload is quick.
const testFileLimit = 1 << 20

var ctx = context.Background()

type testEnv struct {
	dir     string // the SQLite database lives here (a restarted service opens it again)
	db      *gorm.DB
	dataDir string
	log     *slog.Logger
	// domainType is what the first start detected (kvm or qemu).
	domainType string

	mu      sync.Mutex // guards vms, svc, web across a restart
	vms     *vmpool.Service
	svc     *sandbox.Service
	terms   *terminal.Service
	web     *webtest.Env
	stopWeb func()

	a, b                         tenants.Tenant
	tokA, tokADev, tokAAud, tokB string
	warmVM                       string // tenant A's 2 GiB VM
}

var shared struct {
	once sync.Once
	env  *testEnv
	skip string // why VM tests cannot run here
	err  error
}

// need returns the shared environment, setting it up the first time, or
// stops the test: Unavailable (a failure under CI=true) without root or
// libvirt, Fatal when setting up failed.
func need(tb testing.TB) *testEnv {
	tb.Helper()
	shared.once.Do(func() { shared.env, shared.skip, shared.err = setup() })
	if shared.skip != "" {
		hypervisortest.Unavailable(tb, shared.skip)
	}
	if shared.err != nil {
		tb.Fatalf("set up the shared VM environment: %v", shared.err)
	}
	return shared.env
}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	code := m.Run()
	if bad := apiChecks.failures(); len(bad) > 0 {
		// Answers of the shared environment's web app that do not match
		// the served OpenAPI document (webtest.OpenAPIChecked).
		for _, f := range bad {
			fmt.Fprintln(os.Stderr, f)
		}
		if code == 0 {
			code = 1
		}
	}
	if shared.env != nil {
		if err := shared.env.teardown(); err != nil {
			fmt.Fprintln(os.Stderr, "teardown:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// apiChecks collects what the OpenAPI check of the shared environment's
// web app finds; TestMain fails the package on any.
var apiChecks openAPIFailures

// openAPIFailures is the testing.TB the check reports to: the environment
// outlives every test, so its findings fail the package, not one test.
type openAPIFailures struct {
	testing.TB // only Errorf is called
	mu         sync.Mutex
	errs       []string
}

func (o *openAPIFailures) Errorf(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.errs = append(o.errs, fmt.Sprintf(format, args...))
}

// Helper and Logf keep a later use of them by the check from calling the
// nil TB embedded above.
func (o *openAPIFailures) Helper()             {}
func (o *openAPIFailures) Logf(string, ...any) {}

func (o *openAPIFailures) failures() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.errs...)
}

func testLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("SANDBOX_TEST_LOG") == "info" {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func setup() (env *testEnv, skip string, err error) {
	dataDir, skip, err := sandboxtest.PrepareVMs(ctx)
	if skip != "" || err != nil {
		return nil, skip, err
	}
	dir, err := os.MkdirTemp("", "sandbox-test-")
	if err != nil {
		return nil, "", err
	}
	env = &testEnv{dir: dir, dataDir: dataDir, log: testLogger()}
	made := env // a failing return sets env to nil before this runs
	defer func() {
		if err != nil {
			made.teardown()
			env = nil
		}
	}()
	if env.db, err = tenants.Open(ctx, "", dir); err != nil {
		return nil, "", err
	}
	if err = tenants.Migrate(ctx, env.db); err != nil {
		return nil, "", err
	}
	ts := tenants.NewStore(env.db, nil)
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
	if env.a, err = ts.CreateTenantWithAdmin(ctx, sys, "sbx-a", "Sandbox Tenant A", "ann@a.test"); err != nil {
		return nil, "", err
	}
	if env.b, err = ts.CreateTenantWithAdmin(ctx, sys, "sbx-b", "Sandbox Tenant B", "bob@b.test"); err != nil {
		return nil, "", err
	}
	token := func(tn tenants.Tenant, role tenants.Role) string {
		if err != nil {
			return ""
		}
		var secret string
		secret, _, err = ts.CreateToken(ctx, sys, tn.ID, tenants.NewToken{Name: "sbx-" + string(role), Role: role})
		return secret
	}
	env.tokA, env.tokADev, env.tokAAud = token(env.a, tenants.RoleAdmin), token(env.a, tenants.RoleDeveloper), token(env.a, tenants.RoleAuditor)
	env.tokB = token(env.b, tenants.RoleAdmin)
	if err != nil {
		return nil, "", err
	}
	if err = env.start(); err != nil {
		return nil, "", err
	}
	// One warm 2 GiB VM, then no more warm boots: every sandbox of the
	// package goes to it unless a test asks for more.
	if _, err = env.vms.SetPool(ctx, sys, env.a.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 2048, MaxVMs: 2, WarmVMs: 1, RecycleAfterHours: 24}); err != nil {
		return nil, "", err
	}
	wctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	if env.warmVM, err = sandboxtest.WaitVM(wctx, env.vms, env.a.ID, ""); err != nil {
		return nil, "", fmt.Errorf("the warm vm: %w", err)
	}
	if _, err = env.vms.SetPool(ctx, sys, env.a.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 2048, MaxVMs: 2, WarmVMs: 0, RecycleAfterHours: 24}); err != nil {
		return nil, "", err
	}
	return env, "", nil
}

// start starts the VM pools (adopting running VMs), the sandbox service
// (reconciling with their agents) and the web app on env.db.
func (e *testEnv) start() error {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	vms, svc, err := sandboxtest.StartServices(sctx, e.db, vmpool.Config{DataDir: e.dataDir, Logger: e.log, DomainType: e.domainType},
		sandbox.Config{SyncInterval: 500 * time.Millisecond, SampleInterval: time.Second, MaxFileBytes: testFileLimit, DefaultTemplate: "busybox"})
	if err != nil {
		return err
	}
	// Terminals as serve runs them: the only server, so terminals a
	// stopped one left are taken up (recordings next to the database).
	terms := newTerminals(e.db, svc, e.dir, e.log)
	if err := terms.Start(sctx); err != nil {
		svc.Close()
		vms.Close()
		return err
	}
	svc.OnEnd(terms.EndSandbox)
	srv := httptest.NewUnstartedServer(nil)
	publicURL := "http://" + srv.Listener.Addr().String()
	wctx, wcancel := context.WithCancel(ctx)
	// The app as serve builds it, on these running pools, sandboxes and
	// terminals.
	a, err := app.New(wctx, app.Config{
		PublicURL: publicURL, DataDir: e.dataDir, RootKey: []byte("0123456789abcdef0123456789abcdef"), Version: "test",
		StreamWriteTimeout: 2 * time.Second, // TestStalledStreamClientTimesOut
	}, app.Options{DB: e.db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), VMs: vms, Sandboxes: svc, Terminals: terms})
	if err != nil {
		wcancel()
		terms.Close()
		svc.Close()
		vms.Close()
		return err
	}
	srv.Config.Handler = webtest.OpenAPIChecked(&apiChecks, a.Handler())
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		// Benchmarks time the product's API, not the check in front of it.
		srv.Config.Handler = a.Handler()
	}
	srv.Start()
	if err := a.ConnectDevIdP(wctx); err != nil {
		wcancel()
		srv.Close()
		a.Close()
		terms.Close()
		svc.Close()
		vms.Close()
		return err
	}
	// Detected once (a boot check of several seconds): restarts reuse it.
	if e.domainType == "" {
		if hs, err := vms.Hosts(ctx); err == nil && len(hs) > 0 {
			e.domainType = hs[0].DomainType
		}
	}
	e.mu.Lock()
	e.vms, e.svc, e.terms = vms, svc, terms
	e.web = &webtest.Env{URL: publicURL, DB: e.db, Store: a.Store, Audit: a.Audit, App: a}
	e.stopWeb = func() { wcancel(); srv.Close(); a.Close() }
	e.mu.Unlock()
	return nil
}

// stop closes the web app and both services; VMs and sandboxes keep running.
func (e *testEnv) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopWeb != nil {
		e.stopWeb()
		e.stopWeb = nil
	}
	if e.terms != nil {
		e.terms.Close()
		e.terms = nil
	}
	if e.svc != nil {
		e.svc.Close()
		e.svc = nil
	}
	if e.vms != nil {
		e.vms.Close()
		e.vms = nil
	}
}

// teardown destroys every VM of this installation and removes what the
// environment made.
func (e *testEnv) teardown() error {
	var errs []error
	var install string
	if e.db != nil {
		id, err := tenants.NewStore(e.db, nil).InstallationID(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		install = id
	}
	e.stop()
	if install != "" {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if _, err := hypervisortest.DestroyInstallation(cctx, systemURI, install); err != nil {
			errs = append(errs, err)
		}
		// Their scratch disks: vmpool removes one as its VM ends, but these
		// ended behind its back.
		if err := os.RemoveAll(filepath.Join(e.dataDir, "scratch", install)); err != nil {
			errs = append(errs, err)
		}
	}
	if e.db != nil {
		if sqlDB, err := e.db.DB(); err == nil {
			sqlDB.Close()
		}
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
	return errors.Join(errs...)
}

func (e *testEnv) service() *sandbox.Service {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.svc
}

// newTerminals is the terminal service of a (test) control plane on db:
// the installation's only server, recordings in dir.
func newTerminals(db *gorm.DB, svc *sandbox.Service, dir string, log *slog.Logger) *terminal.Service {
	return terminal.New(db, terminal.SandboxPTYs{Service: svc}, terminal.Config{DataDir: dir, Logger: log,
		CheckInterval: 200 * time.Millisecond, Env: []string{"TERM=xterm-256color", "PS1=$ "}, Exclusive: true})
}

func (e *testEnv) pools() *vmpool.Service {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.vms
}

func (e *testEnv) webEnv() *webtest.Env {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.web
}

func (e *testEnv) api(token string) *webtest.Client { return e.webEnv().WithToken(token) }

// agent is the agent session of tenant A's warm VM.
func (e *testEnv) agent(tb testing.TB) *agentproto.Client {
	tb.Helper()
	c, err := e.pools().Agent(ctx, e.a.ID, e.warmVM)
	if err != nil {
		tb.Fatalf("agent of the warm vm: %v", err)
	}
	return c
}

// guestSandboxes lists the sandboxes the warm VM's agent holds.
func (e *testEnv) guestSandboxes(tb testing.TB) map[string]agentproto.SandboxInfo {
	tb.Helper()
	l, err := e.agent(tb).ListSandboxes(ctx)
	if err != nil {
		tb.Fatalf("list sandboxes in the guest: %v", err)
	}
	out := map[string]agentproto.SandboxInfo{}
	for _, s := range l.Sandboxes {
		out[s.ID] = s
	}
	return out
}

// dbPath is where the shared SQLite database file is, for the child process.
func (e *testEnv) dbPath() string { return filepath.Join(e.dir) }

func rowCount(tb testing.TB, db *gorm.DB, table string) int64 {
	tb.Helper()
	var n int64
	q := db.Table(table)
	if table == "audit_events" {
		q = q.Where("type NOT IN ?", dbtest.RefusalEvents()) // a refusal records itself
	}
	if err := q.Count(&n).Error; err != nil {
		tb.Fatal(err)
	}
	return n
}

// counts returns the row counts of the tables sandbox calls write.
func counts(tb testing.TB, db *gorm.DB) map[string]int64 {
	tb.Helper()
	out := map[string]int64{}
	for _, t := range []string{"sandboxes", "sandbox_events", "sandbox_execs", "audit_events", "vms"} {
		out[t] = rowCount(tb, db, t)
	}
	return out
}

func sameCounts(tb testing.TB, db *gorm.DB, before map[string]int64, what string) {
	tb.Helper()
	after := counts(tb, db)
	for k, v := range before {
		if after[k] != v {
			tb.Errorf("%s wrote rows: Got(%s) = %d; want %d", what, k, after[k], v)
		}
	}
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
