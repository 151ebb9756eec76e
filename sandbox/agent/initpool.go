package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Commands reuse connections to their sandbox's init: a connect, an
// accept and a goroutine in init per command cost more under TCG than the
// command itself. A spawn asks init to keep the connection
// (spawnRequest.Reuse); when the exit says init will (initExit.Reuse), the
// connection goes back to the sandbox's pool for the next command. Pooled
// connections are closed after initConnIdle unused, so an idle sandbox's
// init holds no connection of ours but the hello one (an idle init may go
// to sleep: sandboxinit idle.go). Either side may close a pooled
// connection: a spawn that finds its reused connection closed dials anew,
// once.

const (
	// initConnIdle is how long a pooled connection waits for a command.
	initConnIdle = 2 * time.Second
	// maxPooledInitConns bounds the idle connections of one sandbox
	// (commands running at once each hold their own).
	maxPooledInitConns = 4
)

// initPool is a sandbox's idle connections to its init.
type initPool struct {
	mu    sync.Mutex
	idle  []pooledConn // the most recently used last
	timer *time.Timer  // closes connections idle past initConnIdle
}

type pooledConn struct {
	c     *net.UnixConn
	since time.Time
}

// take returns the most recently used idle connection that is still
// open, or nil.
func (p *initPool) take() *net.UnixConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.idle) > 0 {
		pc := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if connOpen(pc.c) {
			return pc.c
		}
		pc.c.Close()
	}
	return nil
}

// put gives c back for another command.
func (p *initPool) put(c *net.UnixConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) >= maxPooledInitConns {
		c.Close()
		return
	}
	p.idle = append(p.idle, pooledConn{c: c, since: time.Now()})
	if p.timer == nil {
		p.timer = time.AfterFunc(initConnIdle, p.expire)
	}
}

// expire closes the connections idle for initConnIdle and waits for the
// next one to be.
func (p *initPool) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	keep := p.idle[:0]
	for _, pc := range p.idle {
		if now.Sub(pc.since) >= initConnIdle {
			pc.c.Close()
			continue
		}
		keep = append(keep, pc)
	}
	clear(p.idle[len(keep):])
	p.idle = keep
	if len(p.idle) == 0 {
		p.timer = nil
		return
	}
	p.timer.Reset(p.idle[0].since.Add(initConnIdle).Sub(now))
}

// closeAll closes every idle connection (the sandbox stopped).
func (p *initPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.idle {
		pc.c.Close()
	}
	p.idle = nil
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
}

// connOpen reports whether an idle connection is still usable: between
// commands init sends nothing, so anything to read is its end (EOF).
func connOpen(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		open = err == nil && n == 0
	})
	return open
}

// initConn is a connection to sb's init for one request: a pooled one
// (reused true) or a new one.
func (m *Manager) initConn(ctx context.Context, sb *sandbox) (c *net.UnixConn, reused bool, err error) {
	if c := sb.inits.take(); c != nil {
		return c, true, nil
	}
	c, err = dialInit(ctx, sb)
	return c, false, err
}

// connGone reports whether err says the peer closed the connection before
// it read the request: a pooled connection init closed while idle.
func connGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, errInitEOF)
}
