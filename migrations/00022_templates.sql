-- Tenant templates (sandbox/templates): a tenant's own sandbox templates,
-- next to the platform's built-ins (which stay in the image manifest).
-- templates is one row per tenant and name; template_versions one per
-- build or import of it. A version is "building" from Begin until Finish
-- ("ready", with its image's digest and size) or Fail ("failed", with the
-- reason). deleted_at set: gone (the image removed, the row kept for the
-- record and for the sandboxes that ran it). in_vm_name is the name the
-- guest agent mounts the version by ("t" + a short id: two versions can
-- sit in one VM). A sandbox from a tenant template stores the version's id
-- in sandboxes.template_version, and its defaults' workdir and user in
-- sandboxes.template_workdir/template_user. tenant_quotas gains the template storage
-- quota (MiB). Portable SQL (SQLite and PostgreSQL); ids made in Go.

-- +goose Up
CREATE TABLE templates (
    id          TEXT      NOT NULL PRIMARY KEY,
    tenant_id   TEXT      NOT NULL REFERENCES tenants (id),
    name        TEXT      NOT NULL,
    source      TEXT      NOT NULL,
    created_by  TEXT      NOT NULL DEFAULT '',
    created_at  TIMESTAMP NOT NULL,
    deleted_at  TIMESTAMP NULL
);
CREATE UNIQUE INDEX templates_live_name ON templates (tenant_id, name) WHERE deleted_at IS NULL;

CREATE TABLE template_versions (
    id             TEXT      NOT NULL PRIMARY KEY,
    template_id    TEXT      NOT NULL REFERENCES templates (id),
    tenant_id      TEXT      NOT NULL REFERENCES tenants (id),
    name           TEXT      NOT NULL,
    seq            INTEGER   NOT NULL,
    in_vm_name     TEXT      NOT NULL,
    source         TEXT      NOT NULL,
    source_ref     TEXT      NOT NULL DEFAULT '',
    digest         TEXT      NOT NULL DEFAULT '',
    size_bytes     BIGINT    NOT NULL DEFAULT 0,
    estimate_bytes BIGINT    NOT NULL DEFAULT 0,
    state          TEXT      NOT NULL,
    reason         TEXT      NOT NULL DEFAULT '',
    defaults       TEXT      NOT NULL DEFAULT '{}',
    path           TEXT      NOT NULL DEFAULT '',
    created_by     TEXT      NOT NULL DEFAULT '',
    created_at     TIMESTAMP NOT NULL,
    ready_at       TIMESTAMP NULL,
    deleted_at     TIMESTAMP NULL
);
CREATE UNIQUE INDEX template_versions_seq ON template_versions (template_id, seq);
CREATE INDEX template_versions_tenant ON template_versions (tenant_id, name, state);

ALTER TABLE tenant_quotas ADD COLUMN max_template_mib INTEGER NOT NULL DEFAULT 10240;
ALTER TABLE sandboxes ADD COLUMN template_workdir TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN template_user TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE sandboxes DROP COLUMN template_user;
ALTER TABLE sandboxes DROP COLUMN template_workdir;
ALTER TABLE tenant_quotas DROP COLUMN max_template_mib;
DROP TABLE template_versions;
DROP TABLE templates;
