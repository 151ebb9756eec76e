package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Ports (ports.go)
//
// The host reaches a port a sandbox listens on by OpPortDial: the agent
// makes a socket in the sandbox's network namespace (socketInNetns),
// connects it to 127.0.0.1:port there and pipes its bytes over the stream,
// framed as on OpEgress. The sandbox decides nothing about it and sees a
// connection from its own loopback.

// portIdle ends a port connection on which no byte moved either way for
// this long, so a forgotten tunnel does not hold a stream forever.
const portIdle = 10 * time.Minute

// servePortDial serves one OpPortDial stream: see agentproto.OpPortDial.
func (m *Manager) servePortDial(st net.Conn, req *agentproto.PortDialRequest) {
	fail := func(err error) {
		agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version, Error: agentproto.ErrorFor(err)})
	}
	if req == nil {
		fail(fmt.Errorf("port.dial without its body: %w", agentproto.ErrBadRequest))
		return
	}
	if err := agentproto.CheckPort(req.Port); err != nil {
		fail(fmt.Errorf("port.dial: %w", err))
		return
	}
	sb, err := m.get(req.Sandbox)
	if err != nil {
		fail(fmt.Errorf("port.dial: %w", err))
		return
	}
	if err := sb.begin(); err != nil {
		fail(fmt.Errorf("port.dial: %w", err))
		return
	}
	defer sb.end()
	sb.mu.Lock()
	pid := sb.initPID
	sb.mu.Unlock()
	c, err := dialInNetns(pid, req.Port)
	if err != nil {
		fail(fmt.Errorf("port.dial: %w", err))
		return
	}
	defer c.Close()
	if err := agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version}); err != nil {
		return
	}
	pc := agentproto.NewEgressConn(st)
	stop := context.AfterFunc(sandboxContext(sb), func() { c.Close(); st.Close() })
	defer stop()
	pipeIdle(c.(*net.TCPConn), pc, portIdle)
}

// dialInNetns connects to 127.0.0.1:port in the network namespace of pid.
// A connect on loopback completes or fails at once, so it blocks briefly.
func dialInNetns(pid, port int) (net.Conn, error) {
	fd, err := socketInNetns(pid, unix.AF_INET, unix.SOCK_STREAM)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.ECONNREFUSED) {
			return nil, fmt.Errorf("nothing listens on port %d in the sandbox: %w", port, agentproto.ErrNotFound)
		}
		return nil, fmt.Errorf("connect to port %d: %w", port, err)
	}
	f := os.NewFile(uintptr(fd), "port")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("port %d: %w", port, err)
	}
	return c, nil
}

// idleConn pushes a deadline idle ahead on every read and write.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c idleConn) Read(p []byte) (int, error) {
	c.Conn.SetDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(p)
}

func (c idleConn) Write(p []byte) (int, error) {
	c.Conn.SetDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(p)
}

// pipeIdle copies both ways between the sandbox's connection c and the
// host's framed stream pc, half-closing each direction at its end; idle
// without a byte on c ends it.
func pipeIdle(c *net.TCPConn, pc *agentproto.EgressConn, idle time.Duration) {
	ic := idleConn{Conn: c, idle: idle}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := io.Copy(pc, ic); err == nil {
			pc.CloseWrite()
		} else {
			pc.Close()
		}
	}()
	if _, err := io.Copy(ic, pc); err == nil {
		c.CloseWrite()
	} else {
		c.Close()
		pc.Close()
	}
	<-done
}
