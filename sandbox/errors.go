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
