-- Egress events: one row per connection a sandbox made through the host
-- egress gateway, allowed or denied, with the rule that decided and the
-- bytes it moved. Portable SQL (SQLite and PostgreSQL); times are UTC,
-- written by the application.

-- +goose Up

-- method is CONNECT or the plain HTTP method; decision "allow" or "deny";
-- rule names what decided ("allow *.github.com:443", "default deny",
-- "blocked: loopback address 127.0.0.1"); addr is the address dialled
-- ('' when none was); policy_version the tenant policy version applied;
-- intercepted is true when the gateway terminated TLS to swap credentials.
-- Events outlive their sandbox, so sandbox_id carries no foreign key.
CREATE TABLE egress_events (
    id             TEXT      NOT NULL PRIMARY KEY,
    tenant_id      TEXT      NOT NULL REFERENCES tenants (id),
    sandbox_id     TEXT      NOT NULL,
    vm_id          TEXT      NOT NULL DEFAULT '',
    method         TEXT      NOT NULL,
    host           TEXT      NOT NULL,
    port           INTEGER   NOT NULL,
    decision       TEXT      NOT NULL,
    rule           TEXT      NOT NULL DEFAULT '',
    addr           TEXT      NOT NULL DEFAULT '',
    policy_version INTEGER   NOT NULL DEFAULT 0,
    intercepted    BOOLEAN   NOT NULL DEFAULT FALSE,
    status         INTEGER   NOT NULL DEFAULT 0,
    error          TEXT      NOT NULL DEFAULT '',
    bytes_up       BIGINT    NOT NULL DEFAULT 0,
    bytes_down     BIGINT    NOT NULL DEFAULT 0,
    started_at     TIMESTAMP NOT NULL,
    duration_ms    BIGINT    NOT NULL DEFAULT 0
);
CREATE INDEX egress_events_tenant ON egress_events (tenant_id, started_at);
CREATE INDEX egress_events_sandbox ON egress_events (tenant_id, sandbox_id, started_at);

-- +goose Down
DROP TABLE egress_events;
