package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agent/sandboxinit"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

const (
	// exitGrace is how long output is still read after a command exits:
	// what it wrote is in the pipe already; a background child that keeps
	// the pipe open does not hold the exec open beyond it.
	exitGrace = 250 * time.Millisecond
	// maxExecTimeout bounds ExecRequest.TimeoutSeconds (a week).
	maxExecTimeout = 7 * 24 * 3600
	// maxExecGrace bounds HelloRequest.ExecGraceSeconds (a day).
	maxExecGrace = 24 * 3600
	maxPathLen   = sandboxinit.MaxPathLen
)

// signals the host may send, by name.
var signalsByName = map[string]unix.Signal{
	"HUP": unix.SIGHUP, "INT": unix.SIGINT, "QUIT": unix.SIGQUIT, "KILL": unix.SIGKILL,
	"USR1": unix.SIGUSR1, "USR2": unix.SIGUSR2, "TERM": unix.SIGTERM, "CONT": unix.SIGCONT,
	"STOP": unix.SIGSTOP, "TSTP": unix.SIGTSTP, "WINCH": unix.SIGWINCH, "ALRM": unix.SIGALRM,
	"PIPE": unix.SIGPIPE,
}

func signalName(sig int) string {
	return strings.TrimPrefix(unix.SignalName(unix.Signal(sig)), "SIG")
}

func checkExec(req *agentproto.ExecRequest) error {
	if req == nil {
		return fmt.Errorf("exec without its body: %w", agentproto.ErrBadRequest)
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return fmt.Errorf("exec: empty command: %w", agentproto.ErrBadRequest)
	}
	size := 0
	for _, a := range req.Argv {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("exec: NUL in an argument: %w", agentproto.ErrBadRequest)
		}
		size += len(a) + 1
	}
	if size > maxEnvBytes {
		return fmt.Errorf("exec: %d bytes of arguments: %w", size, agentproto.ErrBadRequest)
	}
	if err := checkEnv(req.Env); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	if len(req.Dir) > maxPathLen || strings.ContainsRune(req.Dir, 0) {
		return fmt.Errorf("exec: working directory: %w", agentproto.ErrBadRequest)
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > maxExecTimeout {
		return fmt.Errorf("exec: timeout %d s: %w", req.TimeoutSeconds, agentproto.ErrBadRequest)
	}
	return nil
}

// codeError turns an error code from a sandbox's init into an error that
// keeps it.
func codeError(code, msg string) error {
	var sentinel error
	switch code {
	case agentproto.CodeNotFound:
		sentinel = agentproto.ErrNotFound
	case agentproto.CodeBadRequest:
		sentinel = agentproto.ErrBadRequest
	case agentproto.CodeExhausted:
		sentinel = agentproto.ErrExhausted
	default:
		return errors.New(msg)
	}
	return fmt.Errorf("%s: %w", msg, sentinel)
}

// spawned is a command started by a sandbox's init: the control connection
// and the agent's ends of its stdio.
type spawned struct {
	pid    int
	stdin  *os.File // nil without stdin
	stdout *os.File // the terminal's master with TTY
	stderr *os.File // nil with TTY

	mu sync.Mutex
	c  *net.UnixConn // nil once back in the pool or closed
}

// control sends a signal to the command's process group, unless it ended
// and its connection went on to another command.
func (s *spawned) control(sig unix.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		sendInit(s.c, initControl{Signal: int(sig)})
	}
}

// release gives the connection back to pool once init said it takes
// another command (initExit.Reuse): nothing of this one goes on it any more.
func (s *spawned) release(pool *initPool) {
	s.mu.Lock()
	c := s.c
	s.c = nil
	s.mu.Unlock()
	if c != nil {
		pool.put(c)
	}
}

func (s *spawned) close() {
	for _, f := range []*os.File{s.stdin, s.stdout, s.stderr} {
		if f != nil {
			f.Close()
		}
	}
	s.mu.Lock()
	if s.c != nil {
		s.c.Close()
		s.c = nil
	}
	s.mu.Unlock()
}

// spawn asks the sandbox's init to start a command, on a pooled connection
// when there is one (initpool.go).
func (m *Manager) spawn(ctx context.Context, sb *sandbox, req spawnRequest) (*spawned, error) {
	req.Reuse = true
	for {
		c, reused, err := m.initConn(ctx, sb)
		if err != nil {
			return nil, err
		}
		s, err := spawnOn(ctx, c, req)
		if err != nil && reused && connGone(err) && ctx.Err() == nil {
			continue // init closed it while it idled: dial anew
		}
		return s, err
	}
}

// spawnOn sends a spawn on c and returns the command; c is closed when it
// fails.
func spawnOn(ctx context.Context, c *net.UnixConn, req spawnRequest) (*spawned, error) {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := sendInit(c, initRequest{Op: initOpSpawn, Spawn: &req}); err != nil {
		c.Close()
		return nil, err
	}
	var rep initReply
	fds, err := recvInit(c, &rep)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("spawn: %w", err)
	}
	want := 2
	switch {
	case req.TTY:
		want = 1
	case req.Stdin:
		want = 3
	}
	if rep.Code != "" || len(fds) != want {
		closeFDs(fds)
		c.Close()
		if rep.Code == "" {
			return nil, fmt.Errorf("spawn: init sent %d descriptors, want %d", len(fds), want)
		}
		return nil, codeError(rep.Code, rep.Error)
	}
	c.SetDeadline(time.Time{})
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		// Non-blocking: Go's poller drives them and deadlines work.
		unix.SetNonblock(fd, true)
		files[i] = os.NewFile(uintptr(fd), "stdio")
	}
	s := &spawned{c: c, pid: rep.PID}
	switch {
	case req.TTY:
		s.stdout = files[0]
	case req.Stdin:
		s.stdin, s.stdout, s.stderr = files[0], files[1], files[2]
	default:
		s.stdout, s.stderr = files[0], files[1]
	}
	return s, nil
}

// serveExec runs an exec stream: see agentproto.OpExec. sessDone is closed
// when the stream's host session ended.
func (m *Manager) serveExec(ctx context.Context, st net.Conn, req *agentproto.ExecRequest, sessDone <-chan struct{}) {
	fail := func(err error) {
		agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version, Error: agentproto.ErrorFor(err)})
	}
	if err := checkExec(req); err != nil {
		fail(err)
		return
	}
	if req.ID != "" && !agentproto.ValidExecID(req.ID) {
		fail(fmt.Errorf("exec: id: %w", agentproto.ErrBadRequest))
		return
	}
	if req.Keep && req.ID == "" {
		fail(fmt.Errorf("exec: keep needs an id: %w", agentproto.ErrBadRequest))
		return
	}
	if req.Keep && m.execs.keptIn(req.Sandbox) >= agentproto.MaxKeptExecs {
		fail(fmt.Errorf("exec: sandbox %s holds %d kept commands already: %w", req.Sandbox, agentproto.MaxKeptExecs, agentproto.ErrExhausted))
		return
	}
	if req.ID != "" && m.execs.get(req.ID) != nil {
		fail(fmt.Errorf("exec %s exists: %w", req.ID, agentproto.ErrConflict))
		return
	}
	sb, err := m.get(req.Sandbox)
	if err != nil {
		fail(fmt.Errorf("exec: %w", err))
		return
	}
	if err := sb.begin(); err != nil {
		fail(fmt.Errorf("exec: %w", err))
		return
	}
	p, err := m.spawn(ctx, sb, spawnRequest{
		Argv: req.Argv, Env: sb.execEnv(req.Env), Dir: req.Dir, Stdin: req.Stdin || req.TTY, TTY: req.TTY, Size: req.Size,
	})
	if err != nil {
		sb.end()
		// A sandbox that stopped (its lifetime, a destroy) while the spawn
		// went on fails it too: that is the sandbox's state, not a fault.
		if state := sb.currentState(); state != agentproto.SandboxRunning {
			err = fmt.Errorf("sandbox %s is %s: %w", sb.id, state, agentproto.ErrConflict)
		}
		fail(fmt.Errorf("exec in %s: %w", sb.id, err))
		return
	}
	r := newExecRun(req.ID, sb.id, p, req.TTY)
	r.keep = req.Keep
	if req.ID != "" {
		if err := m.execs.add(r); err != nil {
			killSpawned(p)
			p.close()
			sb.end()
			fail(err)
			return
		}
	}
	a := &attachment{st: st}
	r.attach(a, 0)
	go m.runExec(ctx, sb, r, req.TimeoutSeconds)
	m.serveAttached(ctx, st, r, a, 0, sessDone)
}

// serveExecAttach re-attaches a detached exec: see agentproto.OpExecAttach.
func (m *Manager) serveExecAttach(ctx context.Context, st net.Conn, req *agentproto.ExecAttachRequest, sessDone <-chan struct{}) {
	fail := func(err error) {
		agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version, Error: agentproto.ErrorFor(err)})
	}
	if req == nil || !agentproto.ValidExecID(req.ID) {
		fail(fmt.Errorf("exec.attach: id: %w", agentproto.ErrBadRequest))
		return
	}
	r := m.execs.get(req.ID)
	if r == nil {
		fail(fmt.Errorf("exec %s: %w", req.ID, agentproto.ErrNotFound))
		return
	}
	a := &attachment{st: st}
	off, err := r.attach(a, req.Offset)
	if err != nil {
		fail(err)
		return
	}
	m.log.Info("exec re-attached", "exec", r.id, "offset", req.Offset, "from", off)
	m.serveAttached(ctx, st, r, a, off, sessDone)
}

// serveAttached answers the exec's start (from: where its output starts),
// then serves it on st until the exit was sent or the stream ends. A stream
// that ends with its session detaches the exec for the grace; one the host
// closed kills it.
func (m *Manager) serveAttached(ctx context.Context, st net.Conn, r *execRun, a *attachment, from int64, sessDone <-chan struct{}) {
	var wmu sync.Mutex
	send := func(ch agentproto.Channel, data []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return agentproto.WriteFrame(st, ch, data)
	}
	writerDone := make(chan bool, 1)
	inputDone := make(chan struct{})
	if err := agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version,
		Exec: &agentproto.ExecStarted{PID: r.pid, Offset: from}}); err != nil {
		writerDone <- false
		close(inputDone)
	} else {
		go func() { writerDone <- r.serve(a, send) }()
		go func() {
			defer close(inputDone)
			m.readExecInput(st, r.p, r.tty, func(sig unix.Signal) {
				r.hostSignaled.Store(true)
				r.p.control(sig)
			})
		}()
	}
	var delivered, writerEnded bool
	select {
	case delivered = <-writerDone:
		writerEnded = true
	case <-inputDone:
	}
	if delivered {
		m.execs.remove(r)
		return
	}
	lost := ctx.Err() != nil
	select {
	case <-sessDone:
		lost = true
	default:
	}
	r.detach(a, lost, m.execs.graceNow(), func() {
		if killed, did := r.expire(); did {
			m.execs.remove(r)
			m.log.Info("detached exec's grace passed", "exec", r.id, "killed", killed)
		}
	})
	if lost && r.id != "" {
		m.log.Info("exec detached: its host session ended", "exec", r.id)
	}
	st.Close()
	<-inputDone
	if !writerEnded {
		<-writerDone
	}
	if r.isDelivered() {
		// The host closed the stream as the exit reached it.
		m.execs.remove(r)
	}
}

// runExec waits for r's command to end (its own timeout, the sandbox
// stopping, the agent shutting down, or a kill) and records how it ended.
func (m *Manager) runExec(ctx context.Context, sb *sandbox, r *execRun, timeoutSeconds int) {
	defer sb.end()
	p := r.p
	defer p.close()
	oomBefore := oomKills(sb.cgroup)
	started := time.Now()

	var pumps sync.WaitGroup
	pump := func(f *os.File, ch agentproto.Channel) {
		defer pumps.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				r.write(ch, buf[:n])
			}
			if err != nil {
				return // EOF, or EIO from a terminal whose last user left
			}
		}
	}
	pumps.Add(1)
	go pump(p.stdout, agentproto.ChannelStdout)
	if p.stderr != nil {
		pumps.Add(1)
		go pump(p.stderr, agentproto.ChannelStderr)
	}

	control := p.control
	// The exit comes on the connection; nothing else writes to it but
	// control, and only release takes it away (after the exit).
	pc := p.c
	type exitResult struct {
		ex  initExit
		err error
	}
	exitCh := make(chan exitResult, 1)
	go func() {
		var ex initExit
		fds, err := recvInit(pc, &ex)
		closeFDs(fds)
		exitCh <- exitResult{ex, err}
	}()
	var timeout <-chan time.Time
	if timeoutSeconds > 0 {
		t := time.NewTimer(time.Duration(timeoutSeconds) * time.Second)
		defer t.Stop()
		timeout = t.C
	}
	var timedOut, sandboxStopped bool
	var res exitResult
	stopping := sb.stopping
	done := ctx.Done()
	for waiting := true; waiting; {
		select {
		case res = <-exitCh:
			waiting = false
		case <-timeout:
			timedOut, timeout = true, nil
			control(unix.SIGKILL)
		case <-done:
			done = nil
			r.hostSignaled.Store(true)
			control(unix.SIGKILL)
		case <-stopping:
			// The sandbox's processes die with it; init's connection ends.
			sandboxStopped, stopping = true, nil
		}
	}
	duration := time.Since(started)
	if res.err == nil && res.ex.Reuse {
		p.release(&sb.inits)
	}

	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(exitGrace):
		past := time.Unix(1, 0)
		p.stdout.SetReadDeadline(past)
		if p.stderr != nil {
			p.stderr.SetReadDeadline(past)
		}
		<-drained
	}
	status := agentproto.ExitStatus{Code: res.ex.Code, Reason: agentproto.ReasonExited, Duration: duration}
	if res.ex.Signal != 0 {
		status.Signal = signalName(res.ex.Signal)
	}
	switch {
	case res.err != nil:
		// Init went away: the sandbox stopped under the command.
		status.Code, status.Signal = 128+int(unix.SIGKILL), "KILL"
		status.Reason = execReasonFor(sb.stopReason())
	case timedOut:
		status.Reason = agentproto.ReasonTimeout
	case unix.Signal(res.ex.Signal) == unix.SIGKILL && oomKills(sb.cgroup) > oomBefore:
		status.Reason = agentproto.ReasonOOM
	case res.ex.Signal != 0 && (r.hostSignaled.Load() || sandboxStopped):
		status.Reason = agentproto.ReasonKilled
	}
	if r.ended(status) {
		m.execs.remove(r)
	}
}

func sendExit(send func(agentproto.Channel, []byte) error, st agentproto.ExitStatus) error {
	b, _ := json.Marshal(st)
	return send(agentproto.ChannelExit, b)
}

// execReasonFor is the reason an exec gets when its sandbox stopped under it.
func execReasonFor(sandboxReason string) string {
	switch sandboxReason {
	case agentproto.ReasonTimeout:
		return agentproto.ReasonTimeout
	case agentproto.ReasonOOM:
		return agentproto.ReasonOOM
	}
	return agentproto.ReasonKilled
}

func killSpawned(p *spawned) { p.control(unix.SIGKILL) }

// readExecInput applies the host's frames (stdin, resize, signals) until
// the stream ends.
func (m *Manager) readExecInput(st net.Conn, p *spawned, tty bool, signal func(unix.Signal)) {
	in := p.stdin
	if tty {
		in = p.stdout // the terminal's master
	}
	for {
		f, err := agentproto.ReadFrame(st)
		if err != nil {
			return
		}
		switch f.Channel {
		case agentproto.ChannelStdin:
			if in == nil {
				continue
			}
			if len(f.Data) == 0 {
				if tty {
					in.Write([]byte{4}) // ^D: end of input on a terminal
				} else {
					in.Close()
					in = nil
				}
				continue
			}
			// A command that stopped reading makes this block: the host's
			// window fills and it stops sending (backpressure).
			in.Write(f.Data)
		case agentproto.ChannelResize:
			var ws agentproto.Winsize
			if !tty || json.Unmarshal(f.Data, &ws) != nil || ws.Rows == 0 || ws.Cols == 0 {
				continue
			}
			raw, err := p.stdout.SyscallConn()
			if err != nil {
				continue
			}
			raw.Control(func(fd uintptr) {
				unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols})
			})
		case agentproto.ChannelSignal:
			if sig, ok := signalsByName[strings.TrimPrefix(string(f.Data), "SIG")]; ok {
				signal(sig)
			}
		}
	}
}
