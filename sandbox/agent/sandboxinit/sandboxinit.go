package sandboxinit

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agent/reaper"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// InitOptions configures RunSandboxInit.
type InitOptions struct {
	Logger *slog.Logger
	// OutsideOnly accepts connections only from processes outside this
	// process's PID namespace (the agent): inside a sandbox, init is PID 1
	// and every sandbox process has a PID here, the agent none.
	OutsideOnly bool
	// WorkDir is the default working directory of commands; default
	// /workspace.
	WorkDir string
	// Root is the folder file operations resolve in; default / (inside a
	// sandbox, the sandbox's root). Tests point it at a folder.
	Root string
}

// RunSandboxInit is main for `stockade-agent sandbox-init`: PID 1 of a
// sandbox. It reaps every process of the sandbox and serves the agent on ln
// until ctx ends: spawning commands in place (already inside every
// namespace, cgroup, seccomp filter and uid of the sandbox), forwarding
// signals, and reporting exits. Signals sent to it from inside the sandbox
// are ignored.
func RunSandboxInit(ctx context.Context, ln *net.UnixListener, o InitOptions) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.WorkDir == "" {
		o.WorkDir = workspaceDir
	}
	if o.Root == "" {
		o.Root = "/"
	}
	// One P: init only forwards descriptors and signals, and on a guest
	// of several vCPUs each P costs a thread and its caches in every idle
	// sandbox. (Lower GC targets, a memory limit and returning the heap
	// after start-up measured no smaller at idle: README "Density".)
	runtime.GOMAXPROCS(1)
	// crun ran without address randomization (personality.go): commands
	// of the sandbox get it back.
	if err := restoreASLR(); err != nil {
		return fmt.Errorf("sandbox init: %w", err)
	}
	// Not dumpable: /proc/1 becomes root's, out of reach of the sandbox user.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox init: set not dumpable: %w", err)
	}
	// Catch every signal: an uncaught one would end init (and the sandbox).
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	defer signal.Stop(sigs)
	r := reaper.New(o.Logger)
	go r.Loop(ctx)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-sigs:
			}
		}
	}()

	si := &sandboxInit{o: o, log: o.Logger, r: r}
	context.AfterFunc(ctx, func() { ln.Close() })
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("sandbox init: accept: %w", err)
		}
		if o.OutsideOnly && !peerOutside(c) {
			si.log.Warn("refused a connection from inside the sandbox")
			c.Close()
			continue
		}
		go si.serve(ctx, c)
	}
}

// peerOutside reports whether the peer is outside our PID namespace: the
// kernel then reports its PID as 0.
func peerOutside(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return false
	}
	return cred.Pid == 0
}

type sandboxInit struct {
	o   InitOptions
	log *slog.Logger
	r   *reaper.Reaper
}

func (si *sandboxInit) serve(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for reused := false; ; reused = true {
		var req initRequest
		fds, err := recvInit(c, &req)
		closeFDs(fds)
		if err != nil {
			if !reused {
				si.log.Warn("bad request", "err", err)
			}
			return
		}
		if reused && req.Op == "" {
			continue // a control that crossed the previous command's exit
		}
		c.SetReadDeadline(time.Time{})
		if !si.serveOne(ctx, c, &req) {
			return
		}
	}
}

// serveOne serves one request on c and reports whether c takes another.
func (si *sandboxInit) serveOne(ctx context.Context, c *net.UnixConn, req *initRequest) bool {
	switch req.Op {
	case initOpHello:
		if err := sendInit(c, initReply{PID: os.Getpid()}); err != nil {
			return false
		}
		// Held open: the agent reads EOF when this process is gone.
		var ignored initRequest
		for {
			fds, err := recvInit(c, &ignored)
			closeFDs(fds)
			if err != nil {
				return false
			}
		}
	case initOpSpawn:
		if req.Spawn == nil {
			sendInit(c, initReply{Code: agentproto.CodeBadRequest, Error: "spawn without its body"})
			return false
		}
		return si.spawn(ctx, c, req.Spawn)
	case initOpFile:
		if req.File == nil {
			sendInit(c, initReply{Code: agentproto.CodeBadRequest, Error: "file without its body"})
			return false
		}
		si.file(c, req.File)
	case initOpFs:
		if req.Fs == nil {
			sendInit(c, initReply{Code: agentproto.CodeBadRequest, Error: "fs without its body"})
			return false
		}
		si.fs(c, req.Fs)
	default:
		sendInit(c, initReply{Code: agentproto.CodeUnknownOp, Error: fmt.Sprintf("op %q", req.Op)})
	}
	return false
}

// stdio holds a command's descriptors: the child's and the agent's ends.
type stdio struct {
	child []*os.File // stdin, stdout, stderr of the child
	agent []*os.File // sent to the agent
}

func (s *stdio) close() {
	for _, group := range [][]*os.File{s.child, s.agent} {
		for _, f := range group {
			if f != nil {
				f.Close()
			}
		}
	}
}

// spawn runs one command for the agent on c and reports whether c takes
// another request (spawnRequest.Reuse).
func (si *sandboxInit) spawn(ctx context.Context, c *net.UnixConn, req *spawnRequest) bool {
	fail := func(code string, err error) {
		sendInit(c, initReply{Code: code, Error: err.Error()})
	}
	if len(req.Argv) == 0 {
		fail(agentproto.CodeBadRequest, errors.New("empty argv"))
		return false
	}
	env := mergeEnv(os.Environ(), req.Env)
	if req.TTY && envValue(env, "TERM") == "" {
		env = append(env, "TERM=xterm-256color")
	}
	dir := req.Dir
	if dir == "" {
		dir = si.o.WorkDir
	} else if !filepath.IsAbs(dir) {
		dir = filepath.Join(si.o.WorkDir, dir)
	}
	path, err := lookPath(req.Argv[0], dir, envValue(env, "PATH"))
	if err != nil {
		fail(agentproto.CodeNotFound, err)
		return false
	}

	var std stdio
	defer std.close()
	sys := &syscall.SysProcAttr{Setsid: true}
	if req.TTY {
		master, slave, err := openPTY(req.Size)
		if err != nil {
			fail(agentproto.CodeInternal, err)
			return false
		}
		std.child = []*os.File{slave, slave, slave}
		std.agent = []*os.File{master}
		sys.Setctty, sys.Ctty = true, 0
	} else {
		var stdin *os.File
		if req.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				fail(agentproto.CodeExhausted, err)
				return false
			}
			stdin = r
			std.agent = append(std.agent, w)
		} else {
			if stdin, err = os.Open(os.DevNull); err != nil {
				fail(agentproto.CodeInternal, err)
				return false
			}
		}
		std.child = append(std.child, stdin)
		for range 2 {
			r, w, err := os.Pipe()
			if err != nil {
				fail(agentproto.CodeExhausted, err)
				return false
			}
			std.child = append(std.child, w)
			std.agent = append(std.agent, r)
		}
	}
	p, done, err := si.r.Start(path, req.Argv, &os.ProcAttr{Dir: dir, Env: env, Files: std.child, Sys: sys})
	if err != nil {
		code := agentproto.CodeInternal
		switch {
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ENOMEM):
			code = agentproto.CodeExhausted
		case errors.Is(err, fs.ErrNotExist):
			code = agentproto.CodeNotFound
		case errors.Is(err, fs.ErrPermission), errors.Is(err, unix.ENOEXEC):
			code = agentproto.CodeBadRequest
		}
		fail(code, fmt.Errorf("start %s: %w", req.Argv[0], err))
		return false
	}
	pid := p.Pid
	p.Release()
	for _, f := range std.child {
		f.Close()
	}
	std.child = nil
	fds := make([]int, len(std.agent))
	for i, f := range std.agent {
		fds[i] = int(f.Fd())
	}
	if err := sendInit(c, initReply{PID: pid}, fds...); err != nil {
		si.log.Warn("send spawn reply", "err", err)
		killGroup(pid, unix.SIGKILL)
		<-done
		return false
	}
	std.close() // the agent holds its own copies now

	// Signals from the agent until the command ends; the agent going away
	// first kills the command's process group.
	gone := make(chan struct{})
	var readErr error
	go func() {
		defer close(gone)
		for {
			var ctl initControl
			fds, err := recvInit(c, &ctl)
			closeFDs(fds)
			if err != nil {
				readErr = err
				return
			}
			if ctl.Signal > 0 && ctl.Signal < 65 {
				killGroup(pid, unix.Signal(ctl.Signal))
			}
		}
	}()
	var ws unix.WaitStatus
	select {
	case ws = <-done:
	case <-gone:
		killGroup(pid, unix.SIGKILL)
		<-done
		return false
	case <-ctx.Done():
		killGroup(pid, unix.SIGKILL)
		ws = <-done
	}
	reuse := false
	if req.Reuse && ctx.Err() == nil {
		// Stop reading controls before the exit goes: once the agent has
		// it, its next message on c is a request.
		c.SetReadDeadline(time.Unix(1, 0))
		<-gone
		c.SetReadDeadline(time.Time{})
		var ne net.Error
		reuse = errors.As(readErr, &ne) && ne.Timeout()
	}
	ex := initExit{Code: ws.ExitStatus(), Reuse: reuse}
	if ws.Signaled() {
		ex.Signal = int(ws.Signal())
		ex.Code = 128 + ex.Signal
	}
	return sendInit(c, ex) == nil && reuse
}

// killGroup signals the process group of pid (every command leads its
// own). SIGKILL is repeated until the group is gone, so a process forking
// while the signal goes round cannot leave a survivor behind.
func killGroup(pid int, sig unix.Signal) {
	err := unix.Kill(-pid, sig)
	if errors.Is(err, unix.ESRCH) {
		// The leader's group is gone (or it left it): the leader alone.
		unix.Kill(pid, sig)
		return
	}
	if sig != unix.SIGKILL {
		return
	}
	for i := 0; i < 200; i++ {
		time.Sleep(time.Millisecond)
		if err := unix.Kill(-pid, sig); errors.Is(err, unix.ESRCH) {
			return
		}
	}
}

// openPTY opens a new terminal on the devpts of this mount namespace (the
// sandbox's own) and returns its master and slave.
func openPTY(size agentproto.Winsize) (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open terminal: %w", err)
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("unlock terminal: %w", err)
	}
	// TIOCGPTPEER opens the slave through the master: no path to race on.
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER,
		uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		m.Close()
		return nil, nil, fmt.Errorf("open terminal slave: %w", errno)
	}
	s := os.NewFile(sfd, "pts")
	if size.Rows == 0 || size.Cols == 0 {
		size = agentproto.Winsize{Rows: 24, Cols: 80}
	}
	if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols}); err != nil {
		m.Close()
		s.Close()
		return nil, nil, fmt.Errorf("size terminal: %w", err)
	}
	return m, s, nil
}

// lookPath finds file like a shell would, in the sandbox's own file system.
func lookPath(file, dir, pathEnv string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%s: %w", file, err)
		}
		return p, nil
	}
	if pathEnv == "" {
		pathEnv = defaultPath
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, file)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: executable file not found in $PATH", file)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fs.ErrPermission
	}
	return nil
}

// defaultPath is the PATH of commands that bring none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// mergeEnv returns base with extra applied: a later KEY= replaces an
// earlier one.
func mergeEnv(base, extra []string) []string {
	out := make([]string, 0, len(base)+len(extra))
	idx := map[string]int{}
	for _, kv := range append(append([]string{}, base...), extra...) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}
