package sandbox

import (
	"context"
	"errors"
	"log/slog"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// Pre-started sandboxes (the host's side; the agent's is
// sandbox/agent/prestart.go): every VM's agent keeps PerTemplate sandboxes
// of each pooled template started but given to no one, and a create whose
// spec it can apply at claim time (anything without volumes) claims one.
// The host configures the pool after each boot's handshake
// (vmpool.Config.AgentReady) and learns from SandboxInfo.Prestarted whether
// a create was served from it. Metering is unchanged: a sandbox's meter
// starts when the host records it running, which for a claimed one is the
// claim.

// DefaultPrestartPerTemplate is STOCKADE_PRESTART_PER_TEMPLATE's default.
const DefaultPrestartPerTemplate = 1

// PrestartConfig is the pool every VM gets.
type PrestartConfig struct {
	// PerTemplate is how many sandboxes of each pooled template a VM keeps
	// started (at most agentproto.MaxPrestartPerTemplate); 0 disables.
	PerTemplate int
	// Templates are pooled from boot (the default template, typically);
	// every built-in template a create uses in the VM joins them.
	Templates []string
}

// PrestartHook is the vmpool.Config.AgentReady that configures each booted
// VM's pool; cfg is read at each boot. An agent without the op (an older
// guest image) is left as it is.
func PrestartHook(log *slog.Logger, cfg func() PrestartConfig) func(ctx context.Context, vm vmpool.VM, c *agentproto.Client) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, vm vmpool.VM, c *agentproto.Client) {
		pc := cfg()
		if pc.PerTemplate <= 0 {
			return
		}
		st, err := c.ConfigurePrestart(ctx, agentproto.PrestartConfig{PerTemplate: pc.PerTemplate, Templates: pc.Templates})
		switch {
		case errors.Is(err, agentproto.ErrNotImplemented):
			log.Info("vm has no pre-started sandboxes: its agent does not offer them", "vm", vm.ID)
		case err != nil:
			log.Warn("configure pre-started sandboxes", "vm", vm.ID, "err", err)
		default:
			log.Info("pre-started sandboxes configured", "vm", vm.ID, "per_template", st.PerTemplate, "templates", pc.Templates)
		}
	}
}

// PrestartTemplates are the templates every VM pools from boot: the
// default one.
func (s *Service) PrestartTemplates() []string { return []string{s.cfg.DefaultTemplate} }

// claimedEvent is the audit event of a create the agent served from its
// pool (nil for a fresh one), written as the sandbox starts running.
func claimedEvent(sb Sandbox, info agentproto.SandboxInfo) *audit.Event {
	if !info.Prestarted {
		return nil
	}
	ev := SystemActor().Event(sb.TenantID, audit.TypeSandboxPrestartClaimed, "sandbox", sb.ID,
		map[string]any{"vm": sb.VMID, "claim_ms": info.Startup.Ready.Milliseconds()})
	return &ev
}
