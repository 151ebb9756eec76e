-- Compliance: the security checklist evaluated per tenant, the history of
-- its status changes, and the probe runs that back it with evidence.
-- Portable SQL (SQLite and PostgreSQL); times are UTC, written by the
-- application.

-- +goose Up

-- The latest evaluation of each checklist item of a tenant. evidence is a
-- JSON list of {kind, text, link}; since is when the current status began,
-- checked_at when it was last evaluated.
CREATE TABLE compliance_results (
    tenant_id  TEXT      NOT NULL REFERENCES tenants (id),
    item_id    TEXT      NOT NULL,
    status     TEXT      NOT NULL,
    evidence   TEXT      NOT NULL DEFAULT '[]',
    since      TIMESTAMP NOT NULL,
    checked_at TIMESTAMP NOT NULL,
    PRIMARY KEY (tenant_id, item_id)
);

-- Every status change of an item (the first evaluation counts as one, from
-- ''): append-only.
CREATE TABLE compliance_changes (
    id          TEXT      NOT NULL PRIMARY KEY,
    tenant_id   TEXT      NOT NULL REFERENCES tenants (id),
    item_id     TEXT      NOT NULL,
    from_status TEXT      NOT NULL DEFAULT '',
    to_status   TEXT      NOT NULL,
    changed_at  TIMESTAMP NOT NULL
);
CREATE INDEX compliance_changes_tenant ON compliance_changes (tenant_id, changed_at);

-- One run of the probe program in a sandbox of the tenant. state is
-- running, completed or failed (the probe could not run: error says why);
-- checks is a JSON list of {id, name, outcome, detail} with outcome
-- blocked, escaped or error; output is what the probe printed (bounded).
-- Runs outlive their sandbox, so sandbox_id carries no foreign key.
CREATE TABLE probe_runs (
    id          TEXT      NOT NULL PRIMARY KEY,
    tenant_id   TEXT      NOT NULL REFERENCES tenants (id),
    sandbox_id  TEXT      NOT NULL DEFAULT '',
    state       TEXT      NOT NULL,
    actor_kind  TEXT      NOT NULL DEFAULT '',
    actor_id    TEXT      NOT NULL DEFAULT '',
    actor_name  TEXT      NOT NULL DEFAULT '',
    started_at  TIMESTAMP NOT NULL,
    ended_at    TIMESTAMP NULL,
    checks      TEXT      NOT NULL DEFAULT '[]',
    output      TEXT      NOT NULL DEFAULT '',
    error       TEXT      NOT NULL DEFAULT ''
);
CREATE INDEX probe_runs_tenant ON probe_runs (tenant_id, started_at);

-- +goose Down
DROP TABLE probe_runs;
DROP TABLE compliance_changes;
DROP TABLE compliance_results;
