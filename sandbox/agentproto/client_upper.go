package agentproto

import (
	"context"
	"fmt"
	"io"
	"time"
)

// UpperDoc: the tar stream of OpSandboxUpper holds the sandbox's overlay
// upper dir relative to the sandbox's root: folders, regular files (each
// its own copy: hard links are not kept), symlinks, and the overlay's own
// records as OCI whiteouts: a whiteout (a 0/0 character device) named N
// is the empty file ".wh.N", and an opaque folder (xattr
// trusted.overlay.opaque=y) is followed by its empty ".wh..wh..opq".
// Devices, FIFOs and sockets are left out. Nothing is followed: the
// sandbox is paused (its processes frozen) while the agent walks.
const UpperDoc = "sandbox.upper"

// Upper writes the paused sandbox's writable layer to w as a tar stream
// (UpperDoc), at most maxBytes of it (> 0): more fails with
// ErrFileTooLarge after some of it was written.
func (c *Client) Upper(ctx context.Context, sandboxID string, maxBytes int64, w io.Writer) (int64, error) {
	if maxBytes <= 0 {
		return 0, fmt.Errorf("upper of %s: max bytes must be positive: %w", sandboxID, ErrBadRequest)
	}
	st, _, err := c.open(ctx, Request{V: Version, Op: OpSandboxUpper, Fs: &FsRequest{Sandbox: sandboxID, MaxBytes: maxBytes}})
	if err != nil {
		return 0, fmt.Errorf("upper of %s: %w", sandboxID, err)
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var n int64
	err = readFsFrames(ctx, st, OpSandboxUpper, func(b []byte) error {
		n += int64(len(b))
		if n > maxBytes {
			return fmt.Errorf("agent sent over %d bytes: %w", maxBytes, ErrProtocol)
		}
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("write upper: %w", err)
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("upper of %s: %w", sandboxID, err)
	}
	return n, nil
}
