package agent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Pausing a sandbox freezes its cgroup (cgroup v2 freezer): every process
// stops where it is, keeping its memory, files and open descriptors, and
// uses no CPU until the sandbox is resumed. While paused, the sandbox's
// lifetime and idle timers do not run (supervise credits the time paused
// back to the lifetime; an idle check sees a paused sandbox as busy), and
// execs and file operations answer conflict. Destroy works: stop thaws the
// cgroup before it kills it.

// pauseOps are the ops of this file.
func pauseOps() []agentproto.Op {
	return []agentproto.Op{agentproto.OpSandboxPause, agentproto.OpSandboxResume}
}

// freezeWait bounds how long the kernel may take to report a cgroup
// frozen or thawed.
const freezeWait = 20 * time.Second

// pauseState is a sandbox's freezer state, guarded by sandbox.mu.
type pauseState struct {
	paused   bool
	pausedAt time.Time
	// credit is time paused that supervise has not yet added to the
	// lifetime.
	credit time.Duration
}

// servePause answers OpSandboxPause and OpSandboxResume.
func (s *Server) servePause(ctx context.Context, st net.Conn, req agentproto.Request) {
	m := s.cfg.Sandboxes
	if m == nil {
		s.reply(st, agentproto.Response{Error: agentproto.ErrorFor(fmt.Errorf("op %s: %w", req.Op, agentproto.ErrNotImplemented))})
		return
	}
	info, err := m.setPaused(ctx, req.SandboxID, req.Op == agentproto.OpSandboxPause)
	if err != nil {
		s.reply(st, agentproto.Response{Error: agentproto.ErrorFor(err)})
		return
	}
	s.reply(st, agentproto.Response{Sandbox: &info})
}

// setPaused freezes (pause) or thaws the sandbox's cgroup and waits until
// the kernel reports it done.
func (m *Manager) setPaused(ctx context.Context, id string, pause bool) (agentproto.SandboxInfo, error) {
	op := "resume"
	if pause {
		op = "pause"
	}
	sb, err := m.get(id)
	if err != nil {
		return agentproto.SandboxInfo{}, fmt.Errorf("%s sandbox: %w", op, err)
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	switch {
	case sb.state != agentproto.SandboxRunning:
		return agentproto.SandboxInfo{}, fmt.Errorf("%s sandbox %s: it is %s: %w", op, id, sb.state, agentproto.ErrConflict)
	case pause && sb.pause.paused:
		return agentproto.SandboxInfo{}, fmt.Errorf("pause sandbox %s: it is paused already: %w", id, agentproto.ErrConflict)
	case !pause && !sb.pause.paused:
		return agentproto.SandboxInfo{}, fmt.Errorf("resume sandbox %s: it is not paused: %w", id, agentproto.ErrConflict)
	}
	ctx, cancel := context.WithTimeout(ctx, freezeWait)
	defer cancel()
	if err := freezeCgroup(ctx, sb.cgroup, pause); err != nil {
		if pause {
			_ = freezeCgroup(context.WithoutCancel(ctx), sb.cgroup, false) // half-frozen: back to running
		}
		return agentproto.SandboxInfo{}, fmt.Errorf("%s sandbox %s: %w", op, id, err)
	}
	now := time.Now()
	if pause {
		sb.pause.paused, sb.pause.pausedAt = true, now
	} else {
		sb.pause.paused = false
		sb.pause.credit += now.Sub(sb.pause.pausedAt)
		sb.lastActive = now // the idle clock starts again at the resume
	}
	m.log.Info("sandbox "+op+"d", "sandbox", id)
	return sb.infoLocked(), nil
}

// freezeCgroup writes cgroup.freeze and waits for cgroup.events to say
// frozen (or thawed).
func freezeCgroup(ctx context.Context, dir string, freeze bool) error {
	want, v := uint64(0), "0"
	if freeze {
		want, v = 1, "1"
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte(v), 0); err != nil {
		return fmt.Errorf("freeze cgroup %s: %w", dir, err)
	}
	for delay := 200 * time.Microsecond; ; delay = min(delay*2, 20*time.Millisecond) {
		kv, err := readKeyed(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return fmt.Errorf("freeze cgroup %s: %w", dir, err)
		}
		if kv["frozen"] == want {
			return nil
		}
		if !sleepCtx(ctx, delay) {
			return fmt.Errorf("freeze cgroup %s to %s: %w", dir, v, ctx.Err())
		}
	}
}

// thawForStop thaws a paused sandbox that is being stopped, so its
// processes can take their kill and its teardown runs as for any other.
func (m *Manager) thawForStop(sb *sandbox) {
	sb.mu.Lock()
	paused := sb.pause.paused
	sb.pause.paused = false
	sb.mu.Unlock()
	if !paused {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), freezeWait)
	defer cancel()
	if err := freezeCgroup(ctx, sb.cgroup, false); err != nil {
		m.log.Warn("stop sandbox: thaw it", "sandbox", sb.id, "err", err)
	}
}

// lifetimeCredit is how much longer the lifetime timer must run when it
// fires: the time the sandbox spent paused since it was last asked (while
// it is paused, at least a second: it is looked at again then).
func (sb *sandbox) lifetimeCredit(now time.Time) time.Duration {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	d := sb.pause.credit
	sb.pause.credit = 0
	if sb.pause.paused {
		d += now.Sub(sb.pause.pausedAt)
		sb.pause.pausedAt = now
		d = max(d, time.Second)
	}
	return d
}
