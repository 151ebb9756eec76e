package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
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
	outCap, errCap := newCapture(s.cfg.ExecRecordBytes), newCapture(s.cfg.ExecRecordBytes)
	begin := time.Now()
	st, xerr := func() (agentproto.ExitStatus, error) {
		e, err := c.StartExec(ctx, agentproto.ExecRequest{
			Sandbox: sb.ID, Argv: req.Cmd, Env: envList(req.Env), Dir: req.Cwd, TimeoutSeconds: req.TimeoutSeconds,
			Stdin: len(req.Stdin) > 0,
		}, tee{stdout, outCap}, tee{stderr, errCap})
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
	} else {
		rec.Reason = truncate("error: "+xerr.Error(), 500)
		rec.DurationMS = time.Since(begin).Milliseconds()
	}
	if err := s.store.finishExec(context.WithoutCancel(ctx), &rec); err != nil {
		s.log.Warn("record command end", "sandbox", sb.ID, "exec", rec.ID, "err", err)
	}
	if xerr != nil {
		if errors.Is(xerr, agentproto.ErrNotFound) {
			// The sandbox is running: what is missing is the program or
			// the working directory.
			return ExecResult{ExecID: rec.ID}, tenants.Invalid("cmd", "not_found",
				fmt.Sprintf("no such program or working directory in the sandbox: %s", remoteMessage(xerr)))
		}
		return ExecResult{ExecID: rec.ID}, agentErr("exec in sandbox "+sb.ID, xerr)
	}
	return ExecResult{ExecID: rec.ID, ExitCode: st.Code, Signal: st.Signal, Reason: st.Reason, Duration: st.Duration}, nil
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
