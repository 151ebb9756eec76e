-- Incident response: an operator can freeze a tenant. While frozen_at is set
-- its sandboxes are destroyed and no sandbox or VM may start; recordings and
-- logs stay. Portable SQL (SQLite and PostgreSQL).

-- +goose Up
ALTER TABLE tenants ADD COLUMN frozen_at TIMESTAMP NULL;
ALTER TABLE tenants ADD COLUMN frozen_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE tenants ADD COLUMN frozen_by TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE tenants DROP COLUMN frozen_by;
ALTER TABLE tenants DROP COLUMN frozen_reason;
ALTER TABLE tenants DROP COLUMN frozen_at;
