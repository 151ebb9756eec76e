// Package agent is the guest side of Stockade: stockade-agent runs as PID 1
// in every VM (Init) and serves the agentproto protocol (Server). It is built
// static without cgo and imports only the wire types of this module.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Config configures a Server.
type Config struct {
	// Version is the agent's build version, sent in hello.
	Version string
	Logger  *slog.Logger
	// PowerOff is called once, after a shutdown request was acknowledged and
	// the host closed the stream (or ShutdownGrace passed). Required.
	PowerOff func() error
	// PID1 and Boot (a snapshot of the boot timings; nil means none) are
	// reported in hello.
	PID1 bool
	Boot func() agentproto.Boot
	// OnHello, when set, runs after each hello was answered (init starts
	// its background boot work after the first).
	OnHello func()
	// ProcDir and CgroupDir are where proc and the cgroup v2 hierarchy are
	// mounted: /proc and /sys/fs/cgroup by default.
	ProcDir   string
	CgroupDir string
	// CrunPath is the crun binary asked for its version; default /usr/bin/crun.
	CrunPath string
	// Run runs a program to completion and returns its stdout. PID 1 must
	// pass its reaper's Run; nil means os/exec.
	Run func(ctx context.Context, path string, args ...string) ([]byte, error)
	// RequestTimeout bounds reading a request off a new stream; default 30 s.
	RequestTimeout time.Duration
	// ShutdownGrace is how long the agent waits for the host to close the
	// shutdown stream before powering off; default 1 s.
	ShutdownGrace time.Duration
	// Sandboxes serves the sandbox, exec, file and baseline ops; nil
	// answers them not_implemented.
	Sandboxes *Manager
	// Kernel is the RNG and clock vm.identity sets; nil means the real
	// ones for PID 1 and no vm.identity otherwise (identity.go).
	Kernel *KernelControl
}

// Server serves the agent protocol, one session per Serve call.
type Server struct {
	cfg      Config
	log      *slog.Logger
	sessions atomic.Int64

	crunMu  sync.Mutex
	crunVer string

	powerOnce sync.Once
	ident     identityState
}

// capabilities lists the ops this agent implements.
func (s *Server) capabilities() []string {
	ops := []agentproto.Op{agentproto.OpHello, agentproto.OpPing, agentproto.OpStats, agentproto.OpShutdown}
	if s.cfg.Kernel != nil {
		ops = append(ops, agentproto.OpVMIdentity)
	}
	if s.cfg.Sandboxes != nil {
		ops = append(ops, sandboxOps()...)
		ops = append(ops, fsOps()...)
		ops = append(ops, pauseOps()...)
		ops = append(ops, upperOps()...)
	}
	return agentproto.Capabilities(ops...)
}

// sandboxOps are the ops a Manager serves.
func sandboxOps() []agentproto.Op {
	return []agentproto.Op{agentproto.OpSandboxCreate, agentproto.OpSandboxDestroy, agentproto.OpSandboxList,
		agentproto.OpSandboxStats, agentproto.OpExec, agentproto.OpFileRead, agentproto.OpFileWrite, agentproto.OpBaseline,
		agentproto.OpExecAttach, agentproto.OpExecList, agentproto.OpSandboxLifetime, agentproto.OpPortDial,
		agentproto.OpTemplateRelease, agentproto.OpVolumeMount, agentproto.OpVolumeUnmount, agentproto.OpSandboxPrestart}
}

// NewServer checks cfg and fills its defaults.
func NewServer(cfg Config) (*Server, error) {
	if cfg.PowerOff == nil {
		return nil, errors.New("new agent server: PowerOff is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.ProcDir == "" {
		cfg.ProcDir = "/proc"
	}
	if cfg.CgroupDir == "" {
		cfg.CgroupDir = "/sys/fs/cgroup"
	}
	if cfg.CrunPath == "" {
		cfg.CrunPath = "/usr/bin/crun"
	}
	if cfg.Boot == nil {
		cfg.Boot = func() agentproto.Boot { return agentproto.Boot{} }
	}
	if cfg.Run == nil {
		cfg.Run = runExec
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = time.Second
	}
	if cfg.Kernel == nil && cfg.PID1 {
		cfg.Kernel = RealKernel()
	}
	return &Server{cfg: cfg, log: cfg.Logger}, nil
}

// Serve serves the host sessions that arrive on conn until conn ends (EOF
// or an error) or ctx ends, then closes conn. Each LinkOpen from a host ends
// the current session and starts a new one.
func (s *Server) Serve(ctx context.Context, conn io.ReadWriteCloser) error {
	return s.ServeLink(ctx, conn, 0)
}

// ServeLink is Serve; with poll > 0 an EOF only means that no host is
// connected right now (a virtio-serial port): look again every poll.
//
// On a port an EOF never ends the session. The guest learns that the host
// side connected or left from control messages that travel apart from the
// data (another virtqueue, handled later in a kernel work item), so an EOF
// can be read after the first frames of the next host: ending the session
// then would drop that host's hello and everything after it. A session ends
// when its host says so (LinkClose), when another host opens one
// (LinkOpen), or when its own keepalive goes unanswered.
func (s *Server) ServeLink(ctx context.Context, conn io.ReadWriteCloser, poll time.Duration) error {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	lr := agentproto.NewLinkReader(conn)
	var wmu sync.Mutex
	var wg sync.WaitGroup
	var cur *linkSession
	defer func() {
		if cur != nil {
			cur.end()
		}
		wg.Wait()
	}()
	noHost := false
	for {
		f, err := lr.Next()
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			if !errors.Is(err, io.EOF) {
				return fmt.Errorf("read channel: %w", err)
			}
			if poll <= 0 {
				return nil
			}
			if !noHost && cur != nil {
				s.log.Info("no host on the port; the session stays open", "session", cur.n)
			}
			noHost = true
			if !sleepCtx(ctx, poll) {
				return ctx.Err()
			}
			continue
		}
		noHost = false
		switch {
		case f.Kind == agentproto.LinkOpen:
			if cur != nil && cur.id == f.Session {
				continue
			}
			if cur != nil {
				s.log.Info("host replaced", "session", cur.n)
				cur.end()
			}
			cur = s.startSession(ctx, &wg, agentproto.NewLinkWriter(conn, &wmu, f.Session), f.Session)
		case cur == nil || f.Session != cur.id:
			// An earlier host's leftovers.
		case f.Kind == agentproto.LinkClose:
			s.log.Info("host closed the session", "session", cur.n)
			cur.end()
			cur = nil
		case f.Kind == agentproto.LinkData:
			cur.deliver(f.Data)
		}
	}
}

// linkSession is one host session: yamux runs on the pipe the demultiplexer
// fills and writes through the session's LinkWriter.
type linkSession struct {
	id uint64
	n  int
	pw *io.PipeWriter
}

func (l *linkSession) deliver(b []byte) {
	// Fails only once the session's yamux has gone: then the bytes are moot.
	l.pw.Write(b)
}

func (l *linkSession) end() { l.pw.Close() }

type sessionConn struct {
	*io.PipeReader
	w io.Writer // each yamux frame in one link frame: agentproto.JoinFrames
}

func (c sessionConn) Write(p []byte) (int, error) { return c.w.Write(p) }

func (s *Server) startSession(ctx context.Context, wg *sync.WaitGroup, w *agentproto.LinkWriter, id uint64) *linkSession {
	pr, pw := io.Pipe()
	ls := &linkSession{id: id, n: int(s.sessions.Add(1)), pw: pw}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.serveSession(ctx, ls.n, sessionConn{PipeReader: pr, w: agentproto.JoinFrames(w)}); err != nil && ctx.Err() == nil {
			s.log.Warn("session", "session", ls.n, "err", err)
		}
	}()
	return ls
}

// session is the state of one yamux session.
type session struct {
	n       int
	helloed atomic.Bool
	// done is closed when the session ended: an exec stream cut then is
	// detached, not killed.
	done <-chan struct{}
}

// serveSession runs one yamux session until it ends.
func (s *Server) serveSession(ctx context.Context, n int, conn io.ReadWriteCloser) error {
	ycfg := yamux.DefaultConfig()
	ycfg.LogOutput = io.Discard
	ycfg.AcceptBacklog = 64
	ycfg.MaxStreamWindowSize = agentproto.StreamWindow
	sess, err := yamux.Server(conn, ycfg)
	if err != nil {
		conn.Close()
		return fmt.Errorf("agent session: %w", err)
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()

	ss := &session{n: n, done: sess.CloseChan()}
	s.log.Info("session started", "session", ss.n)
	if m := s.cfg.Sandboxes; m != nil {
		// Sandboxes' egress connections open streams on the newest session.
		defer m.SetHostSession(func() (net.Conn, error) { return sess.OpenStream() })()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			s.log.Info("session ended", "session", ss.n, "reason", err)
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.handle(ctx, ss, st)
		}()
	}
}

func (s *Server) handle(ctx context.Context, ss *session, st net.Conn) {
	defer st.Close()
	st.SetReadDeadline(time.Now().Add(s.cfg.RequestTimeout))
	var req agentproto.Request
	if err := agentproto.ReadMessage(st, &req); err != nil {
		s.log.Warn("bad request", "err", err)
		s.reply(st, agentproto.Response{Error: agentproto.ErrorFor(fmt.Errorf("read request: %w", err))})
		return
	}
	st.SetReadDeadline(time.Time{})

	// hello negotiates the version itself; every other request must carry one
	// this agent speaks, and must come after hello.
	if req.Op == agentproto.OpHello {
		s.reply(st, s.hello(ss, req))
		if s.cfg.OnHello != nil {
			s.cfg.OnHello()
		}
		return
	}
	if req.V < agentproto.MinVersion || req.V > agentproto.Version {
		err := fmt.Errorf("request of protocol %d, agent speaks %d-%d: %w",
			req.V, agentproto.MinVersion, agentproto.Version, agentproto.ErrUnsupportedVersion)
		s.reply(st, agentproto.Response{Error: agentproto.ErrorFor(err)})
		return
	}
	if !ss.helloed.Load() {
		err := fmt.Errorf("%s before hello: %w", req.Op, agentproto.ErrBadRequest)
		s.reply(st, agentproto.Response{Error: agentproto.ErrorFor(err)})
		return
	}

	if isFsOp(req.Op) && s.cfg.Sandboxes != nil {
		s.cfg.Sandboxes.serveFs(st, req)
		return
	}
	switch req.Op {
	case agentproto.OpPing:
		s.reply(st, agentproto.Response{})
	case agentproto.OpStats:
		stats, err := s.stats(ctx)
		if err != nil {
			s.reply(st, agentproto.Response{Error: agentproto.ErrorFor(err)})
			return
		}
		s.reply(st, agentproto.Response{Stats: &stats})
	case agentproto.OpShutdown:
		s.shutdown(st)
	case agentproto.OpVMIdentity:
		s.serveIdentity(st, req)
	case agentproto.OpSandboxCreate, agentproto.OpSandboxDestroy, agentproto.OpSandboxList, agentproto.OpSandboxStats,
		agentproto.OpExec, agentproto.OpFileRead, agentproto.OpFileWrite, agentproto.OpBaseline,
		agentproto.OpExecAttach, agentproto.OpExecList, agentproto.OpSandboxLifetime, agentproto.OpPortDial,
		agentproto.OpTemplateRelease, agentproto.OpSandboxPrestart:
		if s.cfg.Sandboxes == nil {
			err := fmt.Errorf("op %s: %w", req.Op, agentproto.ErrNotImplemented)
			s.reply(st, agentproto.Response{Error: agentproto.ErrorFor(err)})
			return
		}
		s.handleSandbox(ctx, ss, st, req)
	case agentproto.OpSandboxPause, agentproto.OpSandboxResume:
		s.servePause(ctx, st, req)
	case agentproto.OpSandboxUpper:
		if s.cfg.Sandboxes == nil {
			s.reply(st, agentproto.Response{Error: agentproto.ErrorFor(fmt.Errorf("op %s: %w", req.Op, agentproto.ErrNotImplemented))})
			return
		}
		s.cfg.Sandboxes.serveUpper(st, req)
	case agentproto.OpVolumeMount, agentproto.OpVolumeUnmount:
		s.serveVolume(ctx, st, req)
	case agentproto.OpEgress:
		err := fmt.Errorf("op %s: %w", req.Op, agentproto.ErrNotImplemented)
		s.reply(st, agentproto.Response{Error: agentproto.ErrorFor(err)})
	default:
		err := fmt.Errorf("op %q: %w", req.Op, agentproto.ErrUnknownOp)
		s.reply(st, agentproto.Response{Error: agentproto.ErrorFor(err)})
	}
}

// handleSandbox serves the ops of the sandbox Manager.
func (s *Server) handleSandbox(ctx context.Context, ss *session, st net.Conn, req agentproto.Request) {
	m := s.cfg.Sandboxes
	fail := func(err error) { s.reply(st, agentproto.Response{Error: agentproto.ErrorFor(err)}) }
	switch req.Op {
	case agentproto.OpSandboxCreate:
		if req.Sandbox == nil {
			fail(fmt.Errorf("sandbox.create without a spec: %w", agentproto.ErrBadRequest))
			return
		}
		info, err := m.Create(ctx, *req.Sandbox)
		if err != nil {
			s.log.Warn("sandbox create", "sandbox", req.Sandbox.ID, "err", err)
			fail(err)
			return
		}
		s.reply(st, agentproto.Response{Sandbox: &info})
	case agentproto.OpSandboxDestroy:
		info, err := m.Destroy(ctx, req.SandboxID)
		if err != nil {
			fail(err)
			return
		}
		s.reply(st, agentproto.Response{Sandbox: &info})
	case agentproto.OpSandboxPrestart:
		if req.Prestart == nil {
			fail(fmt.Errorf("sandbox.prestart without its body: %w", agentproto.ErrBadRequest))
			return
		}
		pool, err := m.ConfigurePrestart(*req.Prestart)
		if err != nil {
			fail(err)
			return
		}
		s.reply(st, agentproto.Response{Prestart: &pool})
	case agentproto.OpTemplateRelease:
		if err := m.ReleaseTemplate(req.Template); err != nil {
			fail(err)
			return
		}
		s.reply(st, agentproto.Response{})
	case agentproto.OpSandboxList:
		list := m.List()
		s.reply(st, agentproto.Response{Sandboxes: &list})
	case agentproto.OpSandboxStats:
		stats, err := m.Stats(req.SandboxID)
		if err != nil {
			fail(err)
			return
		}
		s.reply(st, agentproto.Response{SandboxStats: &stats})
	case agentproto.OpBaseline:
		if req.Baseline == nil {
			fail(fmt.Errorf("baseline without its body: %w", agentproto.ErrBadRequest))
			return
		}
		res, err := m.Baseline(ctx, *req.Baseline)
		if err != nil {
			fail(err)
			return
		}
		s.reply(st, agentproto.Response{Baseline: &res})
	case agentproto.OpExec:
		m.serveExec(ctx, st, req.Exec, ss.done)
	case agentproto.OpExecAttach:
		m.serveExecAttach(ctx, st, req.ExecAttach, ss.done)
	case agentproto.OpExecList:
		list := m.execs.list()
		s.reply(st, agentproto.Response{Execs: &list})
	case agentproto.OpSandboxLifetime:
		if err := m.SetLifetime(req.SandboxID, req.Lifetime); err != nil {
			fail(err)
			return
		}
		s.reply(st, agentproto.Response{})
	case agentproto.OpFileRead:
		m.serveFileRead(st, req.FileRead)
	case agentproto.OpFileWrite:
		m.serveFileWrite(st, req.FileWrite)
	case agentproto.OpPortDial:
		m.servePortDial(st, req.PortDial)
	}
}

func (s *Server) reply(st net.Conn, resp agentproto.Response) {
	if resp.V == 0 {
		resp.V = agentproto.Version
	}
	if err := agentproto.WriteMessage(st, resp); err != nil {
		s.log.Warn("write response", "err", err)
	}
}

func (s *Server) hello(ss *session, req agentproto.Request) agentproto.Response {
	h := req.Hello
	if h == nil {
		err := fmt.Errorf("hello without its body: %w", agentproto.ErrBadRequest)
		return agentproto.Response{Error: agentproto.ErrorFor(err)}
	}
	v := min(h.MaxVersion, agentproto.Version)
	if v < h.MinVersion || v < agentproto.MinVersion {
		err := fmt.Errorf("host speaks %d-%d, agent %d-%d: %w",
			h.MinVersion, h.MaxVersion, agentproto.MinVersion, agentproto.Version, agentproto.ErrUnsupportedVersion)
		return agentproto.Response{Error: agentproto.ErrorFor(err)}
	}
	ss.helloed.Store(true)
	s.log.Info("hello", "session", ss.n, "client", h.Client, "protocol", v)
	if m := s.cfg.Sandboxes; m != nil {
		m.execs.setGrace(time.Duration(min(max(h.ExecGraceSeconds, 0), maxExecGrace)) * time.Second)
	}
	return agentproto.Response{V: v, Hello: &agentproto.Hello{
		Protocol:      v,
		Agent:         s.cfg.Version,
		Kernel:        KernelRelease(),
		Capabilities:  s.capabilities(),
		PID1:          s.cfg.PID1,
		Boot:          s.cfg.Boot(),
		Uptime:        Uptime(),
		SessionNumber: ss.n,
	}}
}

// shutdown acknowledges, waits for the host to close the stream so the
// acknowledgement has left the guest, then powers off.
func (s *Server) shutdown(st net.Conn) {
	s.log.Info("shutdown requested")
	s.reply(st, agentproto.Response{})
	st.SetReadDeadline(time.Now().Add(s.cfg.ShutdownGrace))
	io.Copy(io.Discard, io.LimitReader(st, agentproto.MaxMessageSize))
	s.powerOnce.Do(func() {
		if err := s.cfg.PowerOff(); err != nil {
			s.log.Error("power off", "err", err)
		}
	})
}

// crunVersion runs crun once; later calls reuse its answer (each crun start
// costs hundreds of ms under TCG).
func (s *Server) crunVersion(ctx context.Context) string {
	s.crunMu.Lock()
	defer s.crunMu.Unlock()
	if s.crunVer != "" {
		return s.crunVer
	}
	out, err := s.cfg.Run(ctx, s.cfg.CrunPath, "--version")
	if err != nil {
		s.log.Warn("crun --version", "err", err)
		return ""
	}
	s.crunVer = firstLine(string(out))
	return s.crunVer
}

func runExec(ctx context.Context, path string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, path, args...).Output()
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", path, err)
	}
	return out, nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
