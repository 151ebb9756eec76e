package agentproto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// chunkSize is how much of a stream goes into one frame.
const chunkSize = 32 << 10

// supports fails with ErrNotImplemented, without a round trip, when the
// agent did not list op in its hello.
func (c *Client) supports(op Op) error {
	if !slices.Contains(c.hello.Capabilities, string(op)) {
		return fmt.Errorf("agent %s does not offer %s: %w", c.hello.Agent, op, ErrNotImplemented)
	}
	return nil
}

// CreateSandbox creates and starts a sandbox. It returns once the sandbox's
// init answers: commands can run.
func (c *Client) CreateSandbox(ctx context.Context, spec SandboxSpec) (SandboxInfo, error) {
	if err := c.supports(OpSandboxCreate); err != nil {
		return SandboxInfo{}, err
	}
	resp, err := c.call(ctx, Request{V: Version, Op: OpSandboxCreate, Sandbox: &spec})
	if err != nil {
		return SandboxInfo{}, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	if resp.Sandbox == nil {
		return SandboxInfo{}, fmt.Errorf("create sandbox %s: no sandbox in response: %w", spec.ID, ErrProtocol)
	}
	return *resp.Sandbox, nil
}

// DestroySandbox kills a sandbox and removes everything it had; it returns
// the sandbox's last state. ErrNotFound when the agent has no such sandbox.
func (c *Client) DestroySandbox(ctx context.Context, id string) (SandboxInfo, error) {
	if err := c.supports(OpSandboxDestroy); err != nil {
		return SandboxInfo{}, err
	}
	resp, err := c.call(ctx, Request{V: Version, Op: OpSandboxDestroy, SandboxID: id})
	if err != nil {
		return SandboxInfo{}, fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	if resp.Sandbox == nil {
		return SandboxInfo{}, fmt.Errorf("destroy sandbox %s: no sandbox in response: %w", id, ErrProtocol)
	}
	return *resp.Sandbox, nil
}

// ListSandboxes returns the guest's sandboxes and templates.
func (c *Client) ListSandboxes(ctx context.Context) (SandboxList, error) {
	if err := c.supports(OpSandboxList); err != nil {
		return SandboxList{}, err
	}
	resp, err := c.call(ctx, Request{V: Version, Op: OpSandboxList})
	if err != nil {
		return SandboxList{}, fmt.Errorf("list sandboxes: %w", err)
	}
	if resp.Sandboxes == nil {
		return SandboxList{}, fmt.Errorf("list sandboxes: no list in response: %w", ErrProtocol)
	}
	return *resp.Sandboxes, nil
}

// SandboxStats samples a sandbox's cgroup and disk usage.
func (c *Client) SandboxStats(ctx context.Context, id string) (SandboxStats, error) {
	if err := c.supports(OpSandboxStats); err != nil {
		return SandboxStats{}, err
	}
	resp, err := c.call(ctx, Request{V: Version, Op: OpSandboxStats, SandboxID: id})
	if err != nil {
		return SandboxStats{}, fmt.Errorf("sandbox stats %s: %w", id, err)
	}
	if resp.SandboxStats == nil {
		return SandboxStats{}, fmt.Errorf("sandbox stats %s: no stats in response: %w", id, ErrProtocol)
	}
	return *resp.SandboxStats, nil
}

// Baseline asks the agent to time raw crun in the guest (benchmarks only).
func (c *Client) Baseline(ctx context.Context, req BaselineRequest) (BaselineResult, error) {
	if err := c.supports(OpBaseline); err != nil {
		return BaselineResult{}, err
	}
	resp, err := c.call(ctx, Request{V: Version, Op: OpBaseline, Baseline: &req})
	if err != nil {
		return BaselineResult{}, fmt.Errorf("baseline %s: %w", req.Kind, err)
	}
	if resp.Baseline == nil || len(resp.Baseline.Samples) > MaxBaselineCount {
		return BaselineResult{}, fmt.Errorf("baseline %s: no result or too many samples: %w", req.Kind, ErrProtocol)
	}
	if req.Kind == BaselineLoop {
		if err := resp.Baseline.Loop.Check(req); err != nil {
			return BaselineResult{}, err
		}
	}
	return *resp.Baseline, nil
}

// open starts a streaming op: it sends req and reads the first response,
// leaving the stream open. ctx bounds this exchange only.
func (c *Client) open(ctx context.Context, req Request) (net.Conn, Response, error) {
	if err := c.supports(req.Op); err != nil {
		return nil, Response{}, err
	}
	st, err := c.sess.OpenStream()
	if err != nil {
		return nil, Response{}, fmt.Errorf("open stream: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Unix(1, 0)) })
	resp, err := exchange(ctx, st, req)
	if !stop() || err != nil {
		st.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, Response{}, err
	}
	return st, resp, nil
}

// Exec is a command running in a sandbox. Its methods are safe for
// concurrent use.
type Exec struct {
	pid int
	id  string

	wmu sync.Mutex // one frame at a time towards the agent; guards st
	st  net.Conn

	// resume returns the VM's next agent session after this one ended
	// (StartResumableExec); nil: the exec ends with its stream.
	resume func(context.Context) (*Client, error)
	// offset is the output (stdout and stderr) received; dropped what the
	// agent's buffer lost across re-attaches; resumes counts them.
	// Written by the read loop only, read after done or under wmu.
	offset, dropped int64
	resumes         int
	start           int64

	done   chan struct{}
	status ExitStatus
	err    error
	stop   func() bool
}

// StartExec starts req's command and copies its output to stdout and stderr
// (nil discards) until it exits. ctx bounds the whole command: when it ends
// the command is killed. A terminal (req.TTY) writes only to stdout.
func (c *Client) StartExec(ctx context.Context, req ExecRequest, stdout, stderr io.Writer) (*Exec, error) {
	return c.startExec(ctx, Request{V: Version, Op: OpExec, Exec: &req}, stdout, stderr, nil)
}

// StartResumableExec is StartExec for a command that outlives its agent
// session: req.ID must be set. When the session ends under it (the host
// dropped the channel, a crashed or replaced session), resume is called for
// the VM's next session (it waits for one; an error gives up) and the exec
// is re-attached there from the output received so far, so stdout and
// stderr miss nothing the agent still held (see OpExecAttach). Without the
// agent's exec.attach capability it is StartExec.
func (c *Client) StartResumableExec(ctx context.Context, req ExecRequest, stdout, stderr io.Writer, resume func(context.Context) (*Client, error)) (*Exec, error) {
	if !ValidExecID(req.ID) {
		return nil, fmt.Errorf("exec in %s: id %q: %w", req.Sandbox, req.ID, ErrBadRequest)
	}
	if c.supports(OpExecAttach) != nil {
		resume = nil
	}
	return c.startExec(ctx, Request{V: Version, Op: OpExec, Exec: &req}, stdout, stderr, resume)
}

// AttachExec re-attaches the detached exec id (OpExecAttach) from offset
// (the output bytes the caller has): its output from there on goes to
// stdout and stderr, as with StartResumableExec (resume may be nil).
// Offset tells where the output really starts: past offset when the
// agent's buffer dropped bytes. An exec the agent does not have is
// ErrNotFound.
func (c *Client) AttachExec(ctx context.Context, id string, offset int64, stdout, stderr io.Writer, resume func(context.Context) (*Client, error)) (*Exec, error) {
	if !ValidExecID(id) {
		return nil, fmt.Errorf("attach exec: id %q: %w", id, ErrBadRequest)
	}
	return c.startExec(ctx, Request{V: Version, Op: OpExecAttach, ExecAttach: &ExecAttachRequest{ID: id, Offset: offset}}, stdout, stderr, resume)
}

// Start is where the output this Exec received starts (non-zero after
// AttachExec).
func (e *Exec) Start() int64 { return e.start }

func (c *Client) startExec(ctx context.Context, req Request, stdout, stderr io.Writer, resume func(context.Context) (*Client, error)) (*Exec, error) {
	what, id := "exec", ""
	if req.Exec != nil {
		what, id = "exec in "+req.Exec.Sandbox, req.Exec.ID
	} else if req.ExecAttach != nil {
		what, id = "attach exec "+req.ExecAttach.ID, req.ExecAttach.ID
	}
	st, resp, err := c.open(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if resp.Exec == nil {
		st.Close()
		return nil, fmt.Errorf("%s: no pid in response: %w", what, ErrProtocol)
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	e := &Exec{st: st, pid: resp.Exec.PID, id: id, resume: resume, done: make(chan struct{}),
		start: resp.Exec.Offset, offset: resp.Exec.Offset}
	e.stop = context.AfterFunc(ctx, func() {
		// Ask for the kill, then drop the stream: the agent kills a command
		// whose stream went away in any case.
		e.Signal("KILL")
		e.stream().Close()
	})
	go e.read(ctx, c, stdout, stderr)
	return e, nil
}

// PID is the command's process id inside the sandbox.
func (e *Exec) PID() int { return e.pid }

// Dropped is how many output bytes the agent's bounded buffer lost while
// the exec was detached, and Resumes how often it was re-attached: valid
// once Done.
func (e *Exec) Dropped() (bytes int64, resumes int) { return e.dropped, e.resumes }

func (e *Exec) stream() net.Conn {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	return e.st
}

// reattach waits for the next agent session and re-attaches the exec there
// from the output received so far.
func (e *Exec) reattach(ctx context.Context) (net.Conn, int64, error) {
	for {
		c, err := e.resume(ctx)
		if err != nil {
			return nil, 0, err
		}
		st, resp, err := c.open(ctx, Request{V: Version, Op: OpExecAttach, ExecAttach: &ExecAttachRequest{ID: e.id, Offset: e.offset}})
		switch {
		case err == nil && resp.Exec != nil:
			return st, resp.Exec.Offset, nil
		case err == nil:
			st.Close()
			return nil, 0, fmt.Errorf("exec.attach: no exec in response: %w", ErrProtocol)
		case errors.Is(err, ErrNotFound), errors.Is(err, ErrBadRequest), ctx.Err() != nil:
			return nil, 0, err
		}
		// That session failed too: wait for the next one.
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (e *Exec) read(ctx context.Context, c *Client, stdout, stderr io.Writer) {
	defer close(e.done)
	defer func() { e.stream().Close() }()
	defer e.stop()
	st := e.stream()
	for {
		f, err := ReadFrame(st)
		if err != nil {
			if e.resume != nil && ctx.Err() == nil && c.sess.IsClosed() {
				c.log.Info("exec stream lost with its agent session: re-attaching", "exec", e.id, "offset", e.offset)
				nst, off, rerr := e.reattach(ctx)
				if rerr == nil {
					e.wmu.Lock()
					e.st = nst
					e.dropped += max(off-e.offset, 0)
					e.offset = max(off, e.offset)
					e.resumes++
					e.wmu.Unlock()
					st = nst
					if ctx.Err() != nil {
						// The kill of ctx went to the old stream.
						e.Signal("KILL")
						st.Close()
					}
					continue
				}
				e.err = fmt.Errorf("exec: %w (%w); re-attach: %w", ErrSessionLost, err, ctxErr(ctx, rerr))
				return
			}
			if ctx.Err() == nil && c.sess.IsClosed() {
				err = fmt.Errorf("%w: %w", ErrSessionLost, err)
			}
			e.err = fmt.Errorf("exec: %w", ctxErr(ctx, err))
			return
		}
		switch f.Channel {
		case ChannelStdout:
			e.offset += int64(len(f.Data))
			// A consumer that fails stops getting output; the command goes on.
			if stdout != nil {
				if _, err := stdout.Write(f.Data); err != nil {
					stdout = nil
				}
			}
		case ChannelStderr:
			e.offset += int64(len(f.Data))
			if stderr != nil {
				if _, err := stderr.Write(f.Data); err != nil {
					stderr = nil
				}
			}
		case ChannelExit:
			// ctx ending before the exit was read sent the kill: whether
			// the stream close or the exit the kill caused arrives first is
			// a race, and the answer must not depend on it.
			if !e.stop() {
				e.err = fmt.Errorf("exec: %w", ctx.Err())
				return
			}
			if err := json.Unmarshal(f.Data, &e.status); err != nil {
				e.err = fmt.Errorf("exec: exit status: %w (%w)", ErrProtocol, err)
			}
			return
		case ChannelError:
			var we Error
			if err := json.Unmarshal(f.Data, &we); err != nil {
				e.err = fmt.Errorf("exec: error frame: %w (%w)", ErrProtocol, err)
				return
			}
			e.err = &RemoteError{Op: OpExec, Err: we}
			return
		default:
			e.err = fmt.Errorf("exec: frame on channel %d: %w", f.Channel, ErrProtocol)
			return
		}
	}
}

func (e *Exec) send(ch Channel, data []byte) error {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	return WriteFrame(e.st, ch, data)
}

// Write sends p to the command's stdin.
func (e *Exec) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), chunkSize)
		if err := e.send(ChannelStdin, p[:k]); err != nil {
			return n, fmt.Errorf("exec stdin: %w", err)
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// CloseStdin closes the command's stdin (EOF, or ^D on a terminal).
func (e *Exec) CloseStdin() error {
	if err := e.send(ChannelStdin, nil); err != nil {
		return fmt.Errorf("exec close stdin: %w", err)
	}
	return nil
}

// Resize sets the terminal's size.
func (e *Exec) Resize(ws Winsize) error {
	b, _ := json.Marshal(ws)
	if err := e.send(ChannelResize, b); err != nil {
		return fmt.Errorf("exec resize: %w", err)
	}
	return nil
}

// Signal sends a signal ("TERM", "INT", "KILL", ...) to the command's
// process group.
func (e *Exec) Signal(name string) error {
	if err := e.send(ChannelSignal, []byte(name)); err != nil {
		return fmt.Errorf("exec signal: %w", err)
	}
	return nil
}

// Done is closed when the command has exited (or the stream failed).
func (e *Exec) Done() <-chan struct{} { return e.done }

// Wait waits for the command to end and returns how it ended.
func (e *Exec) Wait() (ExitStatus, error) {
	<-e.done
	return e.status, e.err
}

// Close kills the command if it still runs and releases the stream.
func (e *Exec) Close() error {
	select {
	case <-e.done:
		return nil
	default:
	}
	e.Signal("KILL")
	e.stream().Close()
	<-e.done
	return nil
}

// Exec runs req's command to the end: stdin (nil: none) is copied to it and
// closed at EOF, its output copied to stdout and stderr.
func (c *Client) Exec(ctx context.Context, req ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (ExitStatus, error) {
	req.Stdin = req.Stdin || stdin != nil
	e, err := c.StartExec(ctx, req, stdout, stderr)
	if err != nil {
		return ExitStatus{}, err
	}
	if stdin != nil {
		go func() {
			if _, err := io.Copy(e, stdin); err == nil {
				e.CloseStdin()
			}
		}()
	}
	return e.Wait()
}

// ReadFile copies a file of a sandbox to w. It never accepts more bytes than
// the agent announced (or req.Limit).
func (c *Client) ReadFile(ctx context.Context, req FileReadRequest, w io.Writer) (FileInfo, error) {
	st, resp, err := c.open(ctx, Request{V: Version, Op: OpFileRead, FileRead: &req})
	if err != nil {
		return FileInfo{}, fmt.Errorf("read %s in %s: %w", req.Path, req.Sandbox, err)
	}
	defer st.Close()
	if resp.File == nil {
		return FileInfo{}, fmt.Errorf("read %s: no file info: %w", req.Path, ErrProtocol)
	}
	info := *resp.File
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	bound := max(info.Size-req.Offset, 0)
	if req.Limit > 0 {
		bound = min(bound, req.Limit)
	}
	var got int64
	for {
		f, err := ReadFrame(st)
		if err != nil {
			return info, fmt.Errorf("read %s: %w", req.Path, ctxErr(ctx, err))
		}
		switch f.Channel {
		case ChannelData:
			if len(f.Data) == 0 {
				return info, nil
			}
			got += int64(len(f.Data))
			if got > bound {
				return info, fmt.Errorf("read %s: agent sent over %d bytes: %w", req.Path, bound, ErrProtocol)
			}
			if _, err := w.Write(f.Data); err != nil {
				return info, fmt.Errorf("read %s: %w", req.Path, err)
			}
		case ChannelError:
			var we Error
			if err := json.Unmarshal(f.Data, &we); err != nil {
				return info, fmt.Errorf("read %s: error frame: %w", req.Path, ErrProtocol)
			}
			return info, fmt.Errorf("read %s: %w", req.Path, &RemoteError{Op: OpFileRead, Err: we})
		default:
			return info, fmt.Errorf("read %s: frame on channel %d: %w", req.Path, f.Channel, ErrProtocol)
		}
	}
}

// WriteFile writes r into a file of a sandbox and returns what the agent
// wrote. The file appears whole or not at all (unless req.Append).
func (c *Client) WriteFile(ctx context.Context, req FileWriteRequest, r io.Reader) (FileInfo, error) {
	st, _, err := c.open(ctx, Request{V: Version, Op: OpFileWrite, FileWrite: &req})
	if err != nil {
		return FileInfo{}, fmt.Errorf("write %s in %s: %w", req.Path, req.Sandbox, err)
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	// The agent may answer early (too large, disk full): then stop sending.
	type result struct {
		resp Response
		err  error
	}
	final := make(chan result, 1)
	go func() {
		var resp Response
		err := ReadMessage(st, &resp)
		if err == nil {
			st.SetWriteDeadline(time.Unix(1, 0))
		}
		final <- result{resp, err}
	}()
	werr := func() error {
		buf := make([]byte, chunkSize)
		for {
			n, rerr := r.Read(buf)
			if n > 0 {
				if err := WriteFrame(st, ChannelData, buf[:n]); err != nil {
					return err
				}
			}
			if errors.Is(rerr, io.EOF) {
				return WriteFrame(st, ChannelData, nil)
			}
			if rerr != nil {
				return fmt.Errorf("read source: %w", rerr)
			}
		}
	}()
	var res result
	if werr != nil {
		select {
		case res = <-final:
		case <-time.After(5 * time.Second):
			return FileInfo{}, fmt.Errorf("write %s: %w", req.Path, ctxErr(ctx, werr))
		}
		if res.err != nil || res.resp.Error == nil {
			return FileInfo{}, fmt.Errorf("write %s: %w", req.Path, ctxErr(ctx, werr))
		}
	} else {
		res = <-final
	}
	if res.err != nil {
		return FileInfo{}, fmt.Errorf("write %s: %w", req.Path, ctxErr(ctx, res.err))
	}
	if res.resp.Error != nil {
		return FileInfo{}, fmt.Errorf("write %s: %w", req.Path, &RemoteError{Op: OpFileWrite, Err: *res.resp.Error})
	}
	if res.resp.File == nil {
		return FileInfo{}, fmt.Errorf("write %s: no file info: %w", req.Path, ErrProtocol)
	}
	return *res.resp.File, nil
}

// ListExecs lists the execs with an id the agent holds (OpExecList): the
// guest's claim, for reconciling records.
func (c *Client) ListExecs(ctx context.Context) ([]ExecInfo, error) {
	if err := c.supports(OpExecList); err != nil {
		return nil, err
	}
	resp, err := c.call(ctx, Request{V: Version, Op: OpExecList})
	if err != nil {
		return nil, fmt.Errorf("list execs: %w", err)
	}
	if resp.Execs == nil {
		return nil, fmt.Errorf("list execs: no list in response: %w", ErrProtocol)
	}
	return *resp.Execs, nil
}

// Detach releases the exec's stream without killing its command: a kept
// one (ExecRequest.Keep) goes on in the agent for a later AttachExec by its
// id; any other dies with its stream. Wait then reports the stream closed.
func (e *Exec) Detach() {
	e.stop()
	e.stream().Close()
	<-e.done
}

// SetSandboxLifetime gives a running sandbox seconds more to live, from now
// (OpSandboxLifetime), replacing the lifetime it had.
func (c *Client) SetSandboxLifetime(ctx context.Context, id string, seconds int) error {
	if err := c.supports(OpSandboxLifetime); err != nil {
		return err
	}
	if _, err := c.call(ctx, Request{V: Version, Op: OpSandboxLifetime, SandboxID: id, Lifetime: &LifetimeRequest{Seconds: seconds}}); err != nil {
		return fmt.Errorf("set lifetime of sandbox %s: %w", id, err)
	}
	return nil
}

// ReleaseTemplate asks the agent to unmount the template disk called name
// (OpTemplateRelease) before the host unplugs it: ErrConflict while a
// sandbox runs from it, ErrNotFound when no disk holds it.
func (c *Client) ReleaseTemplate(ctx context.Context, name string) error {
	if err := c.supports(OpTemplateRelease); err != nil {
		return err
	}
	if _, err := c.call(ctx, Request{V: Version, Op: OpTemplateRelease, Template: name}); err != nil {
		return fmt.Errorf("release template %s: %w", name, err)
	}
	return nil
}
