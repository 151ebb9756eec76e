package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// StartTerminal starts argv (with env added) on a new terminal from the
// tenant's running sandbox's own devpts, copying what it prints to output.
// ctx bounds the start only: the terminal runs until its process ends, the
// returned Exec closes it, or the service closes. Another tenant's sandbox
// is errdefs.ErrNotFound; one not running errdefs.ErrConflict.
func (s *Service) StartTerminal(ctx context.Context, tenantID, sandboxID string, argv, env []string, size agentproto.Winsize, output io.Writer) (*agentproto.Exec, error) {
	id, err := newID()
	if err != nil {
		return nil, err
	}
	return s.StartTerminalID(ctx, tenantID, sandboxID, id, argv, env, size, output)
}

// StartTerminalID is StartTerminal naming the terminal id (a terminal
// session's id): the agent holds it as exec "term-<id>", which a server
// started later re-attaches with AttachTerminal.
func (s *Service) StartTerminalID(ctx context.Context, tenantID, sandboxID, id string, argv, env []string, size agentproto.Winsize, output io.Writer) (*agentproto.Exec, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, sandboxID)
	if err != nil {
		return nil, err
	}
	// The terminal outlives the request that opened it: its own context,
	// cut short only while the caller still waits for the start.
	tctx, cancel := s.stop.Bound(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	// Named, so a lost agent session re-attaches it (see Exec).
	e, err := c.StartResumableExec(tctx, agentproto.ExecRequest{ID: terminalExecID(id), Sandbox: sb.ID, Argv: argv, Env: env, TTY: true, Stdin: true, Size: size},
		output, nil, s.nextAgent(sb, c))
	stop()
	if err != nil {
		cancel()
		return nil, agentErr("terminal in sandbox "+sb.ID, err)
	}
	go func() {
		<-e.Done()
		cancel()
	}()
	if err := s.store.touch(context.WithoutCancel(ctx), sb.ID); err != nil {
		s.log.Warn("touch sandbox", "sandbox", sb.ID, "err", err)
	}
	return e, nil
}

// terminalExecID is the agent's exec id of terminal id.
func terminalExecID(id string) string { return "term-" + id }

// AttachTerminal re-attaches terminal id of the tenant's running sandbox,
// started by a server that stopped (StartTerminalID) and kept by the agent
// for its exec grace: its output from offset on (clamped to what the
// agent's bounded buffer still holds; the Exec's Start says where it
// starts) goes to output, and writes type into it again. A terminal the
// agent no longer has is errdefs.ErrNotFound, as is another tenant's
// sandbox; a sandbox not running is errdefs.ErrConflict.
func (s *Service) AttachTerminal(ctx context.Context, tenantID, sandboxID, id string, offset int64, output io.Writer) (*agentproto.Exec, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, sandboxID)
	if err != nil {
		return nil, err
	}
	tctx, cancel := s.stop.Bound(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	e, err := c.AttachExec(tctx, terminalExecID(id), offset, output, nil, s.nextAgent(sb, c))
	stop()
	if err != nil {
		cancel()
		if errors.Is(err, agentproto.ErrNotFound) {
			return nil, fmt.Errorf("terminal %s: %w: its process is gone", id, errdefs.ErrNotFound)
		}
		return nil, agentErr("re-attach terminal in sandbox "+sb.ID, err)
	}
	go func() {
		<-e.Done()
		cancel()
	}()
	s.log.Info("terminal re-attached", "sandbox", sb.ID, "terminal", id, "offset", offset, "from", e.Start())
	return e, nil
}
