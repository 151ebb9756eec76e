package mcp

import (
	"context"
	"strconv"

	"github.com/stockade-dev/stockade/sandbox"
)

// PortURLIn is get_port_url's input.
type PortURLIn struct {
	SandboxRef
	Port int `json:"port" jsonschema:"the TCP port a server in the sandbox listens on, 1 to 65535"`
}

// PortURLOut is where a sandbox port is reached.
type PortURLOut struct {
	URL string `json:"url" jsonschema:"the port's URL through the control plane; it takes the tenant's session or API token (Authorization: Bearer)"`
}

// getPortURL answers what GET /api/v1/sandboxes/{id}/ports/{port} does,
// after the same checks: the tenant's sandbox (another's is not found),
// then the port.
func (s *Server) getPortURL(ctx context.Context, c *caller, in PortURLIn) (PortURLOut, error) {
	if err := in.check(); err != nil {
		return PortURLOut{}, err
	}
	sb, err := s.sbx.Get(ctx, c.tenantID, in.SandboxID)
	if err != nil {
		return PortURLOut{}, err
	}
	port, err := sandbox.ParsePort(strconv.Itoa(in.Port))
	if err != nil {
		return PortURLOut{}, err
	}
	return PortURLOut{URL: s.publicURL + "/api/v1/sandboxes/" + sb.ID + "/ports/" + strconv.Itoa(port) + "/"}, nil
}
