package terminal

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// SandboxPTYs opens terminals in the sandboxes of a sandbox.Service, over
// the agent of each sandbox's VM.
type SandboxPTYs struct{ Service *sandbox.Service }

var (
	_ Sandboxes   = SandboxPTYs{}
	_ PTYAttacher = SandboxPTYs{}
)

// OpenPTY starts req's process on a terminal of the sandbox's own devpts.
// With req.ID the agent holds it by that id, for AttachPTY.
func (a SandboxPTYs) OpenPTY(ctx context.Context, tenantID, sandboxID string, req PTYRequest) (PTY, error) {
	pr, pw := io.Pipe()
	size := agentproto.Winsize{Cols: req.Cols, Rows: req.Rows}
	var (
		e   *agentproto.Exec
		err error
	)
	if req.ID != "" {
		e, err = a.Service.StartTerminalID(ctx, tenantID, sandboxID, req.ID, req.Argv, req.Env, size, pw)
	} else {
		e, err = a.Service.StartTerminal(ctx, tenantID, sandboxID, req.Argv, req.Env, size, pw)
	}
	if err != nil {
		pw.Close()
		return nil, err
	}
	return newAgentPTY(e, pr, pw), nil
}

// AttachPTY re-attaches the terminal id a stopped server opened in the
// sandbox (see PTYAttacher).
func (a SandboxPTYs) AttachPTY(ctx context.Context, tenantID, sandboxID, id string, offset int64) (PTY, int64, error) {
	pr, pw := io.Pipe()
	e, err := a.Service.AttachTerminal(ctx, tenantID, sandboxID, id, offset, pw)
	if err != nil {
		pw.Close()
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, 0, fmt.Errorf("%w: %w", ErrPTYGone, err)
		}
		return nil, 0, err
	}
	return newAgentPTY(e, pr, pw), e.Start(), nil
}

func newAgentPTY(e *agentproto.Exec, pr *io.PipeReader, pw *io.PipeWriter) *agentPTY {
	go func() {
		// Every output frame was written before Done: the reader gets all
		// of it, then EOF.
		<-e.Done()
		pw.Close()
	}()
	return &agentPTY{e: e, r: pr}
}

// SandboxEnded reports whether the sandbox no longer runs, and why.
func (a SandboxPTYs) SandboxEnded(ctx context.Context, tenantID, sandboxID string) (bool, string, error) {
	sb, err := a.Service.Store().Sandbox(ctx, tenantID, sandboxID)
	if err != nil {
		return false, "", err
	}
	if sb.State == sandbox.StateRunning || sb.State == sandbox.StateCreating {
		return false, "", nil
	}
	why := fmt.Sprintf("the sandbox was %s", sb.State)
	if sb.StateReason != "" {
		why += " (" + sb.StateReason + ")"
	}
	return true, why, nil
}

// agentPTY is a terminal run by a sandbox's agent.
type agentPTY struct {
	e *agentproto.Exec
	r *io.PipeReader
}

func (p *agentPTY) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p *agentPTY) Write(b []byte) (int, error) { return p.e.Write(b) }

func (p *agentPTY) Resize(rows, cols uint16) error {
	return p.e.Resize(agentproto.Winsize{Rows: rows, Cols: cols})
}

func (p *agentPTY) Close() error {
	err := p.e.Close()
	// Nobody reads any more: a pending write of output must not hang.
	p.r.Close()
	return err
}

func (p *agentPTY) Wait() (Exit, error) {
	st, err := p.e.Wait()
	if err != nil {
		return Exit{}, err
	}
	return Exit{Code: st.Code, Signal: st.Signal, Reason: st.Reason, Duration: st.Duration}, nil
}
