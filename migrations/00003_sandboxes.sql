-- Sandboxes: containers nested in a tenant's VMs, every state change they
-- went through, and the commands run in them. Portable SQL (SQLite and
-- PostgreSQL); times are UTC, written by the application.

-- +goose Up

-- One row per sandbox ever created. state: creating | running (active,
-- counted against the tenant quota) or stopped | failed | destroyed (ended).
-- vm_id is empty until the sandbox is placed. env_keys holds the names of the
-- environment variables only: their values may be credentials and live in
-- the VM alone.
CREATE TABLE sandboxes (
    id                   TEXT      NOT NULL PRIMARY KEY,
    tenant_id            TEXT      NOT NULL REFERENCES tenants (id),
    vm_id                TEXT      NOT NULL DEFAULT '',
    state                TEXT      NOT NULL,
    state_reason         TEXT      NOT NULL DEFAULT '',
    template             TEXT      NOT NULL,
    template_version     TEXT      NOT NULL DEFAULT '',
    vcpus                INTEGER   NOT NULL,
    memory_mib           INTEGER   NOT NULL,
    timeout_seconds      INTEGER   NOT NULL,
    idle_timeout_seconds INTEGER   NOT NULL DEFAULT 0,
    env_keys             TEXT      NOT NULL DEFAULT '[]',
    metadata             TEXT      NOT NULL DEFAULT '{}',
    created_by           TEXT      NOT NULL DEFAULT '',
    created_by_name      TEXT      NOT NULL DEFAULT '',
    created_at           TIMESTAMP NOT NULL,
    started_at           TIMESTAMP NULL,
    expires_at           TIMESTAMP NOT NULL,
    ended_at             TIMESTAMP NULL,
    last_active_at       TIMESTAMP NULL,
    create_ms            BIGINT    NOT NULL DEFAULT 0,
    guest_ready_ms       BIGINT    NOT NULL DEFAULT 0,
    execs                INTEGER   NOT NULL DEFAULT 0
);
CREATE INDEX sandboxes_tenant ON sandboxes (tenant_id, id);
CREATE INDEX sandboxes_state ON sandboxes (state, vm_id);

-- Every state change of a sandbox, with why, in order.
CREATE TABLE sandbox_events (
    id         TEXT      NOT NULL PRIMARY KEY,
    sandbox_id TEXT      NOT NULL REFERENCES sandboxes (id),
    tenant_id  TEXT      NOT NULL REFERENCES tenants (id),
    state      TEXT      NOT NULL,
    reason     TEXT      NOT NULL DEFAULT '',
    actor      TEXT      NOT NULL DEFAULT '',
    at         TIMESTAMP NOT NULL
);
CREATE INDEX sandbox_events_sandbox ON sandbox_events (sandbox_id, at);

-- One row per command run in a sandbox: the command line, how it ended and
-- the start of its output (stdout and stderr each truncated; the byte counts
-- are the whole output).
CREATE TABLE sandbox_execs (
    id           TEXT      NOT NULL PRIMARY KEY,
    sandbox_id   TEXT      NOT NULL REFERENCES sandboxes (id),
    tenant_id    TEXT      NOT NULL REFERENCES tenants (id),
    argv         TEXT      NOT NULL,
    cwd          TEXT      NOT NULL DEFAULT '',
    actor        TEXT      NOT NULL DEFAULT '',
    started_at   TIMESTAMP NOT NULL,
    ended_at     TIMESTAMP NULL,
    exit_code    INTEGER   NULL,
    reason       TEXT      NOT NULL DEFAULT '',
    duration_ms  BIGINT    NOT NULL DEFAULT 0,
    stdout       TEXT      NOT NULL DEFAULT '',
    stderr       TEXT      NOT NULL DEFAULT '',
    stdout_bytes BIGINT    NOT NULL DEFAULT 0,
    stderr_bytes BIGINT    NOT NULL DEFAULT 0,
    truncated    BOOLEAN   NOT NULL DEFAULT FALSE
);
CREATE INDEX sandbox_execs_sandbox ON sandbox_execs (sandbox_id, started_at);

-- +goose Down
DROP TABLE sandbox_execs;
DROP TABLE sandbox_events;
DROP TABLE sandboxes;
