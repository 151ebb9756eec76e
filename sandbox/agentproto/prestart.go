package agentproto

import (
	"context"
	"fmt"
)

// OpSandboxPrestart configures the agent's pool of pre-started sandboxes
// (sandboxes started from a template but given to no one: no env, no
// secrets, no CA, no workspace content, no volumes): Request.Prestart;
// Response.Prestart (the pools after the change). A sandbox.create whose
// spec the pool can take at claim time claims one of them instead of
// starting a new sandbox (SandboxInfo.Prestarted). Pool members count
// against the guest's sandbox cap and are evicted first when a create needs
// the room; they are never listed by sandbox.list.
const OpSandboxPrestart Op = "sandbox.prestart"

// MaxPrestartPerTemplate bounds PrestartConfig.PerTemplate.
const MaxPrestartPerTemplate = 8

// MaxPrestartTemplates bounds PrestartConfig.Templates.
const MaxPrestartTemplates = 32

// PrestartConfig is the pool the host wants (OpSandboxPrestart).
type PrestartConfig struct {
	// Query leaves the pool as it is and only reports it.
	Query bool `json:"query,omitempty"`
	// PerTemplate is how many sandboxes of each pooled template the agent
	// keeps started: 0 disables the pool (and empties it), at most
	// MaxPrestartPerTemplate.
	PerTemplate int `json:"per_template"`
	// Templates are pooled from now on; templates a create uses join them.
	Templates []string `json:"templates,omitempty"`
}

// PrestartStatus is the agent's pool.
type PrestartStatus struct {
	PerTemplate int            `json:"per_template"`
	Pools       []PrestartPool `json:"pools"`
	// Claimed counts the creates served from the pool since the agent started.
	Claimed int `json:"claimed"`
}

// PrestartPool is the pool of one template.
type PrestartPool struct {
	Template string `json:"template"`
	// Ready members can be claimed; Starting ones are being started.
	Ready    int `json:"ready"`
	Starting int `json:"starting"`
}

// Pool returns the pool of template (zero when it has none).
func (s PrestartStatus) Pool(template string) PrestartPool {
	for _, p := range s.Pools {
		if p.Template == template {
			return p
		}
	}
	return PrestartPool{Template: template}
}

// ConfigurePrestart sets the agent's pool of pre-started sandboxes (see
// OpSandboxPrestart) and returns it. ErrNotImplemented from an agent that
// has none.
func (c *Client) ConfigurePrestart(ctx context.Context, cfg PrestartConfig) (PrestartStatus, error) {
	if err := c.supports(OpSandboxPrestart); err != nil {
		return PrestartStatus{}, err
	}
	resp, err := c.call(ctx, Request{V: Version, Op: OpSandboxPrestart, Prestart: &cfg})
	if err != nil {
		return PrestartStatus{}, fmt.Errorf("configure pre-started sandboxes: %w", err)
	}
	if resp.Prestart == nil {
		return PrestartStatus{}, fmt.Errorf("configure pre-started sandboxes: no pool in response: %w", ErrProtocol)
	}
	return *resp.Prestart, nil
}
