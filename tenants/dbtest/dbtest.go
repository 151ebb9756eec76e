// Package dbtest gives tests fresh, migrated databases: SQLite always, and
// PostgreSQL when STOCKADE_TEST_POSTGRES names a server (scripts/postgres.sh
// starts one and prints its DSN).
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// EnvPostgres names a PostgreSQL DSN whose user may CREATE DATABASE.
const EnvPostgres = "STOCKADE_TEST_POSTGRES"

// DB is one test database.
type DB struct {
	Name string // "sqlite" or "postgres"
	DB   *gorm.DB
}

// Databases returns a fresh migrated SQLite database and, when
// STOCKADE_TEST_POSTGRES is set, a fresh migrated PostgreSQL database
// (dropped when the test ends). Without it, the test fails under CI=true and
// otherwise runs on SQLite only, saying why.
func Databases(t testing.TB) []DB {
	t.Helper()
	dbs := []DB{{Name: "sqlite", DB: SQLite(t)}}
	dsn := os.Getenv(EnvPostgres)
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set: CI must run the store tests on PostgreSQL too (STOCKADE_TEST_POSTGRES=$(scripts/postgres.sh))", EnvPostgres)
		}
		t.Logf("%s is not set: testing SQLite only; run with %s=$(scripts/postgres.sh) to test PostgreSQL too", EnvPostgres, EnvPostgres)
		return dbs
	}
	return append(dbs, DB{Name: "postgres", DB: Postgres(t, dsn)})
}

// SQLite returns a fresh migrated SQLite database in t.TempDir().
func SQLite(t testing.TB) *gorm.DB {
	t.Helper()
	ctx := context.Background()
	db, err := tenants.Open(ctx, "", t.TempDir())
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	closeOnCleanup(t, db)
	if err := tenants.Migrate(ctx, db); err != nil {
		t.Fatalf("migrate sqlite: %v", err)
	}
	return db
}

// Postgres creates a uniquely named database on the server of adminDSN,
// migrates it, and drops it when the test ends.
func Postgres(t testing.TB, adminDSN string) *gorm.DB {
	t.Helper()
	ctx := context.Background()
	u, err := url.Parse(adminDSN)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL", EnvPostgres)
	}
	admin, err := tenants.Open(ctx, adminDSN, "")
	if err != nil {
		t.Fatalf("connect to test postgres server: %v", err)
	}
	closeOnCleanup(t, admin)

	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := "stockade_test_" + hex.EncodeToString(b)
	if err := admin.WithContext(ctx).Exec("CREATE DATABASE " + name).Error; err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	// Registered before the test database's close, so it runs after it.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := admin.WithContext(ctx).Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)").Error; err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})

	u.Path = "/" + name
	db, err := tenants.Open(ctx, u.String(), "")
	if err != nil {
		t.Fatalf("open database %s: %v", name, err)
	}
	closeOnCleanup(t, db)
	if err := tenants.Migrate(ctx, db); err != nil {
		t.Fatalf("migrate database %s: %v", name, err)
	}
	return db
}

func closeOnCleanup(t testing.TB, db *gorm.DB) {
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
}

// Count returns the number of rows in each table, for asserting that a
// rejected call wrote nothing but the record of its refusal.
func Count(t testing.TB, db *gorm.DB) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, table := range Tables() {
		var n int64
		q := db.Table(table)
		if table == "audit_events" {
			// A refused request records its refusal and nothing else.
			q = q.Where("type NOT IN ?", RefusalEvents())
		}
		if err := q.Count(&n).Error; err != nil {
			t.Fatalf("count %s: %v", table, err)
		}
		out[table] = n
	}
	return out
}

// RefusalEvents are the audit events a refused request writes (rate-limited);
// Count leaves them out of audit_events.
func RefusalEvents() []string {
	return []string{audit.TypeAccessDenied, audit.TypeTokenFailed, audit.TypeLoginFailed}
}

// Tables lists the application tables.
func Tables() []string {
	return []string{"installation", "tenants", "users", "memberships", "api_tokens", "sessions", "audit_events",
		"tenant_quotas", "hosts", "vm_pools", "vms", "sandboxes", "sandbox_events", "sandbox_execs",
		"terminal_sessions", "policies", "egress_events", "secrets", "tenant_cas",
		"usage_meters", "usage_ledger", "usage_samples", "price_books",
		"compliance_results", "compliance_changes", "probe_runs",
		"workflows", "workflow_settings", "github_deliveries", "workflow_runs", "workflow_run_steps", "notify_deliveries",
		"webhook_endpoints", "integration_outbox", "webhook_deliveries", "templates", "template_versions", "template_builds"}
}

// Equal reports whether two Count results match, and describes the first
// difference.
func Equal(a, b map[string]int64) (bool, string) {
	var diffs []string
	for _, table := range Tables() {
		if a[table] != b[table] {
			diffs = append(diffs, fmt.Sprintf("%s %d -> %d", table, a[table], b[table]))
		}
	}
	return len(diffs) == 0, strings.Join(diffs, ", ")
}
