package agent

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Mount mounts fstype source on target, making target first. The VM init
// (sandbox/agent/vminit) mounts the guest's file systems with it.
func Mount(source, target, fstype string, flags uintptr, data string) error {
	return mount(source, target, fstype, flags, data)
}

func mount(source, target, fstype string, flags uintptr, data string) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("mount %s: %w", target, err)
	}
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", fstype, target, err)
	}
	return nil
}

// DropQuotaOverride makes disk quotas bind the agent's own writes into
// sandboxes too (the VM init calls it once, at boot).
func DropQuotaOverride() error { return dropQuotaOverride() }
