package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
)

var (
	// ErrTooLarge: a file or upload over the size bound. web/ answers 413.
	ErrTooLarge = errors.New("too large")
	// ErrNoSpace: the sandbox's disk or workspace is full. web/ answers 507.
	ErrNoSpace = errors.New("no space left in the sandbox")
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

// TooLargeError is a file or upload over its FileLimit; errors.Is matches
// ErrTooLarge. Size is -1 when unknown (an upload cut off while read).
type TooLargeError struct {
	Op    string
	Size  int64
	Limit FileLimit
}

func (e *TooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("%s: too large: over the limit of %s", e.Op, e.Limit)
	}
	return fmt.Sprintf("%s: too large: %d bytes, over the limit of %s", e.Op, e.Size, e.Limit)
}

func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// agentErr maps what the agent said onto the domain errors web/ knows, so
// that no agent code leaks into HTTP statuses chosen elsewhere.
func agentErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, agentproto.ErrFileTooLarge):
		return fmt.Errorf("%s: %w: %w", op, ErrTooLarge, err)
	case errors.Is(err, agentproto.ErrExhausted):
		return fmt.Errorf("%s: %w: %w", op, ErrNoSpace, err)
	case errors.Is(err, agentproto.ErrNotFound):
		return fmt.Errorf("%s: %w: %w", op, tenants.ErrNotFound, err)
	case errors.Is(err, agentproto.ErrPermission):
		return fmt.Errorf("%s: %w: %w", op, tenants.ErrForbidden, err)
	case errors.Is(err, agentproto.ErrBadRequest):
		return fmt.Errorf("%s: %w: %w", op, tenants.ErrInvalid, err)
	case errors.Is(err, agentproto.ErrConflict):
		return fmt.Errorf("%s: %w: %w", op, tenants.ErrConflict, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", op, err)
	case errors.Is(err, agentproto.ErrRemote):
		return fmt.Errorf("%s: the agent failed: %w", op, err)
	}
	// The session broke, or the agent broke the protocol: the VM's agent is
	// not usable now.
	return fmt.Errorf("%s: %w: %w", op, vmpool.ErrUnavailable, err)
}
