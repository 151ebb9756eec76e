// Package migrations holds the versioned SQL schema. One set of files runs on
// both SQLite and PostgreSQL, so the SQL sticks to the types and syntax both
// share (TEXT, BIGINT, INTEGER, BOOLEAN, TIMESTAMP; ids are made in Go).
package migrations

import "embed"

// FS holds the goose migration files, applied by tenants.Migrate.
//
//go:embed *.sql
var FS embed.FS
