-- Workflows: per-tenant YAML definitions (append-only versions), the GitHub
-- deliveries that triggered them, their runs with steps, and the log of
-- outgoing notifications. Portable SQL (SQLite and PostgreSQL); times are
-- UTC, written by the application; ids are made in Go.

-- +goose Up

-- One row per saved version of a tenant's workflow. source is the YAML as
-- the admin wrote it, doc the validated definition as JSON. A deleted
-- workflow is a version with deleted = TRUE (its source empty): the history
-- stays, and the name can be used again by saving a new version.
CREATE TABLE workflows (
    tenant_id   TEXT      NOT NULL REFERENCES tenants (id),
    name        TEXT      NOT NULL,
    version     INTEGER   NOT NULL,
    source      TEXT      NOT NULL DEFAULT '',
    doc         TEXT      NOT NULL DEFAULT '{}',
    deleted     BOOLEAN   NOT NULL DEFAULT FALSE,
    author_id   TEXT      NOT NULL DEFAULT '',
    author_name TEXT      NOT NULL DEFAULT '',
    author_kind TEXT      NOT NULL DEFAULT '',
    created_at  TIMESTAMP NOT NULL,
    PRIMARY KEY (tenant_id, name, version)
);

-- Workflow settings of a tenant: the name of the tenant secret holding the
-- GitHub webhook secret (never the value).
CREATE TABLE workflow_settings (
    tenant_id          TEXT      NOT NULL PRIMARY KEY REFERENCES tenants (id),
    github_secret_name TEXT      NOT NULL DEFAULT '',
    updated_by         TEXT      NOT NULL DEFAULT '',
    updated_at         TIMESTAMP NOT NULL
);

-- Every GitHub delivery accepted for a tenant (signature verified). The
-- unique key makes a redelivery of the same X-GitHub-Delivery start nothing.
CREATE TABLE github_deliveries (
    tenant_id   TEXT      NOT NULL REFERENCES tenants (id),
    delivery_id TEXT      NOT NULL,
    event       TEXT      NOT NULL,
    action      TEXT      NOT NULL DEFAULT '',
    repository  TEXT      NOT NULL DEFAULT '',
    runs        INTEGER   NOT NULL DEFAULT 0,
    received_at TIMESTAMP NOT NULL,
    PRIMARY KEY (tenant_id, delivery_id)
);

-- One run of a workflow version. state: queued, running, succeeded, failed,
-- cancelled, timed_out. trigger is manual, push, pull_request, issue_comment;
-- the trigger summary (repo, ref, sha, pr, sender) is kept in columns.
-- sandbox_id carries no foreign key: runs outlive their sandbox.
CREATE TABLE workflow_runs (
    id               TEXT      NOT NULL PRIMARY KEY,
    tenant_id        TEXT      NOT NULL REFERENCES tenants (id),
    workflow         TEXT      NOT NULL,
    workflow_version INTEGER   NOT NULL,
    number           INTEGER   NOT NULL,
    state            TEXT      NOT NULL,
    state_reason     TEXT      NOT NULL DEFAULT '',
    trigger_kind     TEXT      NOT NULL,
    delivery_id      TEXT      NOT NULL DEFAULT '',
    repository       TEXT      NOT NULL DEFAULT '',
    ref              TEXT      NOT NULL DEFAULT '',
    sha              TEXT      NOT NULL DEFAULT '',
    pr_number        INTEGER   NOT NULL DEFAULT 0,
    sender           TEXT      NOT NULL DEFAULT '',
    created_by       TEXT      NOT NULL DEFAULT '',
    rerun_of         TEXT      NOT NULL DEFAULT '',
    sandbox_id       TEXT      NOT NULL DEFAULT '',
    artifacts        TEXT      NOT NULL DEFAULT '[]',
    cost             DOUBLE PRECISION NOT NULL DEFAULT 0,
    created_at       TIMESTAMP NOT NULL,
    started_at       TIMESTAMP NULL,
    ended_at         TIMESTAMP NULL
);
CREATE UNIQUE INDEX workflow_runs_number ON workflow_runs (tenant_id, workflow, number);
CREATE INDEX workflow_runs_tenant ON workflow_runs (tenant_id, created_at);
CREATE INDEX workflow_runs_state ON workflow_runs (state);

-- The steps of a run, in order. exit_code is NULL until the step ended (and
-- stays NULL for a step that never ran); output is bounded (truncated says
-- whether it was cut).
CREATE TABLE workflow_run_steps (
    run_id      TEXT      NOT NULL REFERENCES workflow_runs (id),
    tenant_id   TEXT      NOT NULL REFERENCES tenants (id),
    idx         INTEGER   NOT NULL,
    name        TEXT      NOT NULL,
    state       TEXT      NOT NULL,
    exit_code   INTEGER   NULL,
    duration_ms BIGINT    NOT NULL DEFAULT 0,
    output      TEXT      NOT NULL DEFAULT '',
    truncated   BOOLEAN   NOT NULL DEFAULT FALSE,
    started_at  TIMESTAMP NULL,
    ended_at    TIMESTAMP NULL,
    PRIMARY KEY (run_id, idx)
);

-- Every attempt to send an outgoing notification (Standard Webhooks, Slack,
-- Jira). target is the URL without its query (never a secret); status_code
-- 0 means no answer (error says why).
CREATE TABLE notify_deliveries (
    id          TEXT      NOT NULL PRIMARY KEY,
    tenant_id   TEXT      NOT NULL REFERENCES tenants (id),
    message_id  TEXT      NOT NULL,
    kind        TEXT      NOT NULL,
    event       TEXT      NOT NULL,
    target      TEXT      NOT NULL,
    attempt     INTEGER   NOT NULL,
    status_code INTEGER   NOT NULL DEFAULT 0,
    error       TEXT      NOT NULL DEFAULT '',
    duration_ms BIGINT    NOT NULL DEFAULT 0,
    created_at  TIMESTAMP NOT NULL
);
CREATE INDEX notify_deliveries_tenant ON notify_deliveries (tenant_id, created_at);
CREATE INDEX notify_deliveries_message ON notify_deliveries (message_id);

-- +goose Down
DROP TABLE notify_deliveries;
DROP TABLE workflow_run_steps;
DROP TABLE workflow_runs;
DROP TABLE github_deliveries;
DROP TABLE workflow_settings;
DROP TABLE workflows;
