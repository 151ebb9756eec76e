-- Core tables: installation, tenants, users, memberships, API tokens,
-- sessions and the audit log. Portable SQL: it must run unchanged on SQLite
-- and PostgreSQL. Times are UTC, written by the application.

-- +goose Up
CREATE TABLE installation (
    singleton  INTEGER   NOT NULL PRIMARY KEY CHECK (singleton = 1),
    id         TEXT      NOT NULL,
    created_at TIMESTAMP NOT NULL
);

CREATE TABLE tenants (
    id         TEXT      NOT NULL PRIMARY KEY,
    slug       TEXT      NOT NULL,
    name       TEXT      NOT NULL,
    created_at TIMESTAMP NOT NULL
);
CREATE UNIQUE INDEX tenants_slug ON tenants (slug);

CREATE TABLE users (
    id            TEXT      NOT NULL PRIMARY KEY,
    issuer        TEXT      NOT NULL,
    subject       TEXT      NOT NULL,
    email         TEXT      NOT NULL DEFAULT '',
    name          TEXT      NOT NULL DEFAULT '',
    created_at    TIMESTAMP NOT NULL,
    last_login_at TIMESTAMP NULL
);
CREATE UNIQUE INDEX users_issuer_subject ON users (issuer, subject);
-- Invitations match users by email, case-insensitively.
CREATE INDEX users_email_lower ON users (lower(email));

-- email is stored lowercased by the application, so a plain unique index
-- gives unique (tenant_id, lower(email)) on both databases.
CREATE TABLE memberships (
    id           TEXT      NOT NULL PRIMARY KEY,
    tenant_id    TEXT      NOT NULL REFERENCES tenants (id),
    user_id      TEXT      NULL REFERENCES users (id),
    email        TEXT      NOT NULL,
    role         TEXT      NOT NULL,
    invited_by   TEXT      NOT NULL DEFAULT '',
    created_at   TIMESTAMP NOT NULL,
    activated_at TIMESTAMP NULL
);
CREATE UNIQUE INDEX memberships_tenant_email ON memberships (tenant_id, email);
-- NULLs are distinct in unique indexes on both databases: pending invites
-- (no user yet) never collide, active ones give one membership per user.
CREATE UNIQUE INDEX memberships_tenant_user ON memberships (tenant_id, user_id);
CREATE INDEX memberships_user ON memberships (user_id);
CREATE INDEX memberships_email ON memberships (email);

CREATE TABLE api_tokens (
    id           TEXT      NOT NULL PRIMARY KEY,
    tenant_id    TEXT      NOT NULL REFERENCES tenants (id),
    name         TEXT      NOT NULL,
    prefix       TEXT      NOT NULL,
    hash         TEXT      NOT NULL,
    role         TEXT      NOT NULL,
    created_by   TEXT      NOT NULL DEFAULT '',
    created_at   TIMESTAMP NOT NULL,
    expires_at   TIMESTAMP NOT NULL,
    last_used_at TIMESTAMP NULL,
    revoked_at   TIMESTAMP NULL
);
CREATE UNIQUE INDEX api_tokens_hash ON api_tokens (hash);
CREATE INDEX api_tokens_tenant ON api_tokens (tenant_id, id);

-- A session belongs to a user; tenant_id is the tenant the browser acts in,
-- '' until one is chosen, so it carries no foreign key. id is the SHA-256 of
-- the cookie value: the cookie itself is never stored.
CREATE TABLE sessions (
    id           TEXT      NOT NULL PRIMARY KEY,
    user_id      TEXT      NOT NULL REFERENCES users (id),
    tenant_id    TEXT      NOT NULL DEFAULT '',
    created_at   TIMESTAMP NOT NULL,
    last_seen_at TIMESTAMP NOT NULL,
    expires_at   TIMESTAMP NOT NULL,
    user_agent   TEXT      NOT NULL DEFAULT '',
    remote_addr  TEXT      NOT NULL DEFAULT ''
);
CREATE INDEX sessions_user ON sessions (user_id);
CREATE INDEX sessions_expires ON sessions (expires_at);

-- Append-only. tenant_id '' is a platform-level event, and events outlive
-- what they describe, so there is no foreign key. ids are UUIDv7: ordering
-- by id is ordering by insertion.
CREATE TABLE audit_events (
    id          TEXT      NOT NULL PRIMARY KEY,
    tenant_id   TEXT      NOT NULL,
    occurred_at TIMESTAMP NOT NULL,
    code        TEXT      NOT NULL,
    type        TEXT      NOT NULL,
    actor_kind  TEXT      NOT NULL,
    actor_id    TEXT      NOT NULL DEFAULT '',
    actor_name  TEXT      NOT NULL DEFAULT '',
    target_kind TEXT      NOT NULL DEFAULT '',
    target_id   TEXT      NOT NULL DEFAULT '',
    outcome     TEXT      NOT NULL,
    details     TEXT      NOT NULL DEFAULT '{}',
    remote_addr TEXT      NOT NULL DEFAULT '',
    request_id  TEXT      NOT NULL DEFAULT ''
);
CREATE INDEX audit_events_tenant_id ON audit_events (tenant_id, id);
CREATE INDEX audit_events_tenant_time ON audit_events (tenant_id, occurred_at);

-- +goose Down
DROP TABLE audit_events;
DROP TABLE sessions;
DROP TABLE api_tokens;
DROP TABLE memberships;
DROP TABLE users;
DROP TABLE tenants;
DROP TABLE installation;
