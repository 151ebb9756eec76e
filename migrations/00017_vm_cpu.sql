-- Metering cross-check: libvirt's CPU time of each sandbox's VM, beside the
-- CPU time its guest reports. usage_meters.vm_cpu_ns is the VM's cumulative
-- reading at the sandbox's last sample; usage_ledger.vm_cpu_ns the
-- sandbox's share of what the VM used in each hour. The CPU-hours quota
-- counts the larger of SUM(cpu_ns) and SUM(vm_cpu_ns). Portable SQL.

-- +goose Up
ALTER TABLE usage_meters ADD COLUMN vm_cpu_ns BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_ledger ADD COLUMN vm_cpu_ns BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE usage_ledger DROP COLUMN vm_cpu_ns;
ALTER TABLE usage_meters DROP COLUMN vm_cpu_ns;
