-- Integrations: a tenant's outgoing webhook endpoints, the outbox of events
-- written in the same transaction as the state change they report, and one
-- delivery row per (event, endpoint) that the dispatcher works through.
-- Every attempt is also logged in notify_deliveries (status codes, errors).
-- Portable SQL (SQLite and PostgreSQL); times are UTC, ids made in Go.

-- +goose Up

-- An outgoing webhook endpoint. secret_name names the tenant secret holding
-- its whsec_ signing key (never the key). event_types is a JSON array of
-- event types; empty means every type.
CREATE TABLE webhook_endpoints (
    id           TEXT      NOT NULL PRIMARY KEY,
    tenant_id    TEXT      NOT NULL REFERENCES tenants (id),
    url          TEXT      NOT NULL,
    secret_name  TEXT      NOT NULL,
    event_types  TEXT      NOT NULL DEFAULT '[]',
    description  TEXT      NOT NULL DEFAULT '',
    enabled      BOOLEAN   NOT NULL DEFAULT TRUE,
    created_by   TEXT      NOT NULL DEFAULT '',
    created_at   TIMESTAMP NOT NULL,
    updated_at   TIMESTAMP NOT NULL
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant_id);

-- Events to deliver. fanned_out_at is set once the event's delivery rows
-- exist (one per endpoint that wanted it when it was fanned out).
CREATE TABLE integration_outbox (
    id            TEXT      NOT NULL PRIMARY KEY,
    tenant_id     TEXT      NOT NULL REFERENCES tenants (id),
    event_type    TEXT      NOT NULL,
    payload       TEXT      NOT NULL,
    created_at    TIMESTAMP NOT NULL,
    fanned_out_at TIMESTAMP NULL
);
CREATE INDEX integration_outbox_pending ON integration_outbox (fanned_out_at, id);

-- One event to one endpoint. state: pending, delivered, failed. A pending
-- row is claimed by a dispatcher until lease_until (several replicas share
-- the table); message_id is the webhook-id of the last send.
CREATE TABLE webhook_deliveries (
    id           TEXT      NOT NULL PRIMARY KEY,
    tenant_id    TEXT      NOT NULL REFERENCES tenants (id),
    endpoint_id  TEXT      NOT NULL,
    event_id     TEXT      NOT NULL,
    event_type   TEXT      NOT NULL,
    state        TEXT      NOT NULL,
    attempts     INTEGER   NOT NULL DEFAULT 0,
    status_code  INTEGER   NOT NULL DEFAULT 0,
    error        TEXT      NOT NULL DEFAULT '',
    message_id   TEXT      NOT NULL DEFAULT '',
    lease_until  TIMESTAMP NULL,
    created_at   TIMESTAMP NOT NULL,
    updated_at   TIMESTAMP NOT NULL
);
CREATE UNIQUE INDEX webhook_deliveries_once ON webhook_deliveries (event_id, endpoint_id);
CREATE INDEX webhook_deliveries_tenant ON webhook_deliveries (tenant_id, created_at);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (state, lease_until);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE integration_outbox;
DROP TABLE webhook_endpoints;
