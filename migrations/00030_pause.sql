-- Paused sandboxes (cgroup freezer in the guest). sandboxes.paused_at is set
-- while a running sandbox is paused (NULL otherwise); the control plane's
-- lifetime clock does not run while it is set (expires_at moves on by the
-- time paused at resume). usage_meters.paused_at says the same to the meter:
-- allocation accounted while it is set bills memory but no vCPU. Portable SQL.

-- +goose Up
ALTER TABLE sandboxes ADD COLUMN paused_at TIMESTAMP NULL;
ALTER TABLE usage_meters ADD COLUMN paused_at TIMESTAMP NULL;

-- +goose Down
ALTER TABLE usage_meters DROP COLUMN paused_at;
ALTER TABLE sandboxes DROP COLUMN paused_at;
