-- One server per installation: `stockade serve` takes this lease before it
-- reconciles anything, keeps it with a heartbeat, and releases it on a
-- clean shutdown. A second server finds it held (holder, hostname, pid,
-- started_at say by whom) and refuses to start, or waits for it to expire.
-- The one row exists from the start, expired. Portable SQL.

-- +goose Up
CREATE TABLE installation_lease (
    singleton    INTEGER   NOT NULL PRIMARY KEY,
    holder       TEXT      NOT NULL DEFAULT '',
    hostname     TEXT      NOT NULL DEFAULT '',
    pid          INTEGER   NOT NULL DEFAULT 0,
    started_at   TIMESTAMP NOT NULL,
    heartbeat_at TIMESTAMP NOT NULL,
    expires_at   TIMESTAMP NOT NULL,
    epoch        BIGINT    NOT NULL DEFAULT 0
);
INSERT INTO installation_lease (singleton, started_at, heartbeat_at, expires_at)
    VALUES (1, '1970-01-01 00:00:00', '1970-01-01 00:00:00', '1970-01-01 00:00:00');

-- +goose Down
DROP TABLE installation_lease;
