package vmpool_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

const systemURI = hypervisortest.SystemURI

// prep is what the first VM test learnt about the machine: one libvirt
// check and at most one image build per test binary, shared by every VM
// test and benchmark.
var prep struct {
	once    sync.Once
	dataDir string
	guest   image.Guest
	skip    string // why VM tests cannot run here ("" when they can)
	err     error  // the image could not be built
}

// needVMs returns the data dir with a built guest image, or stops the test:
// Unavailable (a failure under CI=true) without root or libvirt, Fatal when
// the image cannot be built.
func needVMs(tb testing.TB) (string, image.Guest) {
	tb.Helper()
	prep.once.Do(prepare)
	if prep.skip != "" {
		hypervisortest.Unavailable(tb, prep.skip)
	}
	if prep.err != nil {
		tb.Fatalf("guest image: %v", prep.err)
	}
	return prep.dataDir, prep.guest
}

func prepare() {
	// The same shared test image dir as hypervisor/image's tests and `make test`,
	// rebuilt when missing or older than the agent's sources.
	prep.dataDir, prep.skip, prep.err = sandboxtest.PrepareVMs(context.Background())
	if prep.skip != "" || prep.err != nil {
		return
	}
	m, err := image.Load(prep.dataDir)
	if err != nil {
		prep.err = err
		return
	}
	prep.guest = m.Guest
}

// testLogger writes the service's log to the test log (visible with -v or
// on failure).
func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newService starts a Service on db for the local libvirtd. At cleanup it is
// closed; VMs are not destroyed here (the test that made them does it).
func newService(tb testing.TB, db *gorm.DB, dataDir string, uris ...string) *vmpool.Service {
	tb.Helper()
	if len(uris) == 0 {
		uris = []string{systemURI}
	}
	return startService(tb, db, vmpool.Config{URIs: uris, DataDir: dataDir, Logger: testLogger(tb), ConnectTimeout: 30 * time.Second})
}

// startService starts a Service with cfg on db, closed at cleanup.
func startService(tb testing.TB, db *gorm.DB, cfg vmpool.Config) *vmpool.Service {
	tb.Helper()
	ctx := context.Background()
	svc, err := vmpool.New(ctx, db, cfg)
	if err != nil {
		tb.Fatalf("vmpool.New = %v", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := svc.Start(sctx); err != nil {
		tb.Fatalf("Start = %v", err)
	}
	tb.Cleanup(func() { svc.Close() })
	return svc
}

// cleanupInstallation destroys, at the end, every domain of the
// installation that is still there, and fails the test if there was one:
// tests must clean up what they create, and never touch other domains.
func cleanupInstallation(tb testing.TB, installationID string) {
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		leaked, err := hypervisortest.DestroyInstallation(ctx, systemURI, installationID)
		for _, name := range leaked {
			tb.Errorf("leaked domain %s: destroyed it", name)
		}
		if err != nil {
			tb.Errorf("cleanup: %v", err)
		}
	})
}

// newWeb starts the whole web app on db with svc as its VM pools (nil:
// pools that never start), built by the composition root as webtest.New
// builds it.
func newWeb(tb testing.TB, db *gorm.DB, svc *vmpool.Service, operators ...string) *webtest.Env {
	tb.Helper()
	return webtest.New(tb, webtest.Options{DB: db, VMs: svc, Operators: operators})
}

// problem is the part of a problem document tests look at.
type problem struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Field string `json:"field"`
		Rule  string `json:"rule"`
	} `json:"errors"`
}

func decodeProblem(tb testing.TB, body string) problem {
	tb.Helper()
	var p problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		tb.Fatalf("not a problem document: %v: %s", err, body)
	}
	return p
}

// counts returns row counts of the tables VM calls write.
func counts(tb testing.TB, db *gorm.DB) map[string]int64 {
	tb.Helper()
	out := map[string]int64{}
	for _, table := range []string{"vms", "vm_pools", "audit_events"} {
		var n int64
		q := db.Table(table)
		if table == "audit_events" {
			q = q.Where("type NOT IN ?", dbtest.RefusalEvents()) // a refusal records itself
		}
		if err := q.Count(&n).Error; err != nil {
			tb.Fatal(err)
		}
		out[table] = n
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

// freshDB is a fresh migrated database: PostgreSQL when configured (the
// multi-replica database), else SQLite.
func freshDB(tb testing.TB) *gorm.DB {
	tb.Helper()
	if dsn := os.Getenv(dbtest.EnvPostgres); dsn != "" {
		return dbtest.Postgres(tb, dsn)
	}
	return dbtest.SQLite(tb)
}
