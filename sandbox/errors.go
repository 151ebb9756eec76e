package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// FileLimit is the size bound of one file moved through the API for a
// tenant, and the setting it comes from.
type FileLimit struct {
	Bytes int64
	// Setting names where the bound is set: SettingMaxFileBytes, or the
	// tenant policy's PolicyMaxFileBytes.
	Setting string
	// PolicyVersion is the policy's version when the policy set it.
	PolicyVersion int
}

// Where a FileLimit comes from.
const (
	SettingMaxFileBytes = "STOCKADE_MAX_FILE_BYTES"
	PolicyMaxFileBytes  = "filesystem.max_file_bytes"
)

func (l FileLimit) String() string {
	s := fmt.Sprintf("%d bytes", l.Bytes)
	if l.Bytes >= 1<<20 && l.Bytes%(1<<20) == 0 {
		s = fmt.Sprintf("%d MiB (%d bytes)", l.Bytes>>20, l.Bytes)
	}
	if l.Setting == PolicyMaxFileBytes {
		return fmt.Sprintf("%s, set by the tenant policy's %s (version %d)", s, l.Setting, l.PolicyVersion)
	}
	return fmt.Sprintf("%s, set by %s", s, l.Setting)
}

// TooLarge is the error of a file or upload of size bytes (-1: unknown, cut
// off while read) over l; errors.Is matches errdefs.ErrTooLarge, and its problem
// names l's setting.
func (l FileLimit) TooLarge(op string, size int64) error {
	return &errdefs.TooLargeError{Op: op, Size: size, Max: l.Bytes, Setting: l.Setting, Bound: l.String()}
}

// agentErr maps what the agent said onto the domain errors web/ knows, so
// that no agent code leaks into HTTP statuses chosen elsewhere.
func agentErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, agentproto.ErrFileTooLarge):
		return fmt.Errorf("%s: %w: %w", op, errdefs.ErrTooLarge, err)
	case errors.Is(err, agentproto.ErrExhausted):
		return fmt.Errorf("%s: %w: %w", op, errdefs.ErrNoSpace, err)
	case errors.Is(err, agentproto.ErrNotFound):
		return fmt.Errorf("%s: %w: %w", op, errdefs.ErrNotFound, err)
	case errors.Is(err, agentproto.ErrPermission):
		return fmt.Errorf("%s: %w: %w", op, errdefs.ErrForbidden, err)
	case errors.Is(err, agentproto.ErrBadRequest):
		return fmt.Errorf("%s: %w: %w", op, errdefs.ErrInvalid, err)
	case errors.Is(err, agentproto.ErrConflict):
		return fmt.Errorf("%s: %w: %w", op, errdefs.ErrConflict, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", op, err)
	case errors.Is(err, agentproto.ErrRemote):
		return fmt.Errorf("%s: the agent failed: %w", op, err)
	}
	// The session broke, or the agent broke the protocol: the VM's agent is
	// not usable now.
	return fmt.Errorf("%s: %w: %w", op, vmpool.ErrUnavailable, err)
}
