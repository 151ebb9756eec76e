package image

import (
	"context"
	"fmt"
	"os"
	"strconv"
)

// ScratchLabel is the ext4 label of a VM's scratch disk; it must match
// sandbox/agent's ScratchLabel (this package imports nothing of ours). It
// does not start with the template label prefix, so the agent never takes
// it for a template.
const ScratchLabel = "stockade.scratch"

// CreateScratch makes a VM's scratch disk at path: a sparse raw file of
// sizeMiB formatted ext4 with project quotas, which the guest agent mounts
// and splits into one quota'd folder per sandbox writable layer and
// /workspace. Sparse and lazily initialised, it costs a few MiB of the
// host's disk until sandboxes write to it. No journal: its content dies with
// the VM. A failed create leaves no file.
func CreateScratch(ctx context.Context, path string, sizeMiB int) error {
	if sizeMiB < 64 {
		return fmt.Errorf("create scratch disk %s: %d MiB < 64", path, sizeMiB)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create scratch disk: %w", err)
	}
	err = f.Truncate(int64(sizeMiB) << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		_, err = command(ctx, "", "mkfs.ext4", "-q", "-F", "-L", ScratchLabel, "-m", "0",
			"-O", "quota,project,^has_journal",
			"-E", "quotatype=prjquota,nodiscard,lazy_itable_init=1",
			path, strconv.Itoa(sizeMiB)+"M")
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("create scratch disk %s: %w", path, err)
	}
	return nil
}
