package app

import (
	"context"
	"log/slog"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
)

// prestartHook configures each booted VM's pre-started sandboxes: the
// deployment's number per template, the default template pooled from boot
// (the sandbox service is made after the VM pools, hence read at each boot).
func (a *App) prestartHook(cfg Config, log *slog.Logger) func(ctx context.Context, vm vmpool.VM, c *agentproto.Client) {
	return sandbox.PrestartHook(log, func() sandbox.PrestartConfig {
		pc := sandbox.PrestartConfig{PerTemplate: cfg.PrestartPerTemplate}
		if a.Sandboxes != nil {
			pc.Templates = a.Sandboxes.PrestartTemplates()
		}
		return pc
	})
}
