package image

import (
	"context"
	"fmt"
	"os"
	"strconv"
)

// ScratchLabel is the XFS label of a VM's scratch disk (at most 12
// bytes); it must match sandbox/agent's ScratchLabel (this package imports
// nothing of ours). It does not start with the template label prefix, so
// the agent never takes it for a template.
const ScratchLabel = "stk.scratch"

// MinScratchMiB is the smallest scratch disk: XFS wants 300 MB at least.
const MinScratchMiB = 512

// CreateScratch makes a VM's scratch disk at path: a sparse raw file of
// sizeMiB formatted XFS, which the guest agent mounts with project quotas
// and splits into one quota'd folder per sandbox writable layer and
// /workspace. XFS, not ext4, because a full XFS project quota fails the
// writer with ENOSPC ("No space left on device"), as a full disk of its own
// would, where ext4 says EDQUOT. Sparse, it costs the host the XFS log
// (64 MiB, which mkfs writes) until sandboxes write to it. mkfs.xfs comes
// from xfsprogs. A failed create leaves no file.
func CreateScratch(ctx context.Context, path string, sizeMiB int) error {
	if sizeMiB < MinScratchMiB {
		return fmt.Errorf("create scratch disk %s: %d MiB < %d", path, sizeMiB, MinScratchMiB)
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
		// -K: no discard of a file that is all holes already.
		_, err = command(ctx, "", "mkfs.xfs", "-q", "-f", "-K", "-L", ScratchLabel, "-d", "size="+strconv.Itoa(sizeMiB)+"m", path)
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("create scratch disk %s: %w", path, err)
	}
	return nil
}
