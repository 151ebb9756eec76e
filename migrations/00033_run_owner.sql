-- Workflow runs record the replica executing them (sandbox/runs): with
-- several replicas the leader's recovery fails only the running runs whose
-- owner replica's registration is gone, never those another live replica
-- is executing. Empty for runs started before this, and with one server.
-- Portable SQL.

-- +goose Up
ALTER TABLE workflow_runs ADD COLUMN owner_replica TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE workflow_runs DROP COLUMN owner_replica;
