package agentproto

import (
	"context"
	"fmt"
)

// PauseSandbox freezes a running sandbox: its processes stop where they
// are and keep their memory and files. It returns once the kernel reports
// the sandbox frozen. ErrConflict when it is paused already or not running;
// ErrNotFound when the agent has no such sandbox.
func (c *Client) PauseSandbox(ctx context.Context, id string) (SandboxInfo, error) {
	return c.pauseOp(ctx, OpSandboxPause, id)
}

// ResumeSandbox thaws a paused sandbox. ErrConflict when it is not paused.
func (c *Client) ResumeSandbox(ctx context.Context, id string) (SandboxInfo, error) {
	return c.pauseOp(ctx, OpSandboxResume, id)
}

func (c *Client) pauseOp(ctx context.Context, op Op, id string) (SandboxInfo, error) {
	if err := c.supports(op); err != nil {
		return SandboxInfo{}, err
	}
	resp, err := c.call(ctx, Request{V: Version, Op: op, SandboxID: id})
	if err != nil {
		return SandboxInfo{}, fmt.Errorf("%s %s: %w", op, id, err)
	}
	if resp.Sandbox == nil {
		return SandboxInfo{}, fmt.Errorf("%s %s: no sandbox in response: %w", op, id, ErrProtocol)
	}
	return *resp.Sandbox, nil
}
