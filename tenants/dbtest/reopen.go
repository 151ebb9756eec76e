package dbtest

import (
	"context"
	"net/url"
	"os"
	"testing"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
)

// Reopen opens a second connection pool to db's PostgreSQL database (made
// by Postgres), as a second replica of the control plane would: its own
// connections and transactions, the same rows. Closed when the test ends.
func Reopen(t testing.TB, db *gorm.DB) *gorm.DB {
	t.Helper()
	var name string
	if err := db.Raw("SELECT current_database()").Scan(&name).Error; err != nil {
		t.Fatalf("current database: %v", err)
	}
	u, err := url.Parse(os.Getenv(EnvPostgres))
	if err != nil {
		t.Fatalf("%s: %v", EnvPostgres, err)
	}
	u.Path = "/" + name
	other, err := tenants.Open(context.Background(), u.String(), "")
	if err != nil {
		t.Fatalf("reopen database %s: %v", name, err)
	}
	closeOnCleanup(t, other)
	return other
}

// PostgresDSN is STOCKADE_TEST_POSTGRES, for tests that need PostgreSQL
// itself (several replicas): missing, the test fails under CI=true and is
// skipped otherwise.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvPostgres)
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set: this test needs PostgreSQL (several replicas)", EnvPostgres)
		}
		t.Skipf("%s is not set: this test needs PostgreSQL (STOCKADE_TEST_POSTGRES=$(scripts/postgres.sh))", EnvPostgres)
	}
	return dsn
}
