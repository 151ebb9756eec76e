-- Preview links: a signed, expiring URL that reaches one port of one
-- sandbox without a session (sandbox/previews.go). Only the SHA-256 of the
-- link's token is kept; revoked_at set, or expires_at past, ends it.
-- Portable SQL.

-- +goose Up
CREATE TABLE sandbox_preview_links (
    id          TEXT      NOT NULL PRIMARY KEY,
    tenant_id   TEXT      NOT NULL REFERENCES tenants (id),
    sandbox_id  TEXT      NOT NULL,
    port        INTEGER   NOT NULL,
    token_hash  TEXT      NOT NULL UNIQUE,
    created_by  TEXT      NOT NULL DEFAULT '',
    created_at  TIMESTAMP NOT NULL,
    expires_at  TIMESTAMP NOT NULL,
    revoked_at  TIMESTAMP NULL,
    revoked_by  TEXT      NOT NULL DEFAULT ''
);
CREATE INDEX sandbox_preview_links_sandbox ON sandbox_preview_links (tenant_id, sandbox_id, created_at);

-- +goose Down
DROP TABLE sandbox_preview_links;
