-- Tenant secrets and each tenant's certificate authority. Values and the CA's
-- private key are stored only encrypted (AES-256-GCM, key derived from the
-- installation's root key, STOCKADE_SECRET_KEY), bound to their row by the
-- additional data, so a ciphertext copied into another row or tenant does not
-- decrypt. Portable SQL (SQLite and PostgreSQL).

-- +goose Up

-- One row per secret ever created. hosts is a JSON list of the host patterns
-- ("api.github.com", "*.example.com") the gateway may send the value to.
-- A revoked secret stays for the record; its name can then be used again.
CREATE TABLE secrets (
    id          TEXT      NOT NULL PRIMARY KEY,
    tenant_id   TEXT      NOT NULL REFERENCES tenants (id),
    name        TEXT      NOT NULL,
    hosts       TEXT      NOT NULL DEFAULT '[]',
    ciphertext  TEXT      NOT NULL,
    created_by  TEXT      NOT NULL DEFAULT '',
    created_at  TIMESTAMP NOT NULL,
    expires_at  TIMESTAMP NULL,
    revoked_at  TIMESTAMP NULL,
    revoked_by  TEXT      NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX secrets_tenant_live_name ON secrets (tenant_id, name) WHERE revoked_at IS NULL;
CREATE INDEX secrets_tenant ON secrets (tenant_id, id);

-- The certificate authority the egress gateway signs its per-host leaf
-- certificates with when it swaps placeholders for secrets; sandboxes of the
-- tenant trust it. One per tenant, made on first use.
CREATE TABLE tenant_cas (
    tenant_id      TEXT      NOT NULL PRIMARY KEY REFERENCES tenants (id),
    cert_pem       TEXT      NOT NULL,
    key_ciphertext TEXT      NOT NULL,
    created_at     TIMESTAMP NOT NULL,
    expires_at     TIMESTAMP NOT NULL
);

-- +goose Down
DROP TABLE tenant_cas;
DROP TABLE secrets;
