-- Terminal sessions: one row per PTY opened in a sandbox, indexing its
-- asciicast v2 recording in the data dir. Portable SQL (SQLite and
-- PostgreSQL); times are UTC, written by the application.

-- +goose Up

-- recording is the recording's path relative to the data dir
-- (recordings/<tenant>/<session>.cast), '' once retention removed it.
-- bytes_out and bytes_in count terminal output and keystrokes; dropped and
-- dropped_bytes what the recorder's spool had to drop (the recording has a
-- marker where); watchers_cut the clients cut off for being too slow.
-- seen_at is refreshed while the server holding a live session runs: a
-- live session not seen for minutes was lost with its server and is ended.
-- Sessions outlive their sandbox, so sandbox_id carries no foreign key.
CREATE TABLE terminal_sessions (
    id              TEXT      NOT NULL PRIMARY KEY,
    tenant_id       TEXT      NOT NULL REFERENCES tenants (id),
    sandbox_id      TEXT      NOT NULL,
    opened_by       TEXT      NOT NULL DEFAULT '',
    opened_by_name  TEXT      NOT NULL DEFAULT '',
    opened_by_kind  TEXT      NOT NULL DEFAULT '',
    argv            TEXT      NOT NULL DEFAULT '[]',
    cols            INTEGER   NOT NULL,
    rows            INTEGER   NOT NULL,
    started_at      TIMESTAMP NOT NULL,
    ended_at        TIMESTAMP NULL,
    end_reason      TEXT      NOT NULL DEFAULT '',
    exit_code       INTEGER   NULL,
    bytes_out       BIGINT    NOT NULL DEFAULT 0,
    bytes_in        BIGINT    NOT NULL DEFAULT 0,
    record_input    BOOLEAN   NOT NULL DEFAULT FALSE,
    recording       TEXT      NOT NULL DEFAULT '',
    recording_bytes BIGINT    NOT NULL DEFAULT 0,
    dropped         BIGINT    NOT NULL DEFAULT 0,
    dropped_bytes   BIGINT    NOT NULL DEFAULT 0,
    watchers_cut    INTEGER   NOT NULL DEFAULT 0,
    retention_days  INTEGER   NOT NULL,
    purged_at       TIMESTAMP NULL,
    seen_at         TIMESTAMP NOT NULL
);
CREATE INDEX terminal_sessions_tenant ON terminal_sessions (tenant_id, started_at);
CREATE INDEX terminal_sessions_sandbox ON terminal_sessions (tenant_id, sandbox_id);
CREATE INDEX terminal_sessions_live ON terminal_sessions (ended_at);

-- +goose Down
DROP TABLE terminal_sessions;
