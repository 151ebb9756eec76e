package agentproto

import (
	"context"
	"fmt"
)

// PortDialRequest asks the agent for a connection to 127.0.0.1:Port inside
// a sandbox's network namespace (OpPortDial).
type PortDialRequest struct {
	Sandbox string `json:"sandbox"`
	Port    int    `json:"port"`
}

// CheckPort fails with ErrBadRequest unless port is a TCP port (1..65535).
func CheckPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %d: must be 1 to 65535: %w", port, ErrBadRequest)
	}
	return nil
}

// DialPort connects to 127.0.0.1:port inside the sandbox's network
// namespace and returns the connection's bytes, framed over one stream
// (CloseWrite half-closes it). ErrNotFound when nothing listens there,
// ErrConflict when the sandbox is not running. ctx bounds the dial only.
func (c *Client) DialPort(ctx context.Context, sandboxID string, port int) (*EgressConn, error) {
	if err := CheckPort(port); err != nil {
		return nil, err
	}
	st, _, err := c.open(ctx, Request{V: Version, Op: OpPortDial, PortDial: &PortDialRequest{Sandbox: sandboxID, Port: port}})
	if err != nil {
		return nil, fmt.Errorf("dial port %d of %s: %w", port, sandboxID, err)
	}
	return NewEgressConn(st), nil
}
