package vmpool

import (
	"context"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// agentReadyTimeout bounds Config.AgentReady.
const agentReadyTimeout = 30 * time.Second

// agentReady runs Config.AgentReady for a VM this service booted, once its
// agent is ready, in the background: it configures the guest (its pool of
// pre-started sandboxes, sandbox/prestart.go) without holding up the VM.
func (s *Service) agentReady(vm VM, c *agentproto.Client) {
	if s.cfg.AgentReady == nil {
		return
	}
	go func() {
		ctx, cancel := s.stop.WithTimeout(context.Background(), agentReadyTimeout)
		defer cancel()
		s.cfg.AgentReady(ctx, vm, c)
	}()
}
