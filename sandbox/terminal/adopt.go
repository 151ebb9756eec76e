package terminal

import (
	"context"
	"errors"
	"os"
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
	if err := s.attach(ctx, sess, restarted); err != nil {
		return s.giveUp(ctx, sess, err)
	}
	return true
}

// Why a session is taken up: the marker its recording gets, and the end
// reason when its process is gone.
type takeUp struct{ note, gone string }

var (
	restarted = takeUp{"the server restarted: the terminal went on, recorded again from here",
		"lost: its process was gone when the server restarted"}
	movedHere = takeUp{"the server that held it stopped: another server took the terminal up, recorded again from here",
		"lost: its process was gone when another server took up its sandbox"}
)

// attach takes up sess: it re-attaches its PTY and builds its hub, or
// records it ended when it cannot be (its sandbox ended, its process is
// gone). A passing error (the agent out of reach from here) is returned
// with sess left as it was.
func (s *Service) attach(ctx context.Context, sess Session, why takeUp) error {
	att, ok := s.sbx.(PTYAttacher)
	if !ok {
		s.closeLost(ctx, sess, "lost: the server that held it stopped")
		return nil
	}
	ended, reason, err := s.sbx.SandboxEnded(ctx, sess.TenantID, sess.SandboxID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		s.closeLost(ctx, sess, "the sandbox is gone")
		return nil
	case err == nil && ended:
		s.closeLost(ctx, sess, reason)
		return nil
	case err != nil:
		return err
	}
	var prior recorded
	path, fresh := "", false
	if sess.Recording != "" {
		path = filepath.Join(s.cfg.DataDir, sess.Recording)
		if prior, err = readRecorded(path); errors.Is(err, os.ErrNotExist) {
			// Another server's data directory held it: this one records
			// what follows in its own, under the same name.
			prior, fresh = recorded{}, true
		} else if err != nil {
			s.log.Warn("read the recording of a terminal to take up", "session", sess.ID, "err", err)
			path = ""
		}
	}
	// From 0: whatever the agent still holds, so the ring has the screen.
	pty, start, err := att.AttachPTY(ctx, sess.TenantID, sess.SandboxID, sess.ID, 0)
	switch {
	case errors.Is(err, ErrPTYGone):
		s.closeLost(ctx, sess, why.gone)
		return nil
	case err != nil:
		return err
	}
	var rec *Recorder
	heldBudget := false
	if path != "" {
		budget, err := s.takeBudget(ctx, sess.TenantID)
		heldBudget = err == nil
		if err != nil {
			s.log.Warn("recording budget", "tenant", sess.TenantID, "err", err)
			budget = NewBudget(max(s.cfg.MaxTenantRecordingBytes, 0), 0)
		}
		lim := RecorderLimits{MaxBytes: max(s.cfg.MaxRecordingBytes, 0), Budget: budget}
		if rec, err = s.resumeRecording(path, fresh, &prior, sess, lim, why.note); err != nil {
			s.log.Error("resume recording", "session", sess.ID, "err", err)
			if heldBudget {
				s.releaseBudget(sess.TenantID)
				heldBudget = false
			}
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
		if heldBudget {
			s.releaseBudget(sess.TenantID)
		}
		return nil
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
	s.log.Info("terminal taken up", "why", why.note, "session", sess.ID, "tenant", sess.TenantID, "sandbox", sess.SandboxID,
		"from", start, "recorded", prior.Out+prior.Lost)
	return nil
}

// resumeRecording opens the recording at path again, after a marker
// saying why; fresh: it is not in this server's data directory, so it is
// begun anew there (a header, the marker, then what the agent still holds).
func (s *Service) resumeRecording(path string, fresh bool, prior *recorded, sess Session, lim RecorderLimits, note string) (*Recorder, error) {
	if !fresh {
		f, err := openResumed(path, prior)
		if err != nil {
			return nil, err
		}
		return resumeRecorder(f, *prior, sess.StartedAt, s.cfg.Clock.Now, s.cfg.SpoolEvents, lim, note), nil
	}
	f, err := createRecording(path)
	if err != nil {
		return nil, err
	}
	rec, err := NewLimitedRecorder(f, CastHeader{Width: sess.Cols, Height: sess.Rows, Timestamp: sess.StartedAt.Unix(),
		Title: "sandbox " + sess.SandboxID, Env: castEnv(s.cfg.Env)}, sess.StartedAt, s.cfg.Clock.Now, s.cfg.SpoolEvents, lim)
	if err != nil {
		f.Close()
		return nil, err
	}
	rec.send(CastMarker, []byte(note))
	return rec, nil
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
