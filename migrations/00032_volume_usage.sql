-- Volume storage billing (tenants/usage, written by sandbox/volumes): each
-- row is one stretch of time a volume had one provisioned size, from
-- started_at until ended_at (NULL: it still has it). Create opens a row,
-- resize closes it and opens the next, delete closes it, each in the same
-- transaction as the change. The price of a GiB held for a whole calendar
-- month (UTC) sits next to the other prices in price_books.
-- Portable SQL (SQLite and PostgreSQL); times are UTC, ids made in Go.

-- +goose Up
CREATE TABLE volume_usage (
    id          TEXT      NOT NULL PRIMARY KEY,
    tenant_id   TEXT      NOT NULL REFERENCES tenants (id),
    volume_id   TEXT      NOT NULL,
    volume_name TEXT      NOT NULL,
    size_gib    INTEGER   NOT NULL,
    started_at  TIMESTAMP NOT NULL,
    ended_at    TIMESTAMP NULL
);
CREATE INDEX volume_usage_tenant ON volume_usage (tenant_id, started_at);
CREATE INDEX volume_usage_volume ON volume_usage (volume_id);

-- Volumes made before this migration are billed from when they were made.
INSERT INTO volume_usage (id, tenant_id, volume_id, volume_name, size_gib, started_at, ended_at)
SELECT 'vu-' || id, tenant_id, id, name, size_gib, created_at, NULL FROM volumes;

ALTER TABLE price_books ADD COLUMN volume_gib_month DOUBLE PRECISION NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE price_books DROP COLUMN volume_gib_month;
DROP TABLE volume_usage;
