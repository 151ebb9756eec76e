package volumes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// sandboxOwner is the sandbox user of every template (uid:gid): a volume's
// root belongs to it.
const sandboxOwner = "1000:1000"

// makeImage makes a sparse ext4 image of sizeGiB at path. Nothing is left
// behind on failure.
func makeImage(ctx context.Context, path string, sizeGiB int) error {
	// QEMU runs as its own user: the folders must be searchable (libvirt
	// hands it the image itself while it is attached).
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("make volume image: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("make volume image: %w", err)
	}
	err = f.Truncate(int64(sizeGiB) << 30)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// lazy_itable_init: the image stays sparse; the guest finishes it.
		err = run(ctx, "mkfs.ext4", "-q", "-F", "-L", "tenant-volume", "-m", "0",
			"-E", "root_owner="+sandboxOwner+",lazy_itable_init=1,lazy_journal_init=1", path)
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("make volume image: %w", err)
	}
	return nil
}

// growImage grows the detached image at path to sizeGiB and its file
// system with it.
func growImage(ctx context.Context, path string, sizeGiB int) error {
	if err := os.Truncate(path, int64(sizeGiB)<<30); err != nil {
		return fmt.Errorf("grow volume image: %w", err)
	}
	// resize2fs wants a checked file system; -p fixes only what is safe.
	// Exit status 1: errors were corrected.
	if err := run(ctx, "e2fsck", "-f", "-p", path); err != nil && !exitedWith(err, 1) {
		return fmt.Errorf("grow volume image: %w", err)
	}
	if err := run(ctx, "resize2fs", path); err != nil {
		return fmt.Errorf("grow volume image: %w", err)
	}
	return nil
}

func exitedWith(err error, code int) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == code
}

func run(ctx context.Context, name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(out.String()))
	}
	return nil
}
