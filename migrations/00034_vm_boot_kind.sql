-- How each VM started (sandbox/vmpool snapshot.go): "restored" from a
-- memory snapshot of a booted guest, or "cold: <why it did not restore>".
-- Portable SQL (SQLite and PostgreSQL).

-- +goose Up
ALTER TABLE vms ADD COLUMN boot_kind TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE vms DROP COLUMN boot_kind;
