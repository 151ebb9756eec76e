-- Several `stockade serve` replicas on one PostgreSQL database.
-- replicas: each running server registers itself (id, the internal URL the
-- others reach it at, who it is) and renews heartbeat_at/expires_at every few
-- seconds; a row past expires_at is a dead replica.
-- vm_leases: the one replica that owns each VM's agent channel. Only the
-- owner opens the channel; epoch grows each time the lease changes hands
-- (fencing: an old owner that comes back sees a newer epoch and lets go).
-- installation_lease (00020) becomes the leader lease: its holder is the
-- replica id of the leader, its epoch fences the singleton loops.
-- Portable SQL.

-- +goose Up
CREATE TABLE replicas (
    id           TEXT      NOT NULL PRIMARY KEY,
    internal_url TEXT      NOT NULL,
    hostname     TEXT      NOT NULL DEFAULT '',
    pid          INTEGER   NOT NULL DEFAULT 0,
    started_at   TIMESTAMP NOT NULL,
    heartbeat_at TIMESTAMP NOT NULL,
    expires_at   TIMESTAMP NOT NULL
);
CREATE TABLE vm_leases (
    vm_id        TEXT      NOT NULL PRIMARY KEY,
    owner        TEXT      NOT NULL,
    epoch        BIGINT    NOT NULL DEFAULT 1,
    heartbeat_at TIMESTAMP NOT NULL,
    expires_at   TIMESTAMP NOT NULL
);
CREATE INDEX vm_leases_owner ON vm_leases (owner);

-- +goose Down
DROP TABLE vm_leases;
DROP TABLE replicas;
