-- Idempotency keys: a create sent with an Idempotency-Key header is done
-- once per (tenant, caller, route, key); a retry within 24 h answers the
-- first result. state: pending (running in the server named by owner) or
-- done. response_body holds the first answer; a token create's answer holds
-- the new token, so it is sealed (encrypted at rest, sealed = TRUE).
-- sandboxes.idempotency_key is written with the sandbox row, before the
-- slow VM work, so a retry after a server crash finds the sandbox.
-- Portable SQL (SQLite and PostgreSQL); times are UTC, ids made in Go.

-- +goose Up
CREATE TABLE idempotency_keys (
    id            TEXT      NOT NULL PRIMARY KEY,
    tenant_id     TEXT      NOT NULL REFERENCES tenants (id),
    principal     TEXT      NOT NULL,
    idem_key      TEXT      NOT NULL,
    route         TEXT      NOT NULL,
    request_hash  TEXT      NOT NULL,
    state         TEXT      NOT NULL,
    owner         TEXT      NOT NULL DEFAULT '',
    status_code   INTEGER   NOT NULL DEFAULT 0,
    location      TEXT      NOT NULL DEFAULT '',
    response_body TEXT      NOT NULL DEFAULT '',
    sealed        BOOLEAN   NOT NULL DEFAULT FALSE,
    created_at    TIMESTAMP NOT NULL,
    completed_at  TIMESTAMP NULL,
    expires_at    TIMESTAMP NOT NULL
);
CREATE UNIQUE INDEX idempotency_keys_once ON idempotency_keys (tenant_id, principal, route, idem_key);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

ALTER TABLE sandboxes ADD COLUMN idempotency_key TEXT NOT NULL DEFAULT '';
CREATE INDEX sandboxes_idempotency ON sandboxes (tenant_id, idempotency_key);

-- +goose Down
DROP INDEX sandboxes_idempotency;
ALTER TABLE sandboxes DROP COLUMN idempotency_key;
DROP TABLE idempotency_keys;
