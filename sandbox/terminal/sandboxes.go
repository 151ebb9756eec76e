package terminal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

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
	out := newOutputHandoff()
	size := agentproto.Winsize{Cols: req.Cols, Rows: req.Rows}
	var (
		e   *agentproto.Exec
		err error
	)
	if req.ID != "" {
		e, err = a.Service.StartTerminalID(ctx, tenantID, sandboxID, req.ID, req.Argv, req.Env, size, out)
	} else {
		e, err = a.Service.StartTerminal(ctx, tenantID, sandboxID, req.Argv, req.Env, size, out)
	}
	if err != nil {
		out.close()
		return nil, err
	}
	return newAgentPTY(e, out), nil
}

// AttachPTY re-attaches the terminal id a stopped server opened in the
// sandbox (see PTYAttacher).
func (a SandboxPTYs) AttachPTY(ctx context.Context, tenantID, sandboxID, id string, offset int64) (PTY, int64, error) {
	out := newOutputHandoff()
	e, err := a.Service.AttachTerminal(ctx, tenantID, sandboxID, id, offset, out)
	if err != nil {
		out.close()
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, 0, fmt.Errorf("%w: %w", ErrPTYGone, err)
		}
		return nil, 0, err
	}
	return newAgentPTY(e, out), e.Start(), nil
}

func newAgentPTY(e *agentproto.Exec, out *outputHandoff) *agentPTY {
	go func() {
		// Every output frame was written before Done: the taker gets all
		// of it, then the end.
		<-e.Done()
		close(out.ended)
	}()
	return &agentPTY{e: e, out: out}
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

// agentPTY is a terminal run by a sandbox's agent. Its output goes from
// the agent connection's reader straight to whoever PushOutput named (the
// hub); Read is for a caller that reads instead.
type agentPTY struct {
	e   *agentproto.Exec
	out *outputHandoff

	readOnce sync.Once
	pr       *io.PipeReader
}

var _ OutputPusher = (*agentPTY)(nil)

func (p *agentPTY) PushOutput(out func([]byte)) { p.out.push(out) }

func (p *agentPTY) Read(b []byte) (int, error) {
	p.readOnce.Do(func() {
		pr, pw := io.Pipe()
		p.pr = pr
		go func() {
			p.out.push(func(d []byte) { pw.Write(d) })
			pw.Close()
		}()
	})
	return p.pr.Read(b)
}

func (p *agentPTY) Write(b []byte) (int, error) { return p.e.Write(b) }

func (p *agentPTY) Resize(rows, cols uint16) error {
	return p.e.Resize(agentproto.Winsize{Rows: rows, Cols: cols})
}

func (p *agentPTY) Close() error {
	err := p.e.Close()
	// Nobody takes output any more: a pending write of it must not hang.
	p.out.close()
	p.readOnce.Do(func() {})
	if p.pr != nil {
		p.pr.Close()
	}
	return err
}

func (p *agentPTY) Wait() (Exit, error) {
	st, err := p.e.Wait()
	if err != nil {
		return Exit{}, err
	}
	return Exit{Code: st.Code, Signal: st.Signal, Reason: st.Reason, Duration: st.Duration}, nil
}

// outputHandoff is the io.Writer a terminal's Exec writes its output to:
// each Write goes straight to the taker push named, waiting until there is
// one (as a pipe waits for its reader).
type outputHandoff struct {
	mu     sync.Mutex
	cond   *sync.Cond
	take   func([]byte)
	closed bool
	// ended is closed once no more output comes (the Exec is done).
	ended chan struct{}
}

func newOutputHandoff() *outputHandoff {
	o := &outputHandoff{ended: make(chan struct{})}
	o.cond = sync.NewCond(&o.mu)
	return o
}

func (o *outputHandoff) Write(p []byte) (int, error) {
	o.mu.Lock()
	for o.take == nil && !o.closed {
		o.cond.Wait()
	}
	take, closed := o.take, o.closed
	o.mu.Unlock()
	if closed {
		return 0, io.ErrClosedPipe
	}
	take(p)
	return len(p), nil
}

// push makes take the output's taker and returns once the output ended.
func (o *outputHandoff) push(take func([]byte)) {
	o.mu.Lock()
	o.take = take
	o.cond.Broadcast()
	o.mu.Unlock()
	<-o.ended
}

// close refuses output from now on (nobody takes it any more).
func (o *outputHandoff) close() {
	o.mu.Lock()
	o.closed = true
	o.cond.Broadcast()
	o.mu.Unlock()
}
