-- Tenant policies: append-only versions of one JSON document per tenant.
-- A tenant without a row runs under the built-in defaults (version 0).
-- Portable SQL (SQLite and PostgreSQL); times are UTC, written by the
-- application.

-- +goose Up

-- doc is the whole policy as JSON; rolled_back_from is the version whose
-- document a rollback copied (NULL: an edit).
CREATE TABLE policies (
    tenant_id        TEXT      NOT NULL REFERENCES tenants (id),
    version          INTEGER   NOT NULL,
    doc              TEXT      NOT NULL,
    author_id        TEXT      NOT NULL DEFAULT '',
    author_name      TEXT      NOT NULL DEFAULT '',
    author_kind      TEXT      NOT NULL DEFAULT '',
    reason           TEXT      NOT NULL DEFAULT '',
    rolled_back_from INTEGER   NULL,
    created_at       TIMESTAMP NOT NULL,
    PRIMARY KEY (tenant_id, version)
);

-- The policy version each sandbox started with (0: the defaults).
ALTER TABLE sandboxes ADD COLUMN policy_version INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE sandboxes DROP COLUMN policy_version;
DROP TABLE policies;
