// Package terminal runs live terminals in sandboxes. A Hub per session fans
// one PTY out to one driver (the agent, or a person after an explicit
// handover) and any number of read-only watchers; recent output stays in a
// ring buffer for late joiners and for resuming dropped connections; a slow
// client is cut off and never slows the PTY. Every session is recorded as
// asciicast v2 through an asynchronous spool and indexed in the
// terminal_sessions table; the Service opens, joins, ends and lists
// sessions, audits them, and removes recordings past their retention.
package terminal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox/shutdown"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Config configures a Service. Zero values take the defaults noted.
type Config struct {
	// DataDir holds the recordings, in recordings/<tenant>/<session>.cast.
	DataDir string
	Logger  *slog.Logger
	// Clock drives the checks, the sweeps and the hubs' timers and stamps
	// the sessions; default the real clock.
	Clock clockwork.Clock
	// RingBytes is the output kept per session for late joiners and
	// resumes; default 256 KiB.
	RingBytes int
	// QueueBytes and QueueMessages bound what may wait for one client
	// before it is cut off; defaults 1 MiB and 1024.
	QueueBytes    int64
	QueueMessages int
	// SpoolEvents is the recorder's queue; default 4096 events.
	SpoolEvents int
	// RecordInput records keystrokes too (output is always recorded).
	RecordInput bool
	// RetentionDays keeps a recording that many days after its session
	// ended; default 90.
	RetentionDays int
	// MaxRecordingBytes caps one session's recording; default 50 MiB,
	// negative: no cap. MaxTenantRecordingBytes caps what one tenant's
	// recordings hold together (those kept on disk and the live ones of
	// this server); default 5 GiB, negative: no cap. Past a cap the terminal
	// keeps working and its recording ends with a marker saying so.
	MaxRecordingBytes       int64
	MaxTenantRecordingBytes int64
	// Shell is the command a terminal runs when the request names none;
	// default bash if the sandbox has it, else sh, as a login shell.
	Shell []string
	// Env is added to the terminal's environment; default
	// TERM=xterm-256color.
	Env []string
	// CheckInterval is how often live sessions are checked against their
	// sandboxes; default 2 s.
	CheckInterval time.Duration
	// AbandonAfter ends a session nobody was connected to for that long;
	// default 15 min.
	AbandonAfter time.Duration
	// Exclusive says this is the only server of the installation (it holds
	// the installation lease): at Start every live session in the database
	// was left by a server that stopped. When the Sandboxes can re-attach
	// terminals (PTYAttacher) each is taken up again: its process kept
	// running in the sandbox's agent, detached, and the session goes on
	// under its id (see adopt); one whose process is gone is recorded ended.
	// Otherwise they are recorded ended at once rather than once unseen for
	// 3 min.
	Exclusive bool
	// AdoptWindow is how long after Start a session left by a stopped
	// server waits for its sandbox's agent to be reachable again before it
	// is recorded lost; default 5 min (the agents' default exec grace,
	// after which they kill a detached terminal anyway).
	AdoptWindow time.Duration
}

func (c *Config) checkAndSetDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.RingBytes <= 0 {
		c.RingBytes = defaultRingBytes
	}
	if c.RetentionDays <= 0 {
		c.RetentionDays = 90
	}
	if c.MaxRecordingBytes == 0 {
		c.MaxRecordingBytes = DefaultMaxRecordingBytes
	}
	if c.MaxTenantRecordingBytes == 0 {
		c.MaxTenantRecordingBytes = DefaultMaxTenantRecordingBytes
	}
	if len(c.Shell) == 0 {
		c.Shell = []string{"/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l"}
	}
	if c.Env == nil {
		c.Env = []string{"TERM=xterm-256color"}
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = 2 * time.Second
	}
	if c.AbandonAfter <= 0 {
		c.AbandonAfter = 15 * time.Minute
	}
	if c.AdoptWindow <= 0 {
		c.AdoptWindow = 5 * time.Minute
	}
}

// Default recording caps (Config).
const (
	DefaultMaxRecordingBytes       = 50 << 20
	DefaultMaxTenantRecordingBytes = 5 << 30
)

// Service runs the terminal sessions of every tenant.
type Service struct {
	cfg   Config
	store *Store
	sbx   Sandboxes
	log   *slog.Logger

	stop *shutdown.Signal // closed by Close
	wg   sync.WaitGroup

	mu      sync.Mutex
	live    map[string]*liveSession
	budgets map[string]*tenantBudget // recording budgets of tenants with live sessions
	// orphans are sessions a stopped server left, waiting to be taken up
	// (adopt) until adoptUntil.
	orphans    map[string]Session
	adoptUntil time.Time
	// attaching are the sessions another server left being taken up here
	// on demand (takeUpHere), so one Join does it.
	attaching map[string]bool
	started   bool
	closed    bool
}

type liveSession struct {
	sess Session
	hub  *Hub
}

// NewService returns a Service keeping its sessions in store and reaching
// sandboxes' PTYs through sbx; the composition root builds the store once
// and passes it in.
func NewService(store *Store, sbx Sandboxes, cfg Config) *Service {
	cfg.checkAndSetDefaults()
	s := &Service{cfg: cfg, store: store, sbx: sbx, log: cfg.Logger.With("component", "terminal"),
		live: map[string]*liveSession{}, budgets: map[string]*tenantBudget{}, orphans: map[string]Session{}, attaching: map[string]bool{}}
	s.stop = shutdown.New()
	return s
}

// New returns a Service on db (migrated) opening terminals in sbx's
// sandboxes. Start it to check live sessions in the background.
//
// Deprecated: kept for callers that hold only a *gorm.DB (tests); the
// composition root builds the store once and calls NewService.
func New(db *gorm.DB, sbx Sandboxes, cfg Config) *Service {
	cfg.checkAndSetDefaults()
	return NewService(NewStore(db, cfg.Clock.Now), sbx, cfg)
}

// Store is the service's store.
func (s *Service) Store() *Store { return s.store }

// Config is the service's configuration with its defaults filled in.
func (s *Service) Config() Config { return s.cfg }

// Start checks live sessions in the background until Close: sessions whose
// sandbox ended end too, sessions nobody was connected to for AbandonAfter
// end, sessions a stopped server left behind are recorded as ended, and
// recordings past their retention are removed.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("terminal service: already started")
	}
	s.started = true
	s.mu.Unlock()
	before := s.cfg.Clock.Now().Add(-lostAfter)
	if _, ok := s.sbx.(PTYAttacher); ok && s.cfg.Exclusive {
		// Nothing is live here yet: every live session was left by a
		// server that stopped, and its terminal may still run.
		left, err := s.store.stale(ctx, s.cfg.Clock.Now().Add(time.Second))
		if err != nil {
			return fmt.Errorf("terminal service: %w", err)
		}
		s.mu.Lock()
		for _, sess := range left {
			s.orphans[sess.ID] = sess
		}
		s.adoptUntil = s.cfg.Clock.Now().Add(s.cfg.AdoptWindow)
		s.mu.Unlock()
		if len(left) > 0 {
			s.log.Info("terminals left by a stopped server: re-attaching", "sessions", len(left))
		}
	} else if s.cfg.Exclusive {
		before = s.cfg.Clock.Now().Add(time.Second) // nothing is live here yet
	}
	s.reapLost(ctx, before)
	s.wg.Add(1)
	go s.loop()
	return nil
}

// Close ends every live session ("the server is shutting down") and stops
// the background loop.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	hubs := make([]*Hub, 0, len(s.live))
	for _, l := range s.live {
		hubs = append(hubs, l.hub)
	}
	s.mu.Unlock()
	s.stop.Close()
	for _, h := range hubs {
		h.End("the server is shutting down")
	}
	s.wg.Wait()
	return nil
}

// OpenRequest is a terminal to open.
type OpenRequest struct {
	// Argv is the command; empty runs the configured shell.
	Argv       []string
	Cols, Rows uint16
}

func (r *OpenRequest) check(cfg Config) error {
	if len(r.Argv) == 0 {
		r.Argv = cfg.Shell
	}
	if len(r.Argv) > 64 {
		return errdefs.Invalid("cmd", "range", "at most 64 arguments")
	}
	for _, a := range r.Argv {
		if len(a) > 4096 || strings.ContainsRune(a, 0) {
			return errdefs.Invalid("cmd", "syntax", "arguments are at most 4096 bytes, without NUL")
		}
	}
	if r.Argv[0] == "" {
		return errdefs.Invalid("cmd", "required", "the command is empty")
	}
	if r.Cols == 0 || r.Rows == 0 {
		r.Cols, r.Rows = 80, 24
	}
	if r.Cols > MaxSize || r.Rows > MaxSize {
		return errdefs.Invalid("cols", "range", fmt.Sprintf("columns and rows are 1 to %d", MaxSize))
	}
	return nil
}

// CheckSandbox says whether a terminal can be opened in the tenant's
// sandbox: errdefs.ErrNotFound for another tenant's, ErrConflict for one
// that ended.
func (s *Service) CheckSandbox(ctx context.Context, tenantID, sandboxID string) error {
	ended, reason, err := s.sbx.SandboxEnded(ctx, tenantID, sandboxID)
	if err != nil {
		return err
	}
	if ended {
		return fmt.Errorf("sandbox %s: %w: %s", sandboxID, errdefs.ErrConflict, reason)
	}
	return nil
}

// Open starts a terminal in the tenant's running sandbox, recorded and
// audited terminal.opened; actor holds control until it hands it over.
func (s *Service) Open(ctx context.Context, actor audit.Actor, tenantID, sandboxID string, req OpenRequest) (Session, error) {
	if err := req.check(s.cfg); err != nil {
		return Session{}, err
	}
	if err := s.CheckSandbox(ctx, tenantID, sandboxID); err != nil {
		return Session{}, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return Session{}, fmt.Errorf("open terminal: %w: the server is shutting down", errdefs.ErrConflict)
	}
	id, err := newID()
	if err != nil {
		return Session{}, err
	}
	rel := filepath.Join("recordings", tenantID, id+".cast")
	f, err := createRecording(filepath.Join(s.cfg.DataDir, rel))
	if err != nil {
		return Session{}, fmt.Errorf("open terminal in sandbox %s: %w", sandboxID, err)
	}
	pty, err := s.sbx.OpenPTY(ctx, tenantID, sandboxID, PTYRequest{ID: id, Argv: req.Argv, Rows: req.Rows, Cols: req.Cols, Env: s.cfg.Env})
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return Session{}, err
	}
	argv, _ := json.Marshal(req.Argv)
	now := s.store.clock.Now()
	sess := Session{
		ID: id, TenantID: tenantID, SandboxID: sandboxID, OpenedBy: actor.ID, OpenedByName: nameOf(actor), OpenedByKind: actor.Kind,
		ArgvJSON: string(argv), Cols: int(req.Cols), Rows: int(req.Rows), StartedAt: now, RecordInput: s.cfg.RecordInput,
		Recording: rel, RetentionDays: s.cfg.RetentionDays, SeenAt: now,
	}
	if err := s.store.create(ctx, actor, &sess); err != nil {
		pty.Close()
		f.Close()
		os.Remove(f.Name())
		return Session{}, err
	}
	budget, err := s.takeBudget(ctx, tenantID)
	heldBudget := err == nil
	if err != nil {
		s.log.Warn("recording budget", "tenant", tenantID, "err", err)
		budget = NewBudget(max(s.cfg.MaxTenantRecordingBytes, 0), 0) // unknown: record nothing rather than too much
	}
	lim := RecorderLimits{MaxBytes: max(s.cfg.MaxRecordingBytes, 0), Budget: budget}
	rec, err := NewLimitedRecorder(f, CastHeader{Width: int(req.Cols), Height: int(req.Rows), Timestamp: now.Unix(),
		Title: "sandbox " + sandboxID, Env: castEnv(s.cfg.Env)}, now, s.cfg.Clock.Now, s.cfg.SpoolEvents, lim)
	if err != nil {
		f.Close()
		s.log.Error("start recording", "session", id, "err", err)
		rec = nil // the session runs unrecorded; its row says 0 bytes
	}
	l := &liveSession{sess: sess}
	s.mu.Lock()
	l.hub = NewHub(pty, HubConfig{
		ID: id, Sandbox: sandboxID, RingBytes: s.cfg.RingBytes, QueueBytes: s.cfg.QueueBytes, QueueMessages: s.cfg.QueueMessages,
		Recorder: rec, RecordInput: s.cfg.RecordInput, Cols: req.Cols, Rows: req.Rows, Driver: actor, Log: s.log, Clock: s.cfg.Clock,
		Explain:   s.explain(tenantID, sandboxID),
		OnControl: func(by audit.Actor, from string) { s.controlTaken(sess, by, from) },
		OnEnd: func(e End) {
			s.ended(sess, e)
			if heldBudget {
				s.releaseBudget(tenantID)
			}
		},
	})
	s.live[id] = l
	closing := s.closed
	s.mu.Unlock()
	if closing {
		// Close ran meanwhile and did not see this one.
		l.hub.End("the server is shutting down")
		return Session{}, fmt.Errorf("open terminal: %w: the server is shutting down", errdefs.ErrConflict)
	}
	s.log.Info("terminal opened", "session", id, "tenant", tenantID, "sandbox", sandboxID, "by", nameOf(actor))
	return sess, nil
}

// createRecording creates a recording file (0600) and its folders (0700):
// recordings hold whatever a terminal showed.
func createRecording(path string) (*os.File, error) {
	for _, dir := range []string{filepath.Dir(filepath.Dir(path)), filepath.Dir(path)} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("recording folder: %w", err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("recording folder: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create recording: %w", err)
	}
	return f, nil
}

func castEnv(env []string) map[string]string {
	out := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && (k == "TERM" || k == "SHELL") {
			out[k] = v
		}
	}
	return out
}

// explain turns a process that ended with its sandbox into "the sandbox
// was destroyed": the agent kills the process before the sandbox's end is
// recorded, so an abnormal end waits a moment for that record.
func (s *Service) explain(tenantID, sandboxID string) func(*Exit, error) string {
	return func(ex *Exit, _ error) string {
		abnormal := ex == nil || ex.Signal != "" || (ex.Reason != "" && ex.Reason != "exited")
		deadline := s.cfg.Clock.Now()
		if abnormal {
			deadline = deadline.Add(3 * time.Second)
		}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			ended, reason, err := s.sbx.SandboxEnded(ctx, tenantID, sandboxID)
			cancel()
			if err == nil && ended {
				return reason
			}
			if !s.cfg.Clock.Now().Before(deadline) {
				return ""
			}
			s.cfg.Clock.Sleep(100 * time.Millisecond)
		}
	}
}

func (s *Service) controlTaken(sess Session, by audit.Actor, from string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := by.Event(sess.TenantID, audit.TypeTerminalControlTaken, "terminal", sess.ID, map[string]any{"sandbox": sess.SandboxID, "from": from})
	if err := s.store.record(ctx, e); err != nil {
		s.log.Error("audit terminal handover", "session", sess.ID, "err", err)
	}
}

func (s *Service) ended(sess Session, e End) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if e.RecErr != nil {
		s.log.Error("terminal recording failed", "session", sess.ID, "err", e.RecErr)
	}
	if err := s.store.finish(ctx, sess, e); err != nil {
		s.log.Error("record terminal end", "session", sess.ID, "err", err)
	}
	s.mu.Lock()
	delete(s.live, sess.ID)
	s.mu.Unlock()
	if e.Record.Truncated != "" {
		s.log.Info("terminal recording truncated", "session", sess.ID, "tenant", sess.TenantID, "why", e.Record.Truncated,
			"left_out_bytes", e.Record.TruncatedBytes)
	}
	s.log.Info("terminal closed", "session", sess.ID, "tenant", sess.TenantID, "sandbox", sess.SandboxID, "reason", e.Reason,
		"bytes_out", e.BytesOut, "recording_bytes", e.Record.Bytes, "dropped", e.Record.Dropped, "watchers_cut", e.Cut)
}

// tenantBudget is a tenant's recording budget while it has live sessions
// here, shared by them.
type tenantBudget struct {
	b    *Budget // nil: no tenant cap
	refs int
}

// takeBudget returns the tenant's recording budget for one more live
// session (release it with releaseBudget when the session ends): the one
// its live sessions share, else a new one of the cap less what its
// recordings on disk hold. Sessions another replica runs are not counted
// until they end.
func (s *Service) takeBudget(ctx context.Context, tenantID string) (*Budget, error) {
	if s.cfg.MaxTenantRecordingBytes < 0 {
		return nil, nil
	}
	s.mu.Lock()
	if tb := s.budgets[tenantID]; tb != nil {
		tb.refs++
		s.mu.Unlock()
		return tb.b, nil
	}
	s.mu.Unlock()
	stored, err := s.store.recordingBytes(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tb := s.budgets[tenantID]
	if tb == nil {
		tb = &tenantBudget{b: NewBudget(s.cfg.MaxTenantRecordingBytes, s.cfg.MaxTenantRecordingBytes-stored)}
		s.budgets[tenantID] = tb
	}
	tb.refs++
	return tb.b, nil
}

func (s *Service) releaseBudget(tenantID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tb := s.budgets[tenantID]; tb != nil {
		if tb.refs--; tb.refs <= 0 {
			delete(s.budgets, tenantID)
		}
	}
}

// JoinRequest says how someone joins a session.
type JoinRequest struct {
	// Drive asks for control (granted when nobody else holds it);
	// CanDrive says the caller's role allows driving at all.
	Drive, CanDrive bool
	// Offset is the first output byte wanted; -1 for the current screen.
	Offset int64
}

// Join connects actor to the tenant's live session, audited
// terminal.joined. Another tenant's session, or one of another sandbox
// than sandboxID (when not empty), is errdefs.ErrNotFound; an ended one
// ErrEnded.
func (s *Service) Join(ctx context.Context, actor audit.Actor, tenantID, sandboxID, sessionID string, req JoinRequest) (*Client, error) {
	s.mu.Lock()
	l := s.live[sessionID]
	s.mu.Unlock()
	if l == nil || l.sess.TenantID != tenantID || (sandboxID != "" && l.sess.SandboxID != sandboxID) {
		sess, err := s.store.Session(ctx, tenantID, sessionID)
		if err != nil {
			return nil, err
		}
		if sandboxID != "" && sess.SandboxID != sandboxID {
			return nil, fmt.Errorf("terminal session %s: %w", sessionID, errdefs.ErrNotFound)
		}
		if sess.EndedAt != nil {
			return nil, fmt.Errorf("%w: %s", ErrEnded, sess.EndReason)
		}
		s.mu.Lock()
		_, adopting := s.orphans[sessionID]
		s.mu.Unlock()
		if adopting {
			return nil, fmt.Errorf("terminal session %s: %w: it is being re-attached after a server restart; try again in a moment", sessionID, errdefs.ErrConflict)
		}
		if !s.takesUp() {
			return nil, fmt.Errorf("terminal session %s: %w: it runs on another server", sessionID, errdefs.ErrConflict)
		}
		// Requests for a sandbox's terminals reach the replica owning its
		// VM's channel: the server that ran this one stopped, and this one
		// took up the VM. Its PTY lives in the agent: re-attach it here.
		if err := s.takeUpHere(ctx, sess); err != nil {
			return nil, fmt.Errorf("terminal session %s: %w: it is being taken up by this server (%v); try again in a moment", sessionID, errdefs.ErrConflict, err)
		}
		s.mu.Lock()
		l = s.live[sessionID]
		s.mu.Unlock()
		if l == nil {
			sess, err := s.store.Session(ctx, tenantID, sessionID)
			if err == nil && sess.EndedAt != nil {
				return nil, fmt.Errorf("%w: %s", ErrEnded, sess.EndReason)
			}
			return nil, fmt.Errorf("terminal session %s: %w: it is being taken up by this server; try again in a moment", sessionID, errdefs.ErrConflict)
		}
	}
	c, err := l.hub.Join(JoinOptions{Actor: actor, CanDrive: req.CanDrive, Drive: req.Drive, Offset: req.Offset})
	if err != nil {
		return nil, err
	}
	e := actor.Event(tenantID, audit.TypeTerminalJoined, "terminal", sessionID, map[string]any{
		"sandbox": l.sess.SandboxID, "role": c.Role(), "offset": req.Offset,
	})
	if err := s.store.record(ctx, e); err != nil {
		c.Leave()
		return nil, err
	}
	return c, nil
}

// LiveSession is a live session with who is on it.
type LiveSession struct {
	Session
	Now State
}

// Live returns the tenant's live sessions on this server, oldest first;
// with sandboxID not empty, that sandbox's only.
func (s *Service) Live(tenantID, sandboxID string) []LiveSession {
	s.mu.Lock()
	var ls []*liveSession
	for _, l := range s.live {
		if l.sess.TenantID == tenantID && (sandboxID == "" || l.sess.SandboxID == sandboxID) {
			ls = append(ls, l)
		}
	}
	s.mu.Unlock()
	out := make([]LiveSession, 0, len(ls))
	for _, l := range ls {
		out = append(out, LiveSession{Session: l.sess, Now: l.hub.State()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) })
	return out
}

// LiveState returns who is on the tenant's session, if it is live here.
func (s *Service) LiveState(tenantID, sessionID string) (State, bool) {
	s.mu.Lock()
	l := s.live[sessionID]
	s.mu.Unlock()
	if l == nil || l.sess.TenantID != tenantID {
		return State{}, false
	}
	return l.hub.State(), true
}

// Session returns the tenant's session.
func (s *Service) Session(ctx context.Context, tenantID, id string) (Session, error) {
	return s.store.Session(ctx, tenantID, id)
}

// Sessions returns the tenant's recent sessions, newest first; with
// sandboxID not empty, that sandbox's only.
func (s *Service) Sessions(ctx context.Context, tenantID, sandboxID string) ([]Session, error) {
	return s.store.Sessions(ctx, tenantID, sandboxID)
}

// OpenRecording opens the recording of the tenant's session. A recording
// retention removed is errdefs.ErrNotFound.
func (s *Service) OpenRecording(ctx context.Context, tenantID, id string) (*os.File, Session, error) {
	sess, err := s.store.Session(ctx, tenantID, id)
	if err != nil {
		return nil, Session{}, err
	}
	if sess.Recording == "" {
		return nil, sess, fmt.Errorf("recording of terminal session %s: %w: removed after %d days", id, errdefs.ErrNotFound, sess.RetentionDays)
	}
	f, err := os.Open(filepath.Join(s.cfg.DataDir, filepath.Clean(sess.Recording)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, sess, fmt.Errorf("recording of terminal session %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, sess, fmt.Errorf("recording of terminal session %s: %w", id, err)
	}
	return f, sess, nil
}

// End ends the tenant's live session with reason.
func (s *Service) End(tenantID, sessionID, reason string) error {
	s.mu.Lock()
	l := s.live[sessionID]
	s.mu.Unlock()
	if l == nil || l.sess.TenantID != tenantID {
		return fmt.Errorf("live terminal session %s: %w", sessionID, errdefs.ErrNotFound)
	}
	l.hub.End(reason)
	return nil
}

// EndSandbox ends every live session of the tenant's sandbox with reason
// (the sandbox is going away).
func (s *Service) EndSandbox(tenantID, sandboxID, reason string) {
	for _, l := range s.Live(tenantID, sandboxID) {
		_ = s.End(tenantID, l.ID, reason)
	}
}

// SandboxEnding tells every live session of the tenant's sandbox why its
// process is about to go (sandbox.Service.OnEnding): they end with reason.
func (s *Service) SandboxEnding(tenantID, sandboxID, reason string) {
	for _, l := range s.Live(tenantID, sandboxID) {
		s.mu.Lock()
		live := s.live[l.ID]
		s.mu.Unlock()
		if live != nil && live.sess.TenantID == tenantID {
			live.hub.Ending(reason)
		}
	}
}

func (s *Service) loop() {
	defer s.wg.Done()
	ctx, cancel := s.stop.Bound(context.Background())
	defer cancel()
	t := s.cfg.Clock.NewTicker(s.cfg.CheckInterval)
	defer t.Stop()
	var lastSeen, lastSweep time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		s.adoptOrphans()
		s.check()
		now := s.cfg.Clock.Now()
		if now.Sub(lastSeen) >= seenInterval {
			lastSeen = now
			s.refresh()
			s.reapLost(ctx, s.cfg.Clock.Now().Add(-lostAfter))
		}
		if now.Sub(lastSweep) >= time.Hour {
			lastSweep = now
			s.sweep(ctx)
		}
	}
}

// seenInterval is how often live sessions are marked seen; one not seen
// for lostAfter was lost with its server.
const (
	seenInterval = 30 * time.Second
	lostAfter    = 3 * time.Minute
)

// check ends the sessions whose sandbox ended, and those nobody was
// connected to for AbandonAfter.
func (s *Service) check() {
	s.mu.Lock()
	ls := make([]*liveSession, 0, len(s.live))
	for _, l := range s.live {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	type key struct{ tenant, sandbox string }
	verdict := map[key]string{}
	for _, l := range ls {
		k := key{l.sess.TenantID, l.sess.SandboxID}
		why, ok := verdict[k]
		if !ok {
			ctx, cancel := s.stop.WithTimeout(context.Background(), 5*time.Second)
			ended, reason, err := s.sbx.SandboxEnded(ctx, k.tenant, k.sandbox)
			cancel()
			switch {
			case errors.Is(err, errdefs.ErrNotFound):
				why = "the sandbox is gone"
			case err == nil && ended:
				why = reason
			}
			verdict[k] = why
		}
		if why != "" {
			l.hub.End(why)
			continue
		}
		if st := l.hub.State(); !st.IdleSince.IsZero() && s.cfg.Clock.Now().Sub(st.IdleSince) >= s.cfg.AbandonAfter {
			l.hub.End(fmt.Sprintf("nobody was connected for %s", s.cfg.AbandonAfter))
		}
	}
}

func (s *Service) refresh() {
	s.mu.Lock()
	ids := make([]string, 0, len(s.live))
	for id := range s.live {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	ctx, cancel := s.stop.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.store.seen(ctx, ids); err != nil {
		s.log.Warn("refresh live terminals", "err", err)
	}
}

// reapLost records as ended the live sessions whose server stopped
// without ending them (not seen since before), but those waiting to be
// taken up (orphans).
func (s *Service) reapLost(ctx context.Context, before time.Time) {
	lost, err := s.store.stale(ctx, before)
	if err != nil {
		s.log.Warn("find lost terminals", "err", err)
		return
	}
	for _, sess := range lost {
		s.mu.Lock()
		_, mine := s.live[sess.ID]
		_, orphan := s.orphans[sess.ID]
		s.mu.Unlock()
		if mine || orphan {
			continue
		}
		if s.takesUp() {
			// Its PTY may live on in the agent, whose channel this
			// server may own now: take it up. One the agent is out of
			// reach for (another server owns its VM, or nobody yet)
			// waits for its owner, up to AdoptWindow more.
			err := s.takeUpHere(ctx, sess)
			if err == nil || s.cfg.Clock.Now().Sub(sess.SeenAt) < lostAfter+s.cfg.AdoptWindow {
				continue
			}
		}
		s.closeLost(ctx, sess, "lost: the server that held it stopped")
	}
}

// takesUp says whether this server takes up, on demand, terminals another
// server of the installation left: with several replicas (not Exclusive)
// and Sandboxes that can re-attach PTYs.
func (s *Service) takesUp() bool {
	_, ok := s.sbx.(PTYAttacher)
	return ok && !s.cfg.Exclusive
}

// takeUpHere re-attaches sess, a live session no server here holds, at
// most once at a time; nil when it is settled (live here, or recorded
// ended), a passing error otherwise.
func (s *Service) takeUpHere(ctx context.Context, sess Session) error {
	s.mu.Lock()
	if _, live := s.live[sess.ID]; live {
		s.mu.Unlock()
		return nil
	}
	if s.attaching[sess.ID] || s.closed {
		s.mu.Unlock()
		return errors.New("being taken up")
	}
	s.attaching[sess.ID] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.attaching, sess.ID)
		s.mu.Unlock()
	}()
	ctx, cancel := s.stop.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return s.attach(ctx, sess, movedHere)
}

// closeLost records a session no server holds as ended with reason. What
// it did is read from its recording: it ended at its last recorded event
// (or when last seen alive, if later), with the bytes recorded.
func (s *Service) closeLost(ctx context.Context, sess Session, reason string) {
	e := End{Reason: reason, At: sess.SeenAt}
	if sess.Recording != "" {
		if rec, err := readRecorded(filepath.Join(s.cfg.DataDir, sess.Recording)); err != nil {
			s.log.Warn("read recording of a lost terminal", "session", sess.ID, "err", err)
		} else {
			e.Record.Bytes, e.Record.Events, e.BytesOut, e.BytesIn = rec.Size, rec.Events, rec.Out+rec.Lost, rec.In
			e.Record.Truncated = rec.Truncated
			if last := sess.StartedAt.Add(rec.Last); last.After(e.At) {
				e.At = last
			}
		}
	}
	if err := s.store.finish(ctx, sess, e); err != nil {
		s.log.Warn("record lost terminal", "session", sess.ID, "err", err)
		return
	}
	s.log.Info("terminal closed", "session", sess.ID, "tenant", sess.TenantID, "sandbox", sess.SandboxID, "reason", reason)
}

// sweep removes the recordings past their retention.
func (s *Service) sweep(ctx context.Context) {
	exp, err := s.store.expired(ctx, s.cfg.Clock.Now())
	if err != nil {
		s.log.Warn("find expired recordings", "err", err)
		return
	}
	for _, sess := range exp {
		if sess.Recording != "" {
			if err := os.Remove(filepath.Join(s.cfg.DataDir, sess.Recording)); err != nil && !errors.Is(err, os.ErrNotExist) {
				s.log.Warn("remove expired recording", "session", sess.ID, "err", err)
				continue
			}
		}
		if err := s.store.purged(ctx, sess.ID); err != nil {
			s.log.Warn("record purge", "session", sess.ID, "err", err)
		}
	}
	if len(exp) > 0 {
		s.log.Info("removed expired recordings", "count", len(exp))
	}
}

// Sweep removes the recordings past their retention now (the background
// loop does it hourly).
func (s *Service) Sweep(ctx context.Context) { s.sweep(ctx) }
