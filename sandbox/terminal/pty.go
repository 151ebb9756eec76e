package terminal

import (
	"context"
	"errors"
	"io"
	"time"
)

// PTY is a process on a terminal: reading gives what it prints, writing
// types into it. Read returns io.EOF once the process and its terminal are
// gone; Wait then says how the process ended.
type PTY interface {
	io.Reader
	io.Writer
	Resize(rows, cols uint16) error
	// Close kills the process if it still runs and releases the terminal.
	Close() error
	Wait() (Exit, error)
}

// OutputPusher is what a PTY may also do: hand its output, piece by piece
// and in order, to out from the goroutine that receives it, instead of
// being read (a sandbox's terminal: no pipe and no reader goroutine
// between the agent connection and the hub, one wake-up less per echo).
// PushOutput returns once the output ended; out must not keep p. Output
// that comes before PushOutput is called waits for it, as in a pipe.
type OutputPusher interface {
	PushOutput(out func(p []byte))
}

// Exit is how a terminal's process ended.
type Exit struct {
	Code   int
	Signal string // the signal that ended it, if one did
	Reason string // how the sandbox's agent puts it: exited, killed, timeout, oom
	// Duration is how long the process ran, when known (0: not known).
	Duration time.Duration
}

// PTYRequest is the process to start on a new terminal.
type PTYRequest struct {
	// ID is the terminal session's id: a PTYAttacher re-attaches the
	// terminal by it after a restart.
	ID         string
	Argv       []string
	Rows, Cols uint16
	Env        []string // KEY=VALUE added to the sandbox's environment
}

// Sandboxes is what the terminal service needs of the sandboxes.
type Sandboxes interface {
	// OpenPTY starts req's process on a new terminal in the tenant's
	// running sandbox. Another tenant's sandbox is errdefs.ErrNotFound; one
	// that is not running errdefs.ErrConflict.
	OpenPTY(ctx context.Context, tenantID, sandboxID string, req PTYRequest) (PTY, error)
	// SandboxEnded reports whether the tenant's sandbox has ended (stopped,
	// failed or destroyed) and why. Another tenant's sandbox is
	// errdefs.ErrNotFound.
	SandboxEnded(ctx context.Context, tenantID, sandboxID string) (ended bool, reason string, err error)
}

// PTYAttacher is what a Sandboxes may also do: re-attach a terminal that a
// stopped server of the installation opened (OpenPTY with req.ID = id)
// and the sandbox's agent kept running, detached, for its grace. The PTY's
// output starts at the returned offset of the terminal's whole output:
// from offset, or later when the agent's bounded buffer no longer holds
// it. A terminal whose process is gone is ErrPTYGone; any other error may
// pass (the VM's agent is not reachable yet after a restart).
type PTYAttacher interface {
	AttachPTY(ctx context.Context, tenantID, sandboxID, id string, offset int64) (PTY, int64, error)
}

// ErrPTYGone: the terminal's process is no longer there to re-attach.
var ErrPTYGone = errors.New("the terminal's process is gone")
