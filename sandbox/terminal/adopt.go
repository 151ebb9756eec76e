package terminal

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Taking up the terminals a stopped server left (Config.Exclusive with a
// PTYAttacher). The agent of each sandbox keeps a terminal's process and
// PTY running, detached, for its exec grace, with its latest output (1 MiB);
// the session's row and recording stay as the old server left them. The
// new server re-attaches the PTY under the session's id and builds the hub
// again: its ring gets what the agent still holds (the screen, for late
// joiners and resumes; offsets go on from where the session was), output
// past what the recording holds is recorded, into the same recording, after
// a marker (the gap shows as time passing), and the opener drives again,
// so the page's reconnect finds the same session and typing goes on.

// adoptOrphans tries to take up each session a stopped server left.
func (s *Service) adoptOrphans() {
	s.mu.Lock()
	if len(s.orphans) == 0 || s.closed {
		s.mu.Unlock()
		return
	}
	list := make([]Session, 0, len(s.orphans))
	for _, sess := range s.orphans {
		list = append(list, sess)
	}
	s.mu.Unlock()
	for _, sess := range list {
		ctx, cancel := s.stop.WithTimeout(context.Background(), 30*time.Second)
		done := s.adopt(ctx, sess)
		cancel()
		if done {
			s.mu.Lock()
			delete(s.orphans, sess.ID)
			s.mu.Unlock()
		}
	}
}

// adopt takes up sess, or records it ended when it cannot be: its sandbox
// ended, its process is gone, or its agent stayed out of reach for the
// adopt window. It reports whether sess is settled (false: try again).
func (s *Service) adopt(ctx context.Context, sess Session) bool {
	att, ok := s.sbx.(PTYAttacher)
	if !ok {
		s.closeLost(ctx, sess, "lost: the server that held it stopped")
		return true
	}
	ended, why, err := s.sbx.SandboxEnded(ctx, sess.TenantID, sess.SandboxID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		s.closeLost(ctx, sess, "the sandbox is gone")
		return true
	case err == nil && ended:
		s.closeLost(ctx, sess, why)
		return true
	case err != nil:
		return s.giveUp(ctx, sess, err)
	}
	var prior recorded
	path := ""
	if sess.Recording != "" {
		path = filepath.Join(s.cfg.DataDir, sess.Recording)
		if prior, err = readRecorded(path); err != nil {
			s.log.Warn("read the recording of a terminal to take up", "session", sess.ID, "err", err)
			path = ""
		}
	}
	// From 0: whatever the agent still holds, so the ring has the screen.
	pty, start, err := att.AttachPTY(ctx, sess.TenantID, sess.SandboxID, sess.ID, 0)
	switch {
	case errors.Is(err, ErrPTYGone):
		s.closeLost(ctx, sess, "lost: its process was gone when the server restarted")
		return true
	case err != nil:
		return s.giveUp(ctx, sess, err)
	}
	var rec *Recorder
	heldBudget := false
	if path != "" {
		f, err := openResumed(path, &prior)
		if err != nil {
			s.log.Error("resume recording", "session", sess.ID, "err", err)
		} else {
			budget, err := s.takeBudget(ctx, sess.TenantID)
			heldBudget = err == nil
			if err != nil {
				s.log.Warn("recording budget", "tenant", sess.TenantID, "err", err)
				budget = NewBudget(max(s.cfg.MaxTenantRecordingBytes, 0), 0)
			}
			lim := RecorderLimits{MaxBytes: max(s.cfg.MaxRecordingBytes, 0), Budget: budget}
			rec = resumeRecorder(f, prior, sess.StartedAt, s.cfg.Clock.Now, s.cfg.SpoolEvents, lim,
				"the server restarted: the terminal went on, recorded again from here")
		}
	}
	opener := audit.Actor{Kind: sess.OpenedByKind, ID: sess.OpenedBy, Name: sess.OpenedByName}
	l := &liveSession{sess: sess}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		pty.Close() // the agent kills it: this server is shutting down
		if rec != nil {
			rec.Close()
		}
		return true
	}
	l.hub = NewHub(pty, HubConfig{
		ID: sess.ID, Sandbox: sess.SandboxID, RingBytes: s.cfg.RingBytes, QueueBytes: s.cfg.QueueBytes, QueueMessages: s.cfg.QueueMessages,
		Recorder: rec, RecordInput: sess.RecordInput, Cols: uint16(sess.Cols), Rows: uint16(sess.Rows), Driver: opener, Log: s.log, Clock: s.cfg.Clock,
		Explain:   s.explain(sess.TenantID, sess.SandboxID),
		OnControl: func(by audit.Actor, from string) { s.controlTaken(sess, by, from) },
		OnEnd: func(e End) {
			if e.Exit != nil && e.Exit.Duration > 0 {
				// It may have ended while no server watched: its real end.
				if at := sess.StartedAt.Add(e.Exit.Duration); at.Before(e.At) {
					e.At = at
				}
			}
			if rec == nil {
				// The recording as the old server left it.
				e.Record = RecorderStats{Bytes: prior.Size, Events: prior.Events, Truncated: prior.Truncated}
			}
			s.ended(sess, e)
			if heldBudget {
				s.releaseBudget(sess.TenantID)
			}
		},
		Resume: &HubResume{Offset: start, RecordFrom: prior.Out + prior.Lost, BytesIn: prior.In, Started: sess.StartedAt},
	})
	s.live[sess.ID] = l
	s.mu.Unlock()
	s.log.Info("terminal taken up after a server restart", "session", sess.ID, "tenant", sess.TenantID, "sandbox", sess.SandboxID,
		"from", start, "recorded", prior.Out+prior.Lost)
	return true
}

// giveUp records sess lost once the adopt window has passed; before, it
// waits for the next try.
func (s *Service) giveUp(ctx context.Context, sess Session, err error) bool {
	s.mu.Lock()
	until := s.adoptUntil
	s.mu.Unlock()
	if s.cfg.Clock.Now().Before(until) {
		s.log.Debug("terminal to take up: not yet", "session", sess.ID, "err", err)
		return false
	}
	s.closeLost(ctx, sess, "lost: its sandbox's agent was out of reach after the server restarted")
	return true
}
