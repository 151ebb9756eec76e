-- Usage metering and billing: a meter per sandbox (what has been accounted
-- so far), the ledger (what each sandbox used in each hour), raw samples
-- (kept for a while for charts), the price book, and the monthly CPU-hours
-- quota. Portable SQL (SQLite and PostgreSQL); times are UTC, written by the
-- application. Quantities are integers in small units so that sums are
-- exact: milliseconds, nanoseconds, bytes.

-- +goose Up

-- One row per sandbox that ever ran. accounted_to is the instant up to which
-- its allocation is in the ledger; cpu_ns, io_*_bytes are the last
-- cumulative cgroup figures accounted, so a sample seen twice (a restart, a
-- second replica) adds nothing. closed_at is set once, when it stops.
CREATE TABLE usage_meters (
    sandbox_id        TEXT      NOT NULL PRIMARY KEY,
    tenant_id         TEXT      NOT NULL REFERENCES tenants (id),
    template          TEXT      NOT NULL DEFAULT '',
    user_id           TEXT      NOT NULL DEFAULT '',
    user_name         TEXT      NOT NULL DEFAULT '',
    vcpus             INTEGER   NOT NULL,
    memory_mib        INTEGER   NOT NULL,
    started_at        TIMESTAMP NOT NULL,
    accounted_to      TIMESTAMP NOT NULL,
    last_sample_at    TIMESTAMP NULL,
    closed_at         TIMESTAMP NULL,
    cpu_ns            BIGINT    NOT NULL DEFAULT 0,
    io_read_bytes     BIGINT    NOT NULL DEFAULT 0,
    io_write_bytes    BIGINT    NOT NULL DEFAULT 0,
    memory_peak_bytes BIGINT    NOT NULL DEFAULT 0
);
CREATE INDEX usage_meters_open ON usage_meters (closed_at, tenant_id);

-- The ledger: one row per sandbox per hour it used anything in. alloc_*:
-- what it held (vCPU-milliseconds, MiB-milliseconds, wall milliseconds);
-- cpu_ns: CPU time its cgroup measured; egress_*: bytes through the egress
-- gateway (counted when each connection closes).
CREATE TABLE usage_ledger (
    sandbox_id        TEXT      NOT NULL,
    period_start      TIMESTAMP NOT NULL,
    tenant_id         TEXT      NOT NULL REFERENCES tenants (id),
    template          TEXT      NOT NULL DEFAULT '',
    user_id           TEXT      NOT NULL DEFAULT '',
    alloc_vcpu_ms     BIGINT    NOT NULL DEFAULT 0,
    alloc_mib_ms      BIGINT    NOT NULL DEFAULT 0,
    wall_ms           BIGINT    NOT NULL DEFAULT 0,
    cpu_ns            BIGINT    NOT NULL DEFAULT 0,
    egress_up_bytes   BIGINT    NOT NULL DEFAULT 0,
    egress_down_bytes BIGINT    NOT NULL DEFAULT 0,
    io_read_bytes     BIGINT    NOT NULL DEFAULT 0,
    io_write_bytes    BIGINT    NOT NULL DEFAULT 0,
    memory_peak_bytes BIGINT    NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, sandbox_id, period_start)
);
CREATE INDEX usage_ledger_tenant ON usage_ledger (tenant_id, period_start);
CREATE INDEX usage_ledger_period ON usage_ledger (period_start);

-- Raw samples, cumulative as the cgroup reports them; pruned after a while.
CREATE TABLE usage_samples (
    sandbox_id           TEXT      NOT NULL,
    at                   TIMESTAMP NOT NULL,
    tenant_id            TEXT      NOT NULL REFERENCES tenants (id),
    cpu_ns               BIGINT    NOT NULL DEFAULT 0,
    memory_current_bytes BIGINT    NOT NULL DEFAULT 0,
    memory_peak_bytes    BIGINT    NOT NULL DEFAULT 0,
    pids                 INTEGER   NOT NULL DEFAULT 0,
    io_read_bytes        BIGINT    NOT NULL DEFAULT 0,
    io_write_bytes       BIGINT    NOT NULL DEFAULT 0,
    PRIMARY KEY (sandbox_id, at)
);
CREATE INDEX usage_samples_tenant ON usage_samples (tenant_id, at);

-- The price book: append-only versions. tenant_id '' is the platform's list
-- price; a tenant's own row overrides it from effective_from on. Prices are
-- per vCPU-second and GiB-second allocated, per CPU-second measured, and per
-- GB (10^9 bytes) through the egress gateway.
CREATE TABLE price_books (
    id              TEXT             NOT NULL PRIMARY KEY,
    tenant_id       TEXT             NOT NULL DEFAULT '',
    effective_from  TIMESTAMP        NOT NULL,
    currency        TEXT             NOT NULL,
    vcpu_second     DOUBLE PRECISION NOT NULL DEFAULT 0,
    gib_second      DOUBLE PRECISION NOT NULL DEFAULT 0,
    cpu_second      DOUBLE PRECISION NOT NULL DEFAULT 0,
    egress_gb       DOUBLE PRECISION NOT NULL DEFAULT 0,
    created_by      TEXT             NOT NULL DEFAULT '',
    created_at      TIMESTAMP        NOT NULL
);
CREATE INDEX price_books_tenant ON price_books (tenant_id, effective_from);

ALTER TABLE tenant_quotas ADD COLUMN max_cpu_hours_monthly INTEGER NOT NULL DEFAULT 1000;

-- +goose Down
ALTER TABLE tenant_quotas DROP COLUMN max_cpu_hours_monthly;
DROP TABLE price_books;
DROP TABLE usage_samples;
DROP TABLE usage_ledger;
DROP TABLE usage_meters;
