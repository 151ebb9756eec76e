package sandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// The process API: commands started detached from the request that started
// them. A process lives until it exits, is signalled to death, or its
// sandbox ends; never because a client went away.
//
// The agent holds each one as a kept exec named "proc-<id>"
// (agentproto.ExecRequest.Keep: no grace, a closed stream does not kill
// it). This server keeps the exec's stream open in its registry, fans the
// output out from a bounded ring (ProcessOutputBytes per process) to any
// number of readers from any offset, and records the state in the
// processes table. After a restart (Start, under the installation lease)
// every process recorded running is re-attached from offset 0: the ring
// gets what the agent still holds (its latest 1 MiB), so the output so far
// is still readable, and offsets go on where they were.
//
// A process is named by its pid: its process id inside the sandbox's pid
// namespace (what `ps` in the sandbox shows, and what E2B calls pid). A pid
// comes back only after its process ended; a lookup takes the newest.

// Process states.
const (
	ProcessRunning = "running"
	ProcessExited  = "exited"
	// ProcessLost: the agent no longer had it (its VM went), or its sandbox
	// ended while no server watched.
	ProcessLost = "lost"
)

// Default bounds of the process API (Config.MaxProcesses,
// Config.ProcessOutputBytes). A sandbox buffers at most
// 2 x MaxProcesses x ProcessOutputBytes here: its running processes and as
// many ended ones kept for readers.
const (
	DefaultMaxProcesses       = 16
	DefaultProcessOutputBytes = 256 << 10
)

// processExecPrefix prefixes the agent's exec id of a process.
const processExecPrefix = "proc-"

// Process is one process as stored, with its live output offsets.
type Process struct {
	ID            string     `gorm:"column:id;primaryKey"`
	TenantID      string     `gorm:"column:tenant_id"`
	SandboxID     string     `gorm:"column:sandbox_id"`
	PID           uint32     `gorm:"column:pid"`
	ArgvJSON      string     `gorm:"column:argv"`
	Cwd           string     `gorm:"column:cwd"`
	Tag           string     `gorm:"column:tag"`
	TTY           bool       `gorm:"column:tty"`
	State         string     `gorm:"column:state"`
	ExitCode      *int       `gorm:"column:exit_code"`
	Signal        string     `gorm:"column:signal"`
	Reason        string     `gorm:"column:reason"`
	StartedBy     string     `gorm:"column:started_by"`
	StartedByName string     `gorm:"column:started_by_name"`
	StartedAt     time.Time  `gorm:"column:started_at"`
	EndedAt       *time.Time `gorm:"column:ended_at"`
	// OutputBytes is how much it printed (stdout and stderr together):
	// the offset its next byte gets. Live while this server holds it.
	OutputBytes int64 `gorm:"column:output_bytes"`
	// OutputStart is the oldest offset still readable (0 until the ring
	// dropped bytes); Stdin says its stdin is open. Live only.
	OutputStart int64 `gorm:"-"`
	Stdin       bool  `gorm:"-"`
}

// TableName is the GORM table of Process.
func (Process) TableName() string { return "processes" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (p *Process) AfterFind(*gorm.DB) error {
	p.StartedAt = p.StartedAt.UTC()
	utcPtr(&p.EndedAt)
	return nil
}

// Argv is its command line.
func (p Process) Argv() []string {
	var out []string
	_ = json.Unmarshal([]byte(p.ArgvJSON), &out)
	return out
}

// ProcessRequest starts a process (StartProcess).
type ProcessRequest struct {
	Cmd []string
	Env map[string]string
	// Cwd is the working directory; empty means /workspace.
	Cwd string
	// Stdin keeps its stdin open for WriteStdin (always open on a TTY).
	Stdin bool
	// TTY runs it on a terminal of Cols x Rows (0: 80 x 24).
	TTY        bool
	Cols, Rows uint16
	// TimeoutSeconds kills it after that long; 0 means none of its own (it
	// lives as long as its sandbox).
	TimeoutSeconds int
	// Tag is a free label (at most 128 bytes) shown in lists.
	Tag string
}

func (r *ProcessRequest) check(cfg Config) error {
	x := ExecRequest{Cmd: r.Cmd, Env: r.Env, Cwd: r.Cwd, TimeoutSeconds: max(r.TimeoutSeconds, 1)}
	if r.TimeoutSeconds < 0 {
		x.TimeoutSeconds = -1
	}
	if err := x.check(cfg); err != nil {
		return err
	}
	if len(r.Tag) > 128 || strings.ContainsRune(r.Tag, 0) {
		return errdefs.Invalid("tag", "size", "at most 128 bytes without NUL")
	}
	if err := checkSize(r.Cols, r.Rows); err != nil && r.TTY && (r.Cols != 0 || r.Rows != 0) {
		return err
	}
	if !r.TTY && (r.Cols != 0 || r.Rows != 0) {
		return errdefs.Invalid("cols", "tty", "a size needs tty: true")
	}
	return nil
}

// checkSize bounds a terminal size.
func checkSize(cols, rows uint16) error {
	switch {
	case cols < 1 || cols > 1000:
		return errdefs.Invalid("cols", "range", "must be between 1 and 1000")
	case rows < 1 || rows > 1000:
		return errdefs.Invalid("rows", "range", "must be between 1 and 1000")
	}
	return nil
}

// ProcessChunk is a piece of a process's output.
type ProcessChunk struct {
	// Offset is where Data starts among all its output (stdout and stderr
	// bytes together, since it started).
	Offset int64
	// Stream is "stdout" or "stderr" ("stdout" only on a TTY).
	Stream string
	Data   []byte
}

// processSignals are the signals a client may send, by name without SIG.
var processSignals = map[string]bool{
	"HUP": true, "INT": true, "QUIT": true, "KILL": true, "USR1": true, "USR2": true, "TERM": true,
	"CONT": true, "STOP": true, "TSTP": true, "WINCH": true, "ALRM": true, "PIPE": true,
}

// SignalName checks a signal given as "SIGTERM" or "TERM" (any case) and
// returns it without the prefix, or a *errdefs.FieldError naming "signal".
func SignalName(s string) (string, error) {
	n := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "SIG")
	if !processSignals[n] {
		return "", errdefs.Invalid("signal", "unknown", fmt.Sprintf("unknown signal %q: one of SIGHUP, SIGINT, SIGQUIT, SIGKILL, SIGUSR1, SIGUSR2, SIGTERM, SIGCONT, SIGSTOP, SIGTSTP, SIGWINCH, SIGALRM, SIGPIPE", truncate(s, 40)))
	}
	return n, nil
}

// liveProcess is a process this server streams.
type liveProcess struct {
	e *agentproto.Exec
	// done is closed once its end is recorded in rec.
	done chan struct{}

	mu      sync.Mutex
	rec     Process
	changed chan struct{} // closed and replaced at each change
	base    int64         // offset of the first byte this server received
	chunks  []ProcessChunk
	recv    int64 // bytes received: the next offset is base+recv
	size    int
	limit   int
	stdin   bool
}

func newLiveProcess(rec Process, limit int, stdin bool) *liveProcess {
	return &liveProcess{rec: rec, done: make(chan struct{}), changed: make(chan struct{}), limit: limit, stdin: stdin}
}

// processWriter feeds one output stream of a process into its ring: it never
// blocks the exec's stream.
type processWriter struct {
	p      *liveProcess
	stream string
}

func (w processWriter) Write(b []byte) (int, error) {
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	data := append([]byte(nil), b...)
	if len(data) > p.limit {
		// Only the tail fits.
		p.recv += int64(len(data) - p.limit)
		data = data[len(data)-p.limit:]
	}
	p.chunks = append(p.chunks, ProcessChunk{Offset: p.recv, Stream: w.stream, Data: data})
	p.recv += int64(len(data))
	p.size += len(data)
	for p.size > p.limit {
		p.size -= len(p.chunks[0].Data)
		p.chunks[0] = ProcessChunk{}
		p.chunks = p.chunks[1:]
	}
	p.signal()
	return len(b), nil
}

// signal wakes readers; p.mu is held.
func (p *liveProcess) signal() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// snapshot is the process with its live offsets.
func (p *liveProcess) snapshot() Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snapshotLocked()
}

func (p *liveProcess) snapshotLocked() Process {
	rec := p.rec
	rec.OutputBytes = p.base + p.recv
	rec.OutputStart = p.base + p.recv
	if len(p.chunks) > 0 {
		rec.OutputStart = p.base + p.chunks[0].Offset
	}
	rec.Stdin = p.stdin && rec.State == ProcessRunning
	return rec
}

// from returns the output from offset on (clamped to what is kept), the
// channel that closes at the next change, and whether the process ended.
func (p *liveProcess) from(offset int64) ([]ProcessChunk, <-chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []ProcessChunk
	for _, c := range p.chunks {
		c.Offset += p.base
		end := c.Offset + int64(len(c.Data))
		if end <= offset {
			continue
		}
		if c.Offset < offset {
			c.Data = c.Data[offset-c.Offset:]
			c.Offset = offset
		}
		out = append(out, c)
	}
	return out, p.changed, p.rec.State != ProcessRunning
}

// processes is the registry of the processes this server streams.
type processes struct {
	mu   sync.Mutex
	live map[string]*liveProcess // by process id
	// starting counts the starts under way per sandbox, against the limit.
	starting map[string]int
	// ended lists, per sandbox, the ids of ended processes kept for
	// readers, oldest first.
	ended map[string][]string
}

func newProcesses() *processes {
	return &processes{live: map[string]*liveProcess{}, starting: map[string]int{}, ended: map[string][]string{}}
}

// unstart ends a start's count; r.mu is held.
func (r *processes) unstart(sandboxID string) {
	if r.starting[sandboxID]--; r.starting[sandboxID] <= 0 {
		delete(r.starting, sandboxID)
	}
}

func (r *processes) get(id string) *liveProcess {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live[id]
}

// running counts the live running processes of a sandbox and the starts
// under way.
func (r *processes) running(sandboxID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.starting[sandboxID]
	for _, p := range r.live {
		p.mu.Lock()
		if p.rec.SandboxID == sandboxID && p.rec.State == ProcessRunning {
			n++
		}
		p.mu.Unlock()
	}
	return n
}

// retire keeps an ended process for readers, forgetting the oldest ended
// ones of its sandbox past keep.
func (r *processes) retire(p *liveProcess, keep int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb := p.rec.SandboxID
	r.ended[sb] = append(r.ended[sb], p.rec.ID)
	for len(r.ended[sb]) > keep {
		delete(r.live, r.ended[sb][0])
		r.ended[sb] = r.ended[sb][1:]
	}
}

// forget drops every process of a sandbox that ended.
func (r *processes) forget(sandboxID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, p := range r.live {
		if p.rec.SandboxID == sandboxID {
			delete(r.live, id)
		}
	}
	delete(r.ended, sandboxID)
}

// StartProcess starts req's command in the tenant's running sandbox,
// detached: it returns once the command runs, with its pid. It is recorded
// and audited process.started. More than MaxProcesses running in the
// sandbox is a *errdefs.QuotaError ("max_processes"); a bad request a
// *errdefs.FieldError; nothing is started then.
func (s *Service) StartProcess(ctx context.Context, actor audit.Actor, tenantID, sandboxID string, req ProcessRequest) (Process, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, sandboxID)
	if err != nil {
		return Process{}, err
	}
	if err := req.check(s.cfg); err != nil {
		return Process{}, err
	}
	r := s.procs
	r.mu.Lock()
	r.starting[sb.ID]++
	r.mu.Unlock()
	started := false // counted as live from then on; r.mu guards it
	defer func() {
		r.mu.Lock()
		if !started {
			r.unstart(sb.ID)
		}
		r.mu.Unlock()
	}()
	stored, err := s.store.runningProcesses(ctx, sb.ID)
	if err != nil {
		return Process{}, err
	}
	// Recorded running but not (yet) streamed here count too.
	if n := max(r.running(sb.ID), int(stored)+1); n > s.cfg.MaxProcesses {
		return Process{}, &errdefs.QuotaError{Quota: "max_processes", Limit: s.cfg.MaxProcesses, Want: n,
			Detail: fmt.Sprintf("sandbox %s runs %d processes already; at most %d run at once", sb.ID, n-1, s.cfg.MaxProcesses)}
	}
	id, err := newID()
	if err != nil {
		return Process{}, err
	}
	argv, _ := json.Marshal(req.Cmd)
	rec := Process{ID: id, TenantID: tenantID, SandboxID: sb.ID, ArgvJSON: string(argv), Cwd: req.Cwd, Tag: req.Tag, TTY: req.TTY,
		State: ProcessRunning, StartedBy: actor.ID, StartedByName: actorName(actor), StartedAt: s.store.now()}
	p := newLiveProcess(rec, s.cfg.ProcessOutputBytes, req.Stdin || req.TTY)
	size := agentproto.Winsize{Cols: req.Cols, Rows: req.Rows}
	if req.TTY && size.Cols == 0 {
		size = agentproto.Winsize{Cols: 80, Rows: 24}
	}
	// The process outlives the request: its own context, cut short only
	// while the caller still waits for the start.
	pctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	e, err := c.StartResumableExec(pctx, agentproto.ExecRequest{
		ID: processExecPrefix + id, Keep: true, Sandbox: sb.ID, Argv: req.Cmd, Env: envList(req.Env), Dir: cmp.Or(req.Cwd, sb.TemplateWorkdir),
		Stdin: req.Stdin || req.TTY, TTY: req.TTY, Size: size, TimeoutSeconds: req.TimeoutSeconds,
	}, processWriter{p, "stdout"}, processWriter{p, "stderr"}, s.nextAgent(sb, c))
	if !stop() || err != nil {
		if err == nil {
			e.Close()
			err = ctx.Err()
		}
		cancel()
		if errors.Is(err, agentproto.ErrNotFound) {
			return Process{}, errdefs.Invalid("cmd", "not_found",
				fmt.Sprintf("no such program or working directory in the sandbox: %s", remoteMessage(err)))
		}
		return Process{}, agentErr("start process in sandbox "+sb.ID, err)
	}
	p.mu.Lock()
	p.e = e
	p.rec.PID = uint32(max(e.PID(), 0))
	rec = p.rec
	p.mu.Unlock()
	// Live before its row exists: the adopt loop never takes a process
	// being started here for one a stopped server left.
	r.mu.Lock()
	r.live[id] = p
	r.unstart(sb.ID)
	started = true
	r.mu.Unlock()
	if err := s.store.insertProcess(context.WithoutCancel(ctx), actor, rec, req); err != nil {
		r.mu.Lock()
		delete(r.live, id)
		r.mu.Unlock()
		e.Close() // kills it: nothing recorded, nothing left running
		cancel()
		return Process{}, err
	}
	go s.followProcess(p, cancel)
	s.log.Info("process started", "sandbox", sb.ID, "process", id, "pid", rec.PID, "actor", actorName(actor))
	if err := s.store.touch(context.WithoutCancel(ctx), sb.ID); err != nil {
		s.log.Warn("touch sandbox", "sandbox", sb.ID, "err", err)
	}
	return p.snapshot(), nil
}

// followProcess waits for p's exec to end and records how. An exec whose
// stream was lost for good (no agent session came back within the exec
// grace, or this server is closing) is left running: the agent keeps it,
// and the adopt loop (or the next server) re-attaches it.
func (s *Service) followProcess(p *liveProcess, cancel context.CancelFunc) {
	defer cancel()
	st, err := p.e.Wait()
	r := s.procs
	if err != nil {
		p.mu.Lock()
		id, sb := p.rec.ID, p.rec.SandboxID
		p.mu.Unlock()
		s.log.Info("process stream lost: the agent keeps it for a re-attach", "sandbox", sb, "process", id, "err", err)
		r.mu.Lock()
		if r.live[id] == p {
			delete(r.live, id)
		}
		r.mu.Unlock()
		close(p.done)
		return
	}
	now := s.store.now()
	// The guest's claim, bounded.
	code, reason, signal := st.Code, st.Reason, truncate(strings.ToValidUTF8(st.Signal, ""), 16)
	if !validExitReason(reason) {
		reason = ReasonLost
	}
	p.mu.Lock()
	p.rec.State, p.rec.ExitCode, p.rec.Signal, p.rec.Reason, p.rec.EndedAt = ProcessExited, &code, signal, reason, &now
	rec := p.snapshotLocked()
	p.signal()
	p.mu.Unlock()
	if err := s.store.endProcess(context.Background(), rec); err != nil {
		s.log.Warn("record process end", "process", rec.ID, "err", err)
	}
	close(p.done)
	r.retire(p, s.cfg.MaxProcesses)
}

// lookup resolves a pid of the tenant's sandbox to its newest process: the
// live one when this server streams it.
func (s *Service) lookup(ctx context.Context, tenantID, sandboxID string, pid uint32) (Process, *liveProcess, error) {
	if _, err := s.store.Sandbox(ctx, tenantID, sandboxID); err != nil {
		return Process{}, nil, err
	}
	rec, err := s.store.ProcessByPID(ctx, tenantID, sandboxID, pid)
	if err != nil {
		return Process{}, nil, err
	}
	if p := s.procs.get(rec.ID); p != nil {
		return p.snapshot(), p, nil
	}
	return rec, nil, nil
}

// liveRunning is lookup for an op on a running process this server streams.
func (s *Service) liveRunning(ctx context.Context, tenantID, sandboxID string, pid uint32) (*liveProcess, error) {
	rec, p, err := s.lookup(ctx, tenantID, sandboxID, pid)
	switch {
	case err != nil:
		return nil, err
	case rec.State != ProcessRunning:
		return nil, fmt.Errorf("process %d: %w: it %s (%s)", pid, errdefs.ErrConflict, rec.State, rec.Reason)
	case p == nil:
		// It runs, but its agent is out of reach: re-attached shortly.
		return nil, fmt.Errorf("process %d: %w", pid, errdefs.Unavailable("the process's agent"))
	}
	return p, nil
}

// ListProcesses returns the processes of the tenant's sandbox, running
// ones first, then the latest ended, newest first.
func (s *Service) ListProcesses(ctx context.Context, tenantID, sandboxID string) ([]Process, error) {
	if _, err := s.store.Sandbox(ctx, tenantID, sandboxID); err != nil {
		return nil, err
	}
	recs, err := s.store.Processes(ctx, tenantID, sandboxID)
	if err != nil {
		return nil, err
	}
	for i, rec := range recs {
		if p := s.procs.get(rec.ID); p != nil {
			recs[i] = p.snapshot()
		}
	}
	return recs, nil
}

// GetProcess returns process pid of the tenant's sandbox (the newest with
// that pid); none is errdefs.ErrNotFound.
func (s *Service) GetProcess(ctx context.Context, tenantID, sandboxID string, pid uint32) (Process, error) {
	rec, _, err := s.lookup(ctx, tenantID, sandboxID, pid)
	return rec, err
}

// ProcessOutput calls fn with the output of process pid from offset on
// (clamped to what the ring still holds: the first chunk's Offset says
// where it starts), then, with follow, with what it prints next until it
// ended or ctx ends. It returns the process as it is after the last chunk.
// An offset past the output is a *errdefs.FieldError ("offset"); the
// output of a process this server no longer holds (ended long ago, or
// before a restart) is empty; one running that this server is still
// re-attaching (after a restart) is errdefs.ErrUnavailable: retry.
func (s *Service) ProcessOutput(ctx context.Context, tenantID, sandboxID string, pid uint32, offset int64, follow bool, fn func(ProcessChunk) error) (Process, error) {
	rec, p, err := s.lookup(ctx, tenantID, sandboxID, pid)
	if err != nil {
		return Process{}, err
	}
	if p == nil && rec.State == ProcessRunning {
		// Left by a server that stopped, not re-attached yet: its output
		// (and how much there is) is in its agent.
		return rec, fmt.Errorf("process %d: %w", pid, errdefs.Unavailable("the process's agent"))
	}
	if offset < 0 || offset > rec.OutputBytes {
		return Process{}, errdefs.Invalid("offset", "range", fmt.Sprintf("must be between 0 and %d (the output so far)", rec.OutputBytes))
	}
	if p == nil {
		return rec, nil
	}
	for {
		chunks, changed, ended := p.from(offset)
		for _, c := range chunks {
			if err := fn(c); err != nil {
				return p.snapshot(), err
			}
			offset = c.Offset + int64(len(c.Data))
		}
		if ended || !follow {
			if ended {
				// The last bytes came before the end: none missed.
				if more, _, _ := p.from(offset); len(more) > 0 {
					continue
				}
			}
			return p.snapshot(), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return p.snapshot(), ctx.Err()
		case <-s.stop.Done():
			return p.snapshot(), s.stop.Err()
		}
	}
}

// WriteStdin writes data to process pid's stdin (its terminal's input on
// a TTY). A process started without stdin, or whose stdin was closed, is a
// *errdefs.FieldError ("stdin").
func (s *Service) WriteStdin(ctx context.Context, tenantID, sandboxID string, pid uint32, data []byte) error {
	p, err := s.liveRunning(ctx, tenantID, sandboxID, pid)
	if err != nil {
		return err
	}
	if int64(len(data)) > s.cfg.MaxStdinBytes {
		return errdefs.Invalid("data", "size", fmt.Sprintf("at most %d bytes at a time", s.cfg.MaxStdinBytes))
	}
	p.mu.Lock()
	open := p.stdin
	p.mu.Unlock()
	if !open {
		return errdefs.Invalid("stdin", "closed", fmt.Sprintf("process %d has no open stdin: start it with stdin: true, and write before closing it", pid))
	}
	if _, err := p.e.Write(data); err != nil {
		return agentErr("write stdin of process", err)
	}
	return nil
}

// CloseStdin closes process pid's stdin (EOF; ^D on a TTY).
func (s *Service) CloseStdin(ctx context.Context, tenantID, sandboxID string, pid uint32) error {
	p, err := s.liveRunning(ctx, tenantID, sandboxID, pid)
	if err != nil {
		return err
	}
	p.mu.Lock()
	open := p.stdin
	p.stdin = false
	p.mu.Unlock()
	if !open {
		return errdefs.Invalid("stdin", "closed", fmt.Sprintf("process %d has no open stdin", pid))
	}
	if err := p.e.CloseStdin(); err != nil {
		return agentErr("close stdin of process", err)
	}
	return nil
}

// Signal sends signal ("SIGTERM", "TERM", "KILL", ...) to process pid's
// process group; it is audited process.signaled. An unknown signal is a
// *errdefs.FieldError ("signal"); an ended process errdefs.ErrConflict.
func (s *Service) Signal(ctx context.Context, actor audit.Actor, tenantID, sandboxID string, pid uint32, signal string) error {
	name, err := SignalName(signal)
	if err != nil {
		// The pid first: another tenant's gets not-found whatever the body.
		if _, _, lerr := s.lookup(ctx, tenantID, sandboxID, pid); lerr != nil {
			return lerr
		}
		return err
	}
	p, err := s.liveRunning(ctx, tenantID, sandboxID, pid)
	if err != nil {
		return err
	}
	rec := p.snapshot()
	ev := actor.Event(tenantID, audit.TypeProcessSignaled, "sandbox", sandboxID, map[string]any{
		"process_id": rec.ID, "pid": rec.PID, "signal": "SIG" + name, "cmd": rec.Argv()})
	if err := s.store.record(ctx, ev); err != nil {
		return err
	}
	if err := p.e.Signal(name); err != nil {
		return agentErr("signal process", err)
	}
	s.log.Info("process signalled", "sandbox", sandboxID, "process", rec.ID, "pid", pid, "signal", name, "actor", actorName(actor))
	return nil
}

// Resize sets the terminal size of process pid; one without a terminal is
// a *errdefs.FieldError ("pid").
func (s *Service) Resize(ctx context.Context, tenantID, sandboxID string, pid uint32, cols, rows uint16) error {
	p, err := s.liveRunning(ctx, tenantID, sandboxID, pid)
	if err != nil {
		return err
	}
	if !p.snapshot().TTY {
		return errdefs.Invalid("pid", "not_tty", fmt.Sprintf("process %d has no terminal: only a process started with tty: true can be resized", pid))
	}
	if err := checkSize(cols, rows); err != nil {
		return err
	}
	if err := p.e.Resize(agentproto.Winsize{Cols: cols, Rows: rows}); err != nil {
		return agentErr("resize process", err)
	}
	return nil
}

// Wait waits until process pid ended (or ctx ends) and returns it.
func (s *Service) Wait(ctx context.Context, tenantID, sandboxID string, pid uint32) (Process, error) {
	for {
		rec, p, err := s.lookup(ctx, tenantID, sandboxID, pid)
		if err != nil || rec.State != ProcessRunning {
			return rec, err
		}
		var done <-chan struct{}
		if p != nil {
			done = p.done
		}
		select {
		case <-done:
		case <-time.After(2 * time.Second): // not streamed here yet: look again
		case <-ctx.Done():
			return rec, ctx.Err()
		}
	}
}

// SetTimeout gives the tenant's running sandbox seconds more to live from
// now (longer or shorter than it had), within the tenant policy's
// lifetime.max_timeout_seconds and MaxTimeoutSeconds: above them a
// *errdefs.FieldError names "timeout_seconds" and nothing changes. The
// agent enforces the new lifetime, and so does the stored expiry (the
// sync destroys it then, also after a restart); audited
// sandbox.timeout_set.
func (s *Service) SetTimeout(ctx context.Context, actor audit.Actor, tenantID, sandboxID string, seconds int) (Sandbox, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, sandboxID)
	if err != nil {
		return Sandbox{}, err
	}
	b, err := s.basis(ctx, tenantID)
	if err != nil {
		return Sandbox{}, fmt.Errorf("set timeout: %w", err)
	}
	bound, setting := MaxTimeoutSeconds, "the server's maximum"
	if b.hasPolicy && b.pol.Doc.Lifetime.MaxTimeoutSeconds < bound {
		bound = b.pol.Doc.Lifetime.MaxTimeoutSeconds
		setting = fmt.Sprintf("the tenant policy (version %d, lifetime.max_timeout_seconds)", b.pol.Version)
	}
	switch {
	case seconds < 1:
		return Sandbox{}, errdefs.Invalid("timeout_seconds", "range", "must be at least 1")
	case seconds > bound:
		return Sandbox{}, errdefs.Invalid("timeout_seconds", "policy", fmt.Sprintf("must be at most %d: %s allows %d; asked %d", bound, setting, bound, seconds))
	}
	if err := c.SetSandboxLifetime(ctx, sb.ID, seconds); err != nil {
		return Sandbox{}, agentErr("set timeout of sandbox "+sb.ID, err)
	}
	return s.store.setExpiry(ctx, actor, sb, seconds)
}

// adoptProcesses re-attaches the processes recorded running that this
// server does not stream (left by a server that stopped, or whose stream
// was lost), and closes those that cannot be: their sandbox ended, or their
// agent no longer has them.
func (s *Service) adoptProcesses(ctx context.Context) {
	recs, err := s.store.allRunningProcesses(ctx)
	if err != nil {
		s.log.Warn("processes to re-attach", "err", err)
		return
	}
	for _, rec := range recs {
		if ctx.Err() != nil {
			return
		}
		if s.procs.get(rec.ID) != nil {
			continue
		}
		sb, err := s.store.byID(ctx, rec.SandboxID)
		switch {
		case errors.Is(err, errdefs.ErrNotFound), err == nil && sb.TenantID != rec.TenantID:
			s.closeProcess(ctx, rec, "its sandbox is gone")
			continue
		case err != nil:
			continue
		case sb.State != StateRunning && sb.State != StateCreating:
			s.closeProcess(ctx, rec, "its sandbox ended ("+string(sb.State)+")")
			continue
		case sb.State == StateCreating:
			continue
		}
		c, err := s.vms.Agent(ctx, sb.TenantID, sb.VMID)
		if err != nil {
			continue // out of reach: next pass
		}
		p := newLiveProcess(rec, s.cfg.ProcessOutputBytes, false)
		pctx, cancel := context.WithCancel(context.Background())
		e, err := c.AttachExec(pctx, processExecPrefix+rec.ID, 0, processWriter{p, "stdout"}, processWriter{p, "stderr"}, s.nextAgent(sb, c))
		switch {
		case errors.Is(err, agentproto.ErrNotFound):
			cancel()
			s.closeProcess(ctx, rec, "its agent no longer has it")
			continue
		case err != nil:
			cancel()
			continue
		}
		p.mu.Lock()
		p.e, p.base = e, e.Start()
		p.mu.Unlock()
		s.procs.mu.Lock()
		s.procs.live[rec.ID] = p
		s.procs.mu.Unlock()
		go s.followProcess(p, cancel)
		s.log.Info("process re-attached", "sandbox", sb.ID, "process", rec.ID, "pid", rec.PID, "from", e.Start())
	}
}

// closeProcess records a process lost.
func (s *Service) closeProcess(ctx context.Context, rec Process, why string) {
	now := s.store.now()
	rec.State, rec.Reason, rec.EndedAt = ProcessLost, why, &now
	if err := s.store.endProcess(ctx, rec); err != nil {
		s.log.Warn("close lost process", "process", rec.ID, "err", err)
		return
	}
	s.log.Info("process lost", "sandbox", rec.SandboxID, "process", rec.ID, "why", why)
}

// processLoop re-attaches processes until Close: at once (those a stopped
// server left), then every SyncInterval.
func (s *Service) processLoop() {
	defer s.wg.Done()
	for {
		ctx, cancel := s.stop.WithTimeout(context.Background(), time.Minute)
		s.adoptProcesses(ctx)
		cancel()
		select {
		case <-s.stop.Done():
			s.procs.detachAll()
			return
		case <-time.After(s.cfg.SyncInterval):
		}
	}
}

// detachAll releases every stream without killing: the agent keeps the
// processes for the next server.
func (r *processes) detachAll() {
	r.mu.Lock()
	list := make([]*liveProcess, 0, len(r.live))
	for _, p := range r.live {
		list = append(list, p)
	}
	r.mu.Unlock()
	for _, p := range list {
		if p.e != nil {
			p.e.Detach()
		}
	}
}

// processesEnded forgets the processes of an ended sandbox and closes
// their rows (an OnEnd observer).
func (s *Service) processesEnded(tenantID, sandboxID, reason string) {
	s.procs.forget(sandboxID)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.store.closeProcessesOf(ctx, tenantID, sandboxID, truncate("its sandbox ended: "+reason, 500)); err != nil {
		s.log.Warn("close processes of ended sandbox", "sandbox", sandboxID, "err", err)
	}
}

// Store side.

// processListLimit bounds the ended processes a list shows; running ones
// are always shown.
const processListLimit = 200

// Processes returns the processes of the tenant's sandbox: the running
// ones, then the latest ended, newest first.
func (s *Store) Processes(ctx context.Context, tenantID, sandboxID string) ([]Process, error) {
	q := s.db.WithContext(ctx).Where("tenant_id = ? AND sandbox_id = ?", tenantID, sandboxID)
	var running, ended []Process
	if err := q.Session(&gorm.Session{}).Where("state = ?", ProcessRunning).Order("started_at DESC, id DESC").Find(&running).Error; err != nil {
		return nil, fmt.Errorf("processes of sandbox %s: %w", sandboxID, err)
	}
	if err := q.Session(&gorm.Session{}).Where("state <> ?", ProcessRunning).Order("started_at DESC, id DESC").Limit(processListLimit).Find(&ended).Error; err != nil {
		return nil, fmt.Errorf("processes of sandbox %s: %w", sandboxID, err)
	}
	return append(running, ended...), nil
}

// ProcessByPID returns the newest process with pid of the tenant's sandbox
// (a running one first).
func (s *Store) ProcessByPID(ctx context.Context, tenantID, sandboxID string, pid uint32) (Process, error) {
	var p Process
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND sandbox_id = ? AND pid = ?", tenantID, sandboxID, pid).
		Order(clauseRunningFirst).Order("started_at DESC, id DESC").Take(&p).Error
	if err != nil {
		return Process{}, fmt.Errorf("process %d: %w", pid, notFound(err))
	}
	return p, nil
}

const clauseRunningFirst = "CASE WHEN state = 'running' THEN 0 ELSE 1 END"

func (s *Store) insertProcess(ctx context.Context, actor audit.Actor, rec Process, req ProcessRequest) error {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := tx.Create(&rec).Error; err != nil {
			return err
		}
		return s.audit(tx, actor.Event(rec.TenantID, audit.TypeProcessStarted, "sandbox", rec.SandboxID, map[string]any{
			"process_id": rec.ID, "pid": rec.PID, "cmd": req.Cmd, "cwd": req.Cwd, "env_keys": sortedKeys(req.Env),
			"tty": req.TTY, "timeout_seconds": req.TimeoutSeconds, "tag": req.Tag,
		}))
	})
	if err != nil {
		return fmt.Errorf("record process in sandbox %s: %w", rec.SandboxID, err)
	}
	return nil
}

func (s *Store) endProcess(ctx context.Context, rec Process) error {
	err := s.db.WithContext(ctx).Model(&Process{}).Where("id = ? AND state = ?", rec.ID, ProcessRunning).Updates(map[string]any{
		"state": rec.State, "exit_code": rec.ExitCode, "signal": rec.Signal, "reason": truncate(rec.Reason, 500),
		"ended_at": rec.EndedAt, "output_bytes": rec.OutputBytes,
	}).Error
	if err != nil {
		return fmt.Errorf("record end of process %s: %w", rec.ID, err)
	}
	return nil
}

// runningProcesses counts the processes of a sandbox recorded running.
func (s *Store) runningProcesses(ctx context.Context, sandboxID string) (int64, error) {
	var n int64
	if err := s.db.WithContext(ctx).Model(&Process{}).Where("sandbox_id = ? AND state = ?", sandboxID, ProcessRunning).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count processes of sandbox %s: %w", sandboxID, err)
	}
	return n, nil
}

// allRunningProcesses returns every process recorded running, of every
// tenant, for the adopt loop (which checks each one's sandbox and tenant).
func (s *Store) allRunningProcesses(ctx context.Context) ([]Process, error) {
	var out []Process
	if err := s.db.WithContext(ctx).Where("state = ?", ProcessRunning).Order("started_at").Limit(5000).Find(&out).Error; err != nil {
		return nil, fmt.Errorf("running processes: %w", err)
	}
	return out, nil
}

// closeProcessesOf records the running processes of an ended sandbox lost.
func (s *Store) closeProcessesOf(ctx context.Context, tenantID, sandboxID, reason string) error {
	err := s.db.WithContext(ctx).Model(&Process{}).Where("tenant_id = ? AND sandbox_id = ? AND state = ?", tenantID, sandboxID, ProcessRunning).
		Updates(map[string]any{"state": ProcessLost, "reason": reason, "ended_at": s.now()}).Error
	if err != nil {
		return fmt.Errorf("close processes of sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// setExpiry moves a running sandbox's expiry to seconds from now, audited
// sandbox.timeout_set.
func (s *Store) setExpiry(ctx context.Context, actor audit.Actor, sb Sandbox, seconds int) (Sandbox, error) {
	now := s.now()
	expires := now.Add(time.Duration(seconds) * time.Second)
	err := s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&Sandbox{}).Where("id = ? AND tenant_id = ? AND state = ?", sb.ID, sb.TenantID, StateRunning).Update("expires_at", expires)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("sandbox %s: %w: it no longer runs", sb.ID, errdefs.ErrConflict)
		}
		return s.audit(tx, actor.Event(sb.TenantID, audit.TypeSandboxTimeoutSet, "sandbox", sb.ID, map[string]any{
			"timeout_seconds": seconds, "expires_at": expires, "previous_expires_at": sb.ExpiresAt}))
	})
	if err != nil {
		return Sandbox{}, fmt.Errorf("set timeout of sandbox %s: %w", sb.ID, err)
	}
	sb.ExpiresAt = expires
	return sb, nil
}
