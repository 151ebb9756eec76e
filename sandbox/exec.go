package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// ExecResult is how a command ended.
type ExecResult struct {
	ExecID string
	// ExitCode is the command's exit code, or 128+signal when a signal
	// ended it.
	ExitCode int
	// Signal names the signal that ended it ("KILL"), if one did.
	Signal string
	// Reason is "exited", "timeout" (its own timeout), "oom" or "killed".
	Reason   string
	Duration time.Duration
}

// Exec runs req's command in the tenant's running sandbox, copying its
// output to stdout and stderr as it comes (nil discards), and returns how it
// ended. The command is recorded (and audited sandbox.exec with its command
// line) before it starts; its record keeps the end and the first
// ExecRecordBytes of each stream. ctx bounds the command: when it ends, the
// command is killed.
func (s *Service) Exec(ctx context.Context, actor audit.Actor, tenantID, id string, req ExecRequest, stdout, stderr io.Writer) (ExecResult, error) {
	// The sandbox first: another tenant's is not found whatever the body.
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return ExecResult{}, err
	}
	if err := req.check(s.cfg); err != nil {
		return ExecResult{}, err
	}
	rec, err := s.store.startExec(ctx, actor, sb, req)
	if err != nil {
		return ExecResult{}, err
	}
	s.serving(rec.ID, true)
	defer s.serving(rec.ID, false) // after its end is recorded
	outCap, errCap := newCapture(s.cfg.ExecRecordBytes), newCapture(s.cfg.ExecRecordBytes)
	begin := time.Now()
	st, xerr := func() (agentproto.ExitStatus, error) {
		// The record's id names the exec in the agent too: a lost agent
		// session (a dropped channel) re-attaches it, and a restarted
		// server tells the commands that survived from the lost ones.
		e, err := c.StartResumableExec(ctx, agentproto.ExecRequest{
			ID: rec.ID, Sandbox: sb.ID, Argv: req.Cmd, Env: envList(req.Env), Dir: cmp.Or(req.Cwd, sb.TemplateWorkdir), TimeoutSeconds: req.TimeoutSeconds,
			Stdin: len(req.Stdin) > 0,
		}, tee{stdout, outCap}, tee{stderr, errCap}, s.nextAgent(sb, c))
		if err != nil {
			return agentproto.ExitStatus{}, err
		}
		defer e.Close()
		if req.Started != nil {
			req.Started(rec.ID, e.PID())
		}
		if len(req.Stdin) > 0 {
			go func() {
				if _, err := e.Write(req.Stdin); err == nil {
					e.CloseStdin()
				}
			}()
		}
		return e.Wait()
	}()
	rec.Stdout, rec.StdoutBytes = outCap.text()
	rec.Stderr, rec.StderrBytes = errCap.text()
	rec.Truncated = outCap.truncated() || errCap.truncated()
	if xerr == nil {
		code := st.Code
		rec.ExitCode, rec.Reason, rec.DurationMS = &code, st.Reason, st.Duration.Milliseconds()
	} else if errors.Is(context.Cause(ctx), ErrStreamStalled) {
		// The caller's client stopped reading: the kill was ours.
		rec.Reason = agentproto.ReasonTimeout
		rec.DurationMS = time.Since(begin).Milliseconds()
	} else if errors.Is(xerr, agentproto.ErrSessionLost) {
		// The agent session went and no new one took the command back.
		rec.Reason = truncate(ReasonLost+": "+xerr.Error(), 500)
		rec.DurationMS = time.Since(begin).Milliseconds()
	} else {
		rec.Reason = truncate("error: "+xerr.Error(), 500)
		rec.DurationMS = time.Since(begin).Milliseconds()
	}
	if xerr != nil && s.stop.Err() != nil && errors.Is(xerr, agentproto.ErrSessionLost) {
		// This server is closing (a restart): the command lives on in its
		// agent for the grace; the next server resumes or closes the record.
		s.log.Info("command left running for the next server", "sandbox", sb.ID, "exec", rec.ID)
	} else if err := s.store.finishExec(context.WithoutCancel(ctx), &rec); err != nil {
		s.log.Warn("record command end", "sandbox", sb.ID, "exec", rec.ID, "err", err)
	}
	if xerr != nil {
		if errors.Is(xerr, agentproto.ErrNotFound) {
			// The sandbox is running: what is missing is the program or
			// the working directory.
			return ExecResult{ExecID: rec.ID}, errdefs.Invalid("cmd", "not_found",
				fmt.Sprintf("no such program or working directory in the sandbox: %s", remoteMessage(xerr)))
		}
		reason := ""
		if rec.Reason == agentproto.ReasonTimeout || strings.HasPrefix(rec.Reason, ReasonLost) {
			reason = strings.SplitN(rec.Reason, ":", 2)[0]
		}
		if cause := context.Cause(ctx); errors.Is(cause, ErrStreamStalled) {
			xerr = cause
		}
		return ExecResult{ExecID: rec.ID, Reason: reason}, agentErr("exec in sandbox "+sb.ID, xerr)
	}
	return ExecResult{ExecID: rec.ID, ExitCode: st.Code, Signal: st.Signal, Reason: st.Reason, Duration: st.Duration}, nil
}

// ResumeExec re-attaches a command of the tenant's running sandbox that
// outlived the server that started it (a restart): its output from offset
// (the stdout and stderr bytes the client has) goes to stdout and stderr
// until it ends, and its record gets the end. start is where the output
// really starts (past offset when the agent's bounded buffer dropped
// bytes), known before the first byte arrives. Another tenant's command,
// or one the agent no longer has, is errdefs.ErrNotFound; one that ended,
// or that this server still streams, errdefs.ErrConflict.
func (s *Service) ResumeExec(ctx context.Context, actor audit.Actor, tenantID, id, execID string, offset int64,
	started func(start int64, pid int), stdout, stderr io.Writer) (ExecResult, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return ExecResult{}, err
	}
	if offset < 0 {
		return ExecResult{}, errdefs.Invalid("offset", "invalid", "the offset must not be negative")
	}
	var rec ExecRecord
	if err := s.store.db.WithContext(ctx).Where("id = ? AND tenant_id = ? AND sandbox_id = ?", execID, tenantID, sb.ID).Take(&rec).Error; err != nil {
		return ExecResult{}, fmt.Errorf("command %s: %w", execID, notFound(err))
	}
	if rec.EndedAt != nil {
		return ExecResult{ExecID: rec.ID}, fmt.Errorf("command %s: %w: it ended (%s)", execID, errdefs.ErrConflict, rec.Reason)
	}
	if !s.serveOnce(rec.ID) {
		return ExecResult{ExecID: rec.ID}, fmt.Errorf("command %s: %w: this server streams it already", execID, errdefs.ErrConflict)
	}
	defer s.serving(rec.ID, false)
	e, err := c.AttachExec(ctx, rec.ID, offset, stdout, stderr, s.nextAgent(sb, c))
	if err != nil {
		if errors.Is(err, agentproto.ErrNotFound) {
			return ExecResult{ExecID: rec.ID}, fmt.Errorf("command %s: %w: its process is gone", execID, errdefs.ErrNotFound)
		}
		return ExecResult{ExecID: rec.ID}, agentErr("resume command "+execID, err)
	}
	defer e.Close()
	s.log.Info("command resumed", "sandbox", sb.ID, "exec", rec.ID, "actor", actorName(actor), "offset", offset, "from", e.Start())
	if started != nil {
		started(e.Start(), e.PID())
	}
	st, xerr := e.Wait()
	if xerr != nil {
		return ExecResult{ExecID: rec.ID}, agentErr("resumed command "+execID, xerr)
	}
	code := st.Code
	if _, err := s.store.closeExec(context.WithoutCancel(ctx), rec, &code, st.Reason, st.Duration); err != nil {
		s.log.Warn("record command end", "sandbox", sb.ID, "exec", rec.ID, "err", err)
	}
	return ExecResult{ExecID: rec.ID, ExitCode: st.Code, Signal: st.Signal, Reason: st.Reason, Duration: st.Duration}, nil
}

// serveOnce notes that this process serves a command record, false when
// it does already.
func (s *Service) serveOnce(execID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.execs[execID] {
		return false
	}
	s.execs[execID] = true
	return true
}

// ErrStreamStalled is the cause to cancel an exec's context with when the
// client its output streams to stopped reading: the command is killed and
// recorded with reason "timeout".
var ErrStreamStalled = errors.New("the client stopped reading the command's output")

// ReasonLost is the reason of a command record whose process was lost: its
// agent session (or the server serving it) went, and the agent no longer
// had it when a session came back.
const ReasonLost = "lost"

// serving notes that this process serves (on) or no longer serves a
// command record: the sync leaves those alone.
func (s *Service) serving(execID string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.execs[execID] = true
	} else {
		delete(s.execs, execID)
	}
}

func (s *Service) servedExecs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.execs))
	for id := range s.execs {
		out = append(out, id)
	}
	return out
}

// execGuard is how old a command record must be before a sync may close
// it: one this process is starting is recorded a moment before it is noted
// as served.
const execGuard = 10 * time.Second

// syncExecs closes the open command records of the VM's sandboxes that this
// process does not serve: one the agent no longer holds was lost (reason
// "lost"); one it holds that ended while no server watched gets its real
// exit. One still running stays open: it survived, for its grace.
func (s *Service) syncExecs(ctx context.Context, c *agentproto.Client, vm vmpool.VM, group []Sandbox) {
	ids := make([]string, 0, len(group))
	for _, sb := range group {
		if sb.State == StateRunning {
			ids = append(ids, sb.ID)
		}
	}
	recs, err := s.store.openExecs(ctx, ids, s.cfg.Clock.Now().Add(-execGuard))
	if err != nil || len(recs) == 0 {
		return
	}
	held, err := c.ListExecs(ctx)
	if err != nil {
		return // an agent without exec.list cannot say: leave them
	}
	inGuest := make(map[string]agentproto.ExecInfo, len(held))
	for _, in := range held {
		inGuest[in.ID] = in
	}
	served := map[string]bool{}
	for _, id := range s.servedExecs() {
		served[id] = true
	}
	for _, rec := range recs {
		if served[rec.ID] {
			continue
		}
		in, ok := inGuest[rec.ID]
		// The guest's claim: only its own command's exit, bounded.
		switch {
		case ok && in.Sandbox != rec.SandboxID:
			continue
		case ok && !in.Exited:
			continue // survived; a client may resume it
		case ok && in.Exit != nil:
			code := in.Exit.Code
			reason := in.Exit.Reason
			if !validExitReason(reason) {
				reason = ReasonLost
			}
			if done, err := s.store.closeExec(ctx, rec, &code, reason, in.Exit.Duration); err == nil && done {
				s.log.Info("command ended while no server watched it", "vm", vm.ID, "sandbox", rec.SandboxID, "exec", rec.ID, "reason", reason)
			}
		default:
			if done, err := s.store.closeExec(ctx, rec, nil, ReasonLost, 0); err != nil {
				s.log.Warn("close lost command", "exec", rec.ID, "err", err)
			} else if done {
				s.log.Info("command lost: its agent no longer has it", "vm", vm.ID, "sandbox", rec.SandboxID, "exec", rec.ID)
			}
		}
	}
}

func validExitReason(r string) bool {
	switch r {
	case agentproto.ReasonExited, agentproto.ReasonTimeout, agentproto.ReasonOOM, agentproto.ReasonKilled:
		return true
	}
	return false
}

// nextAgent returns the resume function of execs on sb's VM: it waits for
// the VM's next agent session after c (the pool re-opens a lost one), for
// at most the exec grace.
func (s *Service) nextAgent(sb Sandbox, c *agentproto.Client) func(context.Context) (*agentproto.Client, error) {
	old := c
	return func(ctx context.Context) (*agentproto.Client, error) {
		deadline := time.Now().Add(s.cfg.ExecGrace)
		for {
			nc, err := s.vms.Agent(ctx, sb.TenantID, sb.VMID)
			switch {
			case err == nil && nc != old && !isDone(nc.Done()):
				old = nc
				return nc, nil
			case err != nil && !errors.Is(err, vmpool.ErrUnavailable):
				return nil, fmt.Errorf("agent of sandbox %s: %w", sb.ID, err)
			case time.Now().After(deadline):
				return nil, fmt.Errorf("agent of sandbox %s: no new session within the exec grace (%s)", sb.ID, s.cfg.ExecGrace)
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-s.stop.Done():
				return nil, s.stop.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// remoteMessage is the agent's own words for a failed op.
func remoteMessage(err error) string {
	var re *agentproto.RemoteError
	if errors.As(err, &re) {
		return re.Err.Message
	}
	return err.Error()
}

// tee writes to the caller's writer and to the record's capture. A caller
// that stops reading (a client gone) does not stop the capture.
type tee struct {
	w io.Writer
	c *capture
}

func (t tee) Write(p []byte) (int, error) {
	t.c.Write(p)
	if t.w != nil {
		if _, err := t.w.Write(p); err != nil {
			return len(p), nil //nolint:nilerr // the command goes on; only this reader is gone
		}
	}
	return len(p), nil
}

// capture keeps the first limit bytes written to it and counts the rest.
type capture struct {
	mu    sync.Mutex
	limit int
	buf   []byte
	total int64
}

func newCapture(limit int) *capture { return &capture{limit: limit} }

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	if room := c.limit - len(c.buf); room > 0 {
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (c *capture) truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total > int64(len(c.buf))
}

// text returns what was kept as storable text (valid UTF-8, no NUL) and the
// total byte count.
func (c *capture) text() (string, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.ToValidUTF8(string(c.buf), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	// A rune cut at the limit shows as one replacement character.
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "")
	}
	return s, c.total
}
