package tenants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/google/uuid"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/stockade-dev/stockade/migrations"
)

// sqliteFile is the database file inside the data directory.
const sqliteFile = "stockade.db"

// Open connects to the database named by dsn: "" is the SQLite file
// dataDir/stockade.db (pure Go driver, no cgo: the store and its tests build
// without a C toolchain, and every platform runs the same SQLite);
// postgres:// or postgresql:// is PostgreSQL. Open pings the database so a
// bad DSN fails here, not in the first request.
func Open(ctx context.Context, dsn, dataDir string) (*gorm.DB, error) {
	cfg := &gorm.Config{
		Logger: logger.NewSlogLogger(slog.Default(), logger.Config{
			LogLevel:                  logger.Warn,
			SlowThreshold:             500 * time.Millisecond,
			IgnoreRecordNotFoundError: true,
			ParameterizedQueries:      true, // never put values (hashes, emails) in logs
		}),
		NowFunc:        func() time.Time { return time.Now().UTC() },
		TranslateError: true,
	}
	switch {
	case dsn == "":
		return openSQLite(ctx, dataDir, cfg)
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return openPostgres(ctx, dsn, cfg)
	default:
		// The DSN may hold a password: name only its scheme.
		scheme, _, _ := strings.Cut(dsn, ":")
		return nil, fmt.Errorf("open database: unsupported DSN scheme %q: use \"\" for SQLite in the data directory or a postgres:// URL", scheme)
	}
}

func openSQLite(ctx context.Context, dataDir string, cfg *gorm.Config) (*gorm.DB, error) {
	if dataDir == "" {
		return nil, errors.New("open sqlite: no data directory")
	}
	if strings.ContainsAny(dataDir, "?#") {
		return nil, fmt.Errorf("open sqlite: data directory %q must not contain '?' or '#'", dataDir)
	}
	if err := os.MkdirAll(dataDir, 0o711); err != nil {
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	path := filepath.Join(dataDir, sqliteFile)
	// The data dir is traversable (QEMU, running as its own user, reads the
	// guest image below it), so the database protects itself: 0600, which
	// SQLite's -wal and -shm files inherit.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	f.Close()
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	// Pragmas run on every new connection. _txlock=immediate makes every
	// transaction take the write lock at BEGIN, so concurrent writers queue
	// on busy_timeout instead of failing with SQLITE_BUSY on lock upgrade.
	dsn := path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)" +
		"&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := gorm.Open(sqlite.Open(dsn), cfg)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	// SQLite has one writer; a few connections let reads proceed beside it.
	sqlDB.SetMaxOpenConns(4)
	sqlDB.SetMaxIdleConns(4)
	sqlDB.SetConnMaxIdleTime(0)
	if err := sqlDB.PingContext(ctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	var fk int
	if err := db.WithContext(ctx).Raw("PRAGMA foreign_keys").Scan(&fk).Error; err != nil || fk != 1 {
		sqlDB.Close()
		return nil, fmt.Errorf("open sqlite %s: foreign keys not enabled (%v)", path, err)
	}
	return db, nil
}

func openPostgres(ctx context.Context, dsn string, cfg *gorm.Config) (*gorm.DB, error) {
	db, err := gorm.Open(postgres.Open(dsn), cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	sqlDB.SetMaxOpenConns(20)
	sqlDB.SetMaxIdleConns(5)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	if err := sqlDB.PingContext(ctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	return db, nil
}

// Migrate applies the embedded SQL migrations (goose Provider API, so no
// global goose state) and makes sure the installation id exists. On
// PostgreSQL a session advisory lock keeps replicas from migrating at once.
func Migrate(ctx context.Context, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var (
		dialect goose.Dialect
		opts    []goose.ProviderOption
	)
	switch name := db.Dialector.Name(); name {
	case "sqlite":
		dialect = goose.DialectSQLite3
	case "postgres":
		dialect = goose.DialectPostgres
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	default:
		return fmt.Errorf("migrate: unsupported database %q", name)
	}
	p, err := goose.NewProvider(dialect, sqlDB, migrations.FS, opts...)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := ensureInstallation(ctx, db); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// installation is the single row naming this deployment.
type installation struct {
	Singleton int `gorm:"primaryKey"`
	ID        string
	CreatedAt time.Time
}

func (installation) TableName() string { return "installation" }

// ensureInstallation returns the installation id, creating it on first use.
// ON CONFLICT DO NOTHING lets concurrent first calls agree on one id.
func ensureInstallation(ctx context.Context, db *gorm.DB) (string, error) {
	var row installation
	err := db.WithContext(ctx).Take(&row, "singleton = 1").Error
	if err == nil {
		return row.ID, nil
	}
	if !errors.Is(err, gorm.ErrRecordNotFound) {
		return "", fmt.Errorf("installation id: %w", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("installation id: %w", err)
	}
	if err := db.WithContext(ctx).Exec(
		"INSERT INTO installation (singleton, id, created_at) VALUES (1, ?, ?) ON CONFLICT (singleton) DO NOTHING",
		id.String(), time.Now().UTC().Truncate(time.Microsecond)).Error; err != nil {
		return "", fmt.Errorf("installation id: %w", err)
	}
	if err := db.WithContext(ctx).Take(&row, "singleton = 1").Error; err != nil {
		return "", fmt.Errorf("installation id: %w", err)
	}
	return row.ID, nil
}
