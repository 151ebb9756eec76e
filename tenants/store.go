package tenants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtime"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Store is the tenant-scoped data access for tenants, users, memberships,
// API tokens and sessions. Every tenant-owned method takes the tenant and
// scopes its query by it: an object of another tenant is errdefs.ErrNotFound. Every
// change writes its audit event in the same transaction.
type Store struct {
	db    *gorm.DB
	clock dbtime.Clock
}

// NewStore returns a Store on db (from Open, migrated). A nil clock means
// time.Now.
func NewStore(db *gorm.DB, clock func() time.Time) *Store {
	return &Store{db: db, clock: clock}
}

// now is the store's time as the database keeps it.
func (s *Store) now() time.Time { return s.clock.Now() }

// InstallationID returns the id of this deployment, made once and kept in
// the database.
func (s *Store) InstallationID(ctx context.Context) (string, error) {
	return ensureInstallation(ctx, s.db)
}

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

// tx runs fn in one transaction.
func (s *Store) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return s.db.WithContext(ctx).Transaction(fn)
}

// write records e inside tx at the store's time.
func (s *Store) write(tx *gorm.DB, e audit.Event) error {
	e.Time = s.now()
	return audit.Write(tx, e)
}

func newID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("new id: %w", err)
	}
	return id.String(), nil
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// notFound maps GORM's not-found to errdefs.ErrNotFound and passes other errors on.
func notFound(err error) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return errdefs.ErrNotFound
	}
	return err
}

// duplicate reports whether err is a unique-constraint violation, whether or
// not the DB was opened with TranslateError.
func (s *Store) duplicate(err error) bool {
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return true
	}
	if t, ok := s.db.Dialector.(gorm.ErrorTranslator); ok {
		return errors.Is(t.Translate(err), gorm.ErrDuplicatedKey)
	}
	return false
}

// lockTenant reads the tenant row FOR UPDATE (PostgreSQL; SQLite transactions
// are already serialized), so check-then-write rules per tenant, like keeping
// one admin, cannot race. A missing tenant is errdefs.ErrNotFound.
func lockTenant(tx *gorm.DB, tenantID string) (Tenant, error) {
	var t Tenant
	err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Take(&t, "id = ?", tenantID).Error
	return t, notFound(err)
}
