package agent

import (
	"fmt"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// SetLifetime gives a running sandbox req.Seconds more to live, from now,
// replacing its lifetime (OpSandboxLifetime): its supervisor stops it
// (reason "timeout") when they pass.
func (m *Manager) SetLifetime(id string, req *agentproto.LifetimeRequest) error {
	if req == nil || req.Seconds < 1 || req.Seconds > agentproto.MaxLifetimeSeconds {
		return fmt.Errorf("sandbox.lifetime: seconds must be 1 to %d: %w", agentproto.MaxLifetimeSeconds, agentproto.ErrBadRequest)
	}
	sb, err := m.get(id)
	if err != nil {
		return fmt.Errorf("sandbox.lifetime: %w", err)
	}
	sb.mu.Lock()
	state := sb.state
	sb.mu.Unlock()
	if state != agentproto.SandboxRunning || sb.relife == nil {
		return fmt.Errorf("sandbox.lifetime %s: it is %s: %w", id, state, agentproto.ErrConflict)
	}
	d := time.Duration(req.Seconds) * time.Second
	// The latest wins: an unread earlier one is replaced.
	for {
		select {
		case sb.relife <- d:
			m.log.Info("sandbox lifetime set", "sandbox", id, "seconds", req.Seconds)
			return nil
		default:
		}
		select {
		case <-sb.relife:
		default:
		}
	}
}
