package egress

import (
	"context"
	"errors"
	"fmt"

	"github.com/stockade-dev/stockade/sandbox"
)

// ErrUnknownSandbox: the guest named a sandbox that is not an active one
// of the tenant on that VM.
var ErrUnknownSandbox = errors.New("no such active sandbox on this vm")

// StoredSandboxes checks the guest's claim against the sandbox records.
func StoredSandboxes(st *sandbox.Store) Sandboxes {
	return SandboxesFunc(func(ctx context.Context, tenantID, vmID, sandboxID string) error {
		sb, err := st.Sandbox(ctx, tenantID, sandboxID)
		if err != nil {
			return fmt.Errorf("egress of sandbox %s: %w", sandboxID, err)
		}
		if sb.VMID != vmID || !sb.State.Active() {
			return fmt.Errorf("egress of sandbox %s (vm %s, %s): %w", sandboxID, sb.VMID, sb.State, ErrUnknownSandbox)
		}
		return nil
	})
}
