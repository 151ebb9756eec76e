-- Tenant quotas, libvirt hosts, per-tenant VM pools and the VMs themselves.
-- Portable SQL (SQLite and PostgreSQL); times are UTC, written by the
-- application.

-- +goose Up

-- One row per tenant, created with the defaults the first time the quota is
-- read (tenants.LockQuota), so an operator can later change it.
CREATE TABLE tenant_quotas (
    tenant_id      TEXT      NOT NULL PRIMARY KEY REFERENCES tenants (id),
    max_vms        INTEGER   NOT NULL,
    max_vcpus      INTEGER   NOT NULL,
    max_memory_mib INTEGER   NOT NULL,
    max_sandboxes  INTEGER   NOT NULL,
    updated_at     TIMESTAMP NOT NULL,
    updated_by     TEXT      NOT NULL DEFAULT ''
);

-- A libvirt host from STOCKADE_LIBVIRT_URIS, with the capacity libvirt
-- reported when it was last reached. health is 'ok' or 'unavailable'.
CREATE TABLE hosts (
    uri             TEXT      NOT NULL PRIMARY KEY,
    cpus            INTEGER   NOT NULL DEFAULT 0,
    memory_kib      BIGINT    NOT NULL DEFAULT 0,
    free_memory_kib BIGINT    NOT NULL DEFAULT 0,
    domain_type     TEXT      NOT NULL DEFAULT '',
    health          TEXT      NOT NULL,
    health_reason   TEXT      NOT NULL DEFAULT '',
    first_seen_at   TIMESTAMP NOT NULL,
    last_seen_at    TIMESTAMP NULL,
    updated_at      TIMESTAMP NOT NULL
);

-- A tenant's pool settings; no row means the defaults.
CREATE TABLE vm_pools (
    tenant_id           TEXT      NOT NULL PRIMARY KEY REFERENCES tenants (id),
    vcpus               INTEGER   NOT NULL,
    memory_mib          INTEGER   NOT NULL,
    max_vms             INTEGER   NOT NULL,
    warm_vms            INTEGER   NOT NULL,
    recycle_after_hours INTEGER   NOT NULL,
    updated_at          TIMESTAMP NOT NULL,
    updated_by          TEXT      NOT NULL DEFAULT ''
);

-- One row per VM ever booted. state: booting | running | stopping (active,
-- counted against quotas) or stopped | lost | failed (ended). phase is the
-- boot progress: defining, booting, handshake, running (then stopping).
-- acquired_at is set while a VM is handed out; NULL means idle (warm).
CREATE TABLE vms (
    id               TEXT      NOT NULL PRIMARY KEY,
    tenant_id        TEXT      NOT NULL REFERENCES tenants (id),
    host_uri         TEXT      NOT NULL REFERENCES hosts (uri),
    state            TEXT      NOT NULL,
    state_reason     TEXT      NOT NULL DEFAULT '',
    phase            TEXT      NOT NULL DEFAULT '',
    phase_at         TIMESTAMP NOT NULL,
    vcpus            INTEGER   NOT NULL,
    memory_mib       INTEGER   NOT NULL,
    image_version    TEXT      NOT NULL DEFAULT '',
    agent_version    TEXT      NOT NULL DEFAULT '',
    kernel_version   TEXT      NOT NULL DEFAULT '',
    domain_uuid      TEXT      NOT NULL DEFAULT '',
    boot_ms          BIGINT    NOT NULL DEFAULT 0,
    created_by       TEXT      NOT NULL DEFAULT '',
    created_at       TIMESTAMP NOT NULL,
    started_at       TIMESTAMP NULL,
    last_seen_at     TIMESTAMP NULL,
    ended_at         TIMESTAMP NULL,
    recycle_after    TIMESTAMP NULL,
    acquired_at      TIMESTAMP NULL,
    sandboxes_served INTEGER   NOT NULL DEFAULT 0
);
CREATE INDEX vms_tenant ON vms (tenant_id, id);
CREATE INDEX vms_state ON vms (state, host_uri);

-- +goose Down
DROP TABLE vms;
DROP TABLE vm_pools;
DROP TABLE hosts;
DROP TABLE tenant_quotas;
