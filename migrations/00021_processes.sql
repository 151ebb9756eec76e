-- Processes: commands started through the process API
-- (/api/v1/sandboxes/:id/processes), detached from the request that started
-- them. The agent holds each as a kept exec named "proc-<id>"; the control
-- plane that holds the sandbox's VM streams it and re-attaches it after a
-- restart. pid is the process id inside the sandbox's pid namespace (what
-- the API names a process by); a pid can come back once its process ended,
-- so a lookup by pid takes the newest row. state: running, exited or lost
-- (the agent no longer had it). Processes outlive nothing: a row whose
-- sandbox ended is closed. Portable SQL (SQLite and PostgreSQL); times are
-- UTC, ids made in Go.

-- +goose Up
CREATE TABLE processes (
    id              TEXT      NOT NULL PRIMARY KEY,
    tenant_id       TEXT      NOT NULL REFERENCES tenants (id),
    sandbox_id      TEXT      NOT NULL,
    pid             INTEGER   NOT NULL DEFAULT 0,
    argv            TEXT      NOT NULL DEFAULT '[]',
    cwd             TEXT      NOT NULL DEFAULT '',
    tag             TEXT      NOT NULL DEFAULT '',
    tty             BOOLEAN   NOT NULL DEFAULT FALSE,
    state           TEXT      NOT NULL,
    exit_code       INTEGER   NULL,
    signal          TEXT      NOT NULL DEFAULT '',
    reason          TEXT      NOT NULL DEFAULT '',
    started_by      TEXT      NOT NULL DEFAULT '',
    started_by_name TEXT      NOT NULL DEFAULT '',
    started_at      TIMESTAMP NOT NULL,
    ended_at        TIMESTAMP NULL,
    output_bytes    BIGINT    NOT NULL DEFAULT 0
);
CREATE INDEX processes_sandbox ON processes (tenant_id, sandbox_id, pid);
CREATE INDEX processes_running ON processes (state);

-- +goose Down
DROP TABLE processes;
