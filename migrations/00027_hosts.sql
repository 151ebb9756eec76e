-- Several libvirt hosts (issue 19). Each hosts row gains what operators set:
-- state (active | cordoned | draining | removed: placement takes only active
-- hosts; "down" is health, not a state an operator sets), its reason,
-- labels ("key=value,key=value", sorted) and down_at, when the host was last
-- found not answering (NULL while it answers). added_by is the operator
-- who added it ('' for STOCKADE_LIBVIRT_URIS). tenant_host_constraints are the labels a tenant's
-- VMs need on their host (dedicated hosts), set by operators.
-- Portable SQL.

-- +goose Up
ALTER TABLE hosts ADD COLUMN state TEXT NOT NULL DEFAULT 'active';
ALTER TABLE hosts ADD COLUMN state_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE hosts ADD COLUMN labels TEXT NOT NULL DEFAULT '';
ALTER TABLE hosts ADD COLUMN down_at TIMESTAMP NULL;
ALTER TABLE hosts ADD COLUMN added_by TEXT NOT NULL DEFAULT '';

CREATE TABLE tenant_host_constraints (
    tenant_id  TEXT      NOT NULL PRIMARY KEY REFERENCES tenants (id),
    labels     TEXT      NOT NULL,
    updated_at TIMESTAMP NOT NULL,
    updated_by TEXT      NOT NULL DEFAULT ''
);

-- +goose Down
DROP TABLE tenant_host_constraints;
ALTER TABLE hosts DROP COLUMN added_by;
ALTER TABLE hosts DROP COLUMN down_at;
ALTER TABLE hosts DROP COLUMN labels;
ALTER TABLE hosts DROP COLUMN state_reason;
ALTER TABLE hosts DROP COLUMN state;
