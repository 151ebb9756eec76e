package sandbox

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Ports (ports.go)
//
// A process listening on 127.0.0.1:<port> inside a sandbox is reached by a
// tunnel: one OpPortDial stream over the VM's agent channel, which the agent
// connects to that port inside the sandbox's network namespace. The VM has
// no NIC; nothing listens on the host for it. The web layer puts an HTTP
// reverse proxy on top (handlers/ports.go).

// MaxPortTunnels bounds the tunnels one sandbox has open through this
// server at once; past it DialPort is a *errdefs.QuotaError
// (max_port_tunnels).
const MaxPortTunnels = 64

// CheckPort fails with a FieldError on "port" unless port is 1..65535.
func CheckPort(port int) error {
	if port < 1 || port > 65535 {
		return errdefs.Invalid("port", "port_range", "must be a TCP port, 1 to 65535")
	}
	return nil
}

// ParsePort reads a port from a path segment: CheckPort's FieldError on
// anything but a number 1..65535.
func ParsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || len(s) > 5 {
		return 0, errdefs.Invalid("port", "port_range", "must be a TCP port, 1 to 65535")
	}
	return n, CheckPort(n)
}

// PortConn is one tunnel to a sandbox port. Close releases its slot; In and
// Out count the bytes that went to and came from the sandbox.
type PortConn struct {
	*agentproto.EgressConn
	in, out atomic.Int64
	release func()
	once    sync.Once
}

// Read counts what the sandbox sent.
func (p *PortConn) Read(b []byte) (int, error) {
	n, err := p.EgressConn.Read(b)
	p.out.Add(int64(n))
	return n, err
}

// Write counts what goes to the sandbox.
func (p *PortConn) Write(b []byte) (int, error) {
	n, err := p.EgressConn.Write(b)
	p.in.Add(int64(n))
	return n, err
}

// Close ends the tunnel and frees its slot.
func (p *PortConn) Close() error {
	err := p.EgressConn.Close()
	p.once.Do(p.release)
	return err
}

// Bytes returns what went to the sandbox (in) and came back (out).
func (p *PortConn) Bytes() (in, out int64) { return p.in.Load(), p.out.Load() }

// DialPort opens a tunnel to 127.0.0.1:port inside the tenant's running
// sandbox. Another tenant's sandbox is errdefs.ErrNotFound; a bad port a
// FieldError on "port"; a sandbox that is not running ErrConflict; nothing
// listening on the port ErrNotFound (with a message saying so); too many
// tunnels a QuotaError. ctx bounds the dial, not the tunnel.
func (s *Service) DialPort(ctx context.Context, tenantID, id string, port int) (*PortConn, error) {
	// The sandbox first: another tenant's is not found whatever the port.
	if _, err := s.store.Sandbox(ctx, tenantID, id); err != nil {
		return nil, err
	}
	if err := CheckPort(port); err != nil {
		return nil, err
	}
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return nil, err
	}
	release, err := s.takeTunnel(sb.ID)
	if err != nil {
		return nil, err
	}
	ec, err := c.DialPort(ctx, sb.ID, port)
	if err != nil {
		release()
		return nil, agentErr("port "+strconv.Itoa(port), err)
	}
	_ = s.store.touch(context.WithoutCancel(ctx), sb.ID)
	return &PortConn{EgressConn: ec, release: release}, nil
}

// takeTunnel counts one more open tunnel of the sandbox, refusing past
// MaxPortTunnels.
func (s *Service) takeTunnel(id string) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tunnels == nil {
		s.tunnels = map[string]int{}
	}
	if s.tunnels[id] >= MaxPortTunnels {
		return nil, &errdefs.QuotaError{Quota: "max_port_tunnels", Limit: MaxPortTunnels, Want: s.tunnels[id] + 1}
	}
	s.tunnels[id]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.tunnels[id]--; s.tunnels[id] <= 0 {
			delete(s.tunnels, id)
		}
	}, nil
}

// OpenTunnels returns how many port tunnels of the sandbox are open
// through this server (tests check nothing leaks).
func (s *Service) OpenTunnels(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tunnels[id]
}
