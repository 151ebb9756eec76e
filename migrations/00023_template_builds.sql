-- Template builds (issue 18, item 2): one row per recipe build of a tenant's
-- template. version_id is the template version the build makes (in
-- template_versions, sandbox/templates); recipe is the recipe's source as
-- posted and recipe_digest its canonical digest (the same recipe reuses
-- the ready version). state: running, succeeded or failed; step is the
-- pipeline step reached (1 base .. 5 pack). The log lives in a file under
-- the data dir (template-builds/<tenant>/<id>.log, at most 1 MiB kept);
-- log_bytes is its size. Portable SQL (SQLite and PostgreSQL); times are
-- UTC, ids made in Go.

-- +goose Up
CREATE TABLE template_builds (
    id              TEXT      NOT NULL PRIMARY KEY,
    tenant_id       TEXT      NOT NULL REFERENCES tenants (id),
    template_name   TEXT      NOT NULL,
    version_id      TEXT      NOT NULL DEFAULT '',
    recipe_digest   TEXT      NOT NULL,
    recipe          TEXT      NOT NULL,
    state           TEXT      NOT NULL,
    step            INTEGER   NOT NULL DEFAULT 0,
    error           TEXT      NOT NULL DEFAULT '',
    log_bytes       BIGINT    NOT NULL DEFAULT 0,
    created_by      TEXT      NOT NULL DEFAULT '',
    started_at      TIMESTAMP NOT NULL,
    ended_at        TIMESTAMP NULL
);
CREATE INDEX template_builds_name ON template_builds (tenant_id, template_name, started_at);
CREATE INDEX template_builds_digest ON template_builds (tenant_id, recipe_digest, state);

-- +goose Down
DROP TABLE template_builds;
