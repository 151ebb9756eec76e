package sandbox

import (
	"context"
	"io"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// StartTerminal starts argv (with env added) on a new terminal from the
// tenant's running sandbox's own devpts, copying what it prints to output.
// ctx bounds the start only: the terminal runs until its process ends, the
// returned Exec closes it, or the service closes. Another tenant's sandbox
// is tenants.ErrNotFound; one not running tenants.ErrConflict.
func (s *Service) StartTerminal(ctx context.Context, tenantID, sandboxID string, argv, env []string, size agentproto.Winsize, output io.Writer) (*agentproto.Exec, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, sandboxID)
	if err != nil {
		return nil, err
	}
	// The terminal outlives the request that opened it: its own context,
	// cut short only while the caller still waits for the start.
	tctx, cancel := s.stop.Bound(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	// Named, so a lost agent session re-attaches it (see Exec).
	execID, err := newID()
	if err != nil {
		cancel()
		return nil, err
	}
	e, err := c.StartResumableExec(tctx, agentproto.ExecRequest{ID: "term-" + execID, Sandbox: sb.ID, Argv: argv, Env: env, TTY: true, Stdin: true, Size: size},
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
