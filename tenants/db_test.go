package tenants_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants"
)

func TestOpenRejectsUnknownDSN(t *testing.T) {
	for _, dsn := range []string{"mysql://root:pw@localhost/x", "sqlite:///tmp/x.db", "host=localhost user=x"} {
		_, err := tenants.Open(ctx, dsn, t.TempDir())
		if err == nil {
			t.Errorf("Open(%q) = nil error; want unsupported scheme", dsn)
			continue
		}
		if strings.Contains(err.Error(), "pw") {
			t.Errorf("Open(%q) error %q leaks the password", dsn, err)
		}
	}
}

func TestOpenSQLiteSettings(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	db, err := tenants.Open(ctx, "", dir)
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	sqlDB, _ := db.DB()
	defer sqlDB.Close()
	for pragma, want := range map[string]string{"journal_mode": "wal", "foreign_keys": "1", "busy_timeout": "5000"} {
		var got string
		if err := db.Raw("PRAGMA " + pragma).Scan(&got).Error; err != nil {
			t.Fatalf("PRAGMA %s = %v", pragma, err)
		}
		if got != want {
			t.Errorf("Got(PRAGMA %s) = %s; want %s", pragma, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "stockade.db")); err != nil {
		t.Errorf("database file: %v", err)
	}
	if err := tenants.Migrate(ctx, db); err != nil {
		t.Fatalf("Migrate = %v", err)
	}
	// A foreign key is enforced: a membership of a missing tenant fails.
	err = db.Exec("INSERT INTO memberships (id, tenant_id, email, role, created_at) VALUES ('m', 'missing', 'a@b.c', 'admin', '2030-01-01 00:00:00+00:00')").Error
	if err == nil {
		t.Errorf("insert membership of a missing tenant = nil error; want foreign key violation")
	}
}

func TestMigrateTwiceAndInstallationID(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		id, err := e.store.InstallationID(ctx)
		if err != nil || len(id) != 36 {
			t.Fatalf("InstallationID = %q, %v; want a uuid", id, err)
		}
		if err := tenants.Migrate(ctx, e.db); err != nil {
			t.Fatalf("second Migrate = %v", err)
		}
		again, err := tenants.NewStore(e.db, nil).InstallationID(ctx)
		if err != nil || again != id {
			t.Errorf("Got(InstallationID after second Migrate) = %q, %v; want %q", again, err, id)
		}
		var n int64
		e.db.Table("installation").Count(&n)
		if n != 1 {
			t.Errorf("Got(installation rows) = %d; want 1", n)
		}
		if err := e.store.Ping(ctx); err != nil {
			t.Errorf("Ping = %v", err)
		}
	})
}
