-- Persistent volumes (sandbox/volumes): a tenant's sparse ext4 image on the
-- host (DataDir/volumes/<installation>/<tenant>/<id>.img), hot-attached to
-- the tenant's VMs and bind-mounted into sandboxes. volume_attachments says
-- which VM holds the disk (read_only: attached as a read-only disk, mounted
-- ro,noload); volume_mounts which sandbox uses it, at which path. A volume
-- is attached read-write to at most one VM, and then to no other. The
-- tenant's volume quota (GiB in all) sits with its other quotas.
-- Portable SQL (SQLite and PostgreSQL); times are UTC, ids made in Go.

-- +goose Up
CREATE TABLE volumes (
    id              TEXT      NOT NULL PRIMARY KEY,
    tenant_id       TEXT      NOT NULL REFERENCES tenants (id),
    name            TEXT      NOT NULL,
    size_gib        INTEGER   NOT NULL,
    state           TEXT      NOT NULL,
    created_by      TEXT      NOT NULL DEFAULT '',
    created_by_name TEXT      NOT NULL DEFAULT '',
    created_at      TIMESTAMP NOT NULL,
    updated_at      TIMESTAMP NOT NULL,
    last_used_at    TIMESTAMP NULL,
    UNIQUE (tenant_id, name)
);

CREATE TABLE volume_attachments (
    volume_id   TEXT      NOT NULL REFERENCES volumes (id),
    vm_id       TEXT      NOT NULL,
    tenant_id   TEXT      NOT NULL REFERENCES tenants (id),
    read_only   BOOLEAN   NOT NULL,
    attached_at TIMESTAMP NOT NULL,
    PRIMARY KEY (volume_id, vm_id)
);
CREATE INDEX volume_attachments_vm ON volume_attachments (vm_id);

CREATE TABLE volume_mounts (
    volume_id  TEXT      NOT NULL REFERENCES volumes (id),
    sandbox_id TEXT      NOT NULL,
    tenant_id  TEXT      NOT NULL REFERENCES tenants (id),
    vm_id      TEXT      NOT NULL,
    path       TEXT      NOT NULL,
    read_only  BOOLEAN   NOT NULL,
    created_at TIMESTAMP NOT NULL,
    PRIMARY KEY (volume_id, sandbox_id)
);
CREATE INDEX volume_mounts_sandbox ON volume_mounts (tenant_id, sandbox_id);

ALTER TABLE tenant_quotas ADD COLUMN max_volume_gib INTEGER NOT NULL DEFAULT 20;

-- +goose Down
ALTER TABLE tenant_quotas DROP COLUMN max_volume_gib;
DROP TABLE volume_mounts;
DROP TABLE volume_attachments;
DROP TABLE volumes;
