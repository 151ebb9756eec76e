package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/usage"
)

// Pausing a sandbox freezes its cgroup in the guest: its processes stop
// where they are, keep their memory and files, and use no CPU until it is
// resumed. The record is the truth: sandboxes.paused_at says the sandbox is
// paused, and the usage meter moves into (out of) its paused state in the
// same transaction, so billing survives a restart with the state. While
// paused:
//   - the sandbox is billed memory but no vCPU-seconds (usage.SetPaused);
//   - its lifetime clock stops: expires_at moves on by the time paused at
//     the resume, the sync loop does not expire it, and the agent's own
//     lifetime and idle timers stop too;
//   - exec, files and terminals answer ErrConflict (msgPaused); destroy
//     works (the agent thaws it, then kills it).
// After a restart the sync loop compares each running sandbox's record with
// the agent's report (SandboxInfo.Paused) and, where they differ, makes the
// guest match the record (reapplyPause): a guest cannot pause itself out of
// its vCPU bill by claiming to be frozen.

// msgPaused is the conflict of an operation on a paused sandbox.
const msgPaused = "the sandbox is paused; resume it"

// Paused tells whether the sandbox runs but is paused.
func (s Sandbox) Paused() bool { return s.State == StateRunning && s.PausedAt != nil }

// Pause freezes the tenant's running sandbox; it is audited sandbox.paused.
// Another tenant's sandbox is ErrNotFound; one paused already, or not
// running, ErrConflict; with its agent out of reach vmpool.ErrUnavailable,
// and nothing changes.
func (s *Service) Pause(ctx context.Context, actor audit.Actor, tenantID, id string) (Sandbox, error) {
	return s.setPaused(ctx, actor, tenantID, id, true)
}

// Resume thaws the tenant's paused sandbox; it is audited sandbox.resumed.
// Its lifetime is extended by the time it was paused. One not paused is
// ErrConflict.
func (s *Service) Resume(ctx context.Context, actor audit.Actor, tenantID, id string) (Sandbox, error) {
	return s.setPaused(ctx, actor, tenantID, id, false)
}

// pauseLock serialises the tenant's pauses, resumes and their re-applying
// by the sync loop: the record read under it and the guest's state agree
// (no pause is half done).
func (s *Service) pauseLock(tenantID string) *sync.Mutex { return lockOf(&s.mu, s.pauseMu, tenantID) }

func (s *Service) setPaused(ctx context.Context, actor audit.Actor, tenantID, id string, pause bool) (Sandbox, error) {
	op := pauseOp(pause)
	l := s.pauseLock(tenantID)
	l.Lock()
	defer l.Unlock()
	sb, err := s.store.Sandbox(ctx, tenantID, id)
	if err != nil {
		return Sandbox{}, err
	}
	if err := s.unavailable(op); err != nil {
		return Sandbox{}, err
	}
	switch {
	case sb.State != StateRunning:
		return Sandbox{}, fmt.Errorf("%s %s: %w: it is %s", op, id, errdefs.ErrConflict, sb.State)
	case pause && sb.Paused():
		return Sandbox{}, fmt.Errorf("%s %s: %w: it is paused already", op, id, errdefs.ErrConflict)
	case !pause && !sb.Paused():
		return Sandbox{}, fmt.Errorf("%s %s: %w: it is not paused", op, id, errdefs.ErrConflict)
	}
	if err := s.applyPause(ctx, sb, pause); err != nil {
		return Sandbox{}, err
	}
	out, err := s.recordPause(context.WithoutCancel(ctx), sb, actor, pause, nil)
	if err != nil {
		// The guest must not stay in a state the record does not hold.
		if undo := s.applyPause(context.WithoutCancel(ctx), sb, !pause); undo != nil {
			s.log.Warn(op+": undo in the guest", "sandbox", id, "err", undo)
		}
		return Sandbox{}, err
	}
	s.log.Info("sandbox "+op+"d", "sandbox", id, "tenant", tenantID)
	return out, nil
}

func pauseOp(pause bool) string {
	if pause {
		return "pause sandbox"
	}
	return "resume sandbox"
}

// applyPause freezes (thaws) the sandbox in its guest. A guest already in
// that state is fine.
func (s *Service) applyPause(ctx context.Context, sb Sandbox, pause bool) error {
	op := pauseOp(pause)
	c, err := s.vms.Agent(ctx, sb.TenantID, sb.VMID)
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, sb.ID, err)
	}
	var info agentproto.SandboxInfo
	if pause {
		info, err = c.PauseSandbox(ctx, sb.ID)
	} else {
		info, err = c.ResumeSandbox(ctx, sb.ID)
	}
	if errors.Is(err, agentproto.ErrConflict) {
		// Already so, or not running: which one, the list says.
		list, lerr := c.ListSandboxes(ctx)
		if lerr == nil {
			for _, a := range list.Sandboxes {
				if a.ID == sb.ID && a.State == agentproto.SandboxRunning && a.Paused == pause {
					return nil
				}
			}
		}
		return agentErr(op+" "+sb.ID, err)
	}
	if err != nil {
		return agentErr(op+" "+sb.ID, err)
	}
	if info.Paused != pause {
		return fmt.Errorf("%s %s: the agent answered paused=%v: %w", op, sb.ID, info.Paused, agentproto.ErrProtocol)
	}
	return nil
}

// recordPause records the pause (resume) of a running sandbox and moves its
// meter with it, in one transaction, audited as actor's with details.
func (s *Service) recordPause(ctx context.Context, sb Sandbox, actor audit.Actor, pause bool, details map[string]any) (Sandbox, error) {
	op := pauseOp(pause)
	now := s.store.now()
	typ := audit.TypeSandboxResumed
	if pause {
		typ = audit.TypeSandboxPaused
	}
	err := s.store.tx(ctx, func(tx *gorm.DB) error {
		var cur Sandbox
		if err := tx.Take(&cur, "id = ? AND tenant_id = ?", sb.ID, sb.TenantID).Error; err != nil {
			return fmt.Errorf("%s %s: %w", op, sb.ID, notFound(err))
		}
		if cur.State != StateRunning || cur.Paused() == pause {
			return fmt.Errorf("%s %s: %w: it changed meanwhile (%s, paused %v)", op, sb.ID, errdefs.ErrConflict, cur.State, cur.Paused())
		}
		set := map[string]any{"paused_at": nil}
		if pause {
			set["paused_at"] = now
		} else if cur.PausedAt != nil {
			// The lifetime clock did not run while it was paused.
			set["expires_at"] = cur.ExpiresAt.Add(max(now.Sub(*cur.PausedAt), 0))
		}
		res := tx.Model(&Sandbox{}).Where("id = ? AND state = ?", sb.ID, StateRunning).Updates(set)
		if res.Error != nil {
			return fmt.Errorf("%s %s: %w", op, sb.ID, res.Error)
		}
		if err := usage.SetPaused(tx, sb.ID, now, pause); err != nil {
			return err
		}
		return s.store.audit(tx, actor.Event(sb.TenantID, typ, "sandbox", sb.ID, details))
	})
	if err != nil {
		return Sandbox{}, err
	}
	return s.store.Sandbox(ctx, sb.TenantID, sb.ID)
}

// reapplyPause makes the guest match the record where the agent's report of
// a running sandbox differs from it (a restart between the guest's change
// and the record's, or a guest that says what is not so): the record wins.
//
// The list the sync read may be older than a pause or resume that finished
// since, so the record is read again under the pause lock, and what it
// says is applied (a guest already so is left as it is).
func (s *Service) reapplyPause(ctx context.Context, sb Sandbox, a agentproto.SandboxInfo) {
	l := s.pauseLock(sb.TenantID)
	l.Lock()
	defer l.Unlock()
	cur, err := s.store.Sandbox(ctx, sb.TenantID, sb.ID)
	if err != nil || cur.State != StateRunning {
		return
	}
	want := cur.Paused()
	if want == sb.Paused() {
		s.log.Warn("the agent reports a sandbox's pause unlike its record: re-applying the record",
			"sandbox", sb.ID, "agent_paused", a.Paused, "recorded_paused", want)
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.applyPause(actx, cur, want); err != nil {
		s.log.Warn("re-apply a sandbox's pause", "sandbox", sb.ID, "err", err)
	}
}
