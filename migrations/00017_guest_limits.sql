-- Limits on what a guest or a terminal can make the host keep.
--
-- Metering cross-check: libvirt's CPU time of each sandbox's VM, beside the
-- CPU time its guest reports. usage_meters.vm_cpu_ns is the VM's cumulative
-- reading at the sandbox's last sample; usage_ledger.vm_cpu_ns the
-- sandbox's share of what the VM used in each hour. The CPU-hours quota
-- counts the larger of SUM(cpu_ns) and SUM(vm_cpu_ns).
--
-- Recording caps: recording_truncated says where and why a session's
-- recording stopped at its cap ('' when it did not), truncated_bytes how
-- much terminal output was left out after it. Portable SQL.

-- +goose Up
ALTER TABLE usage_meters ADD COLUMN vm_cpu_ns BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_ledger ADD COLUMN vm_cpu_ns BIGINT NOT NULL DEFAULT 0;
ALTER TABLE terminal_sessions ADD COLUMN recording_truncated TEXT NOT NULL DEFAULT '';
ALTER TABLE terminal_sessions ADD COLUMN truncated_bytes BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE terminal_sessions DROP COLUMN truncated_bytes;
ALTER TABLE terminal_sessions DROP COLUMN recording_truncated;
ALTER TABLE usage_ledger DROP COLUMN vm_cpu_ns;
ALTER TABLE usage_meters DROP COLUMN vm_cpu_ns;
