package agentproto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/yamux"
)

// ClientOptions configures Dial.
type ClientOptions struct {
	// Name identifies the host software in hello, for the agent's log.
	Name string
	// Logger receives the client's own events; nil discards them.
	Logger *slog.Logger
	// KeepAliveInterval is how often yamux pings the agent; 0 means 15 s.
	// A missed ping closes the session (Done fires).
	KeepAliveInterval time.Duration
	// Egress serves the connections sandboxes make through the agent's
	// proxy listener; nil refuses them.
	Egress EgressHandler
	// ExecGrace is how long the agent keeps execs with an id alive after
	// this session ends, for a new session to re-attach them (OpExecAttach);
	// 0 means DefaultExecGrace. Whole seconds.
	ExecGrace time.Duration
}

// Client is the host end of one agent session.
type Client struct {
	link  *hostLink
	sess  *yamux.Session
	hello Hello
	log   *slog.Logger
}

// refuseTimeout bounds how long the host spends on a stream the agent opened
// that the host does not serve yet.
const refuseTimeout = 2 * time.Second

// Dial starts a session over conn (the VM's agent channel) and performs the
// hello handshake. conn is closed by Close, or by Dial when it fails.
// ctx bounds the handshake only.
func Dial(ctx context.Context, conn io.ReadWriteCloser, opts ClientOptions) (*Client, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.MaxStreamWindowSize = StreamWindow
	// Streams the agent opens wait here; beyond the backlog yamux resets them.
	cfg.AcceptBacklog = 32
	keepAlive := 15 * time.Second
	if opts.KeepAliveInterval > 0 {
		keepAlive = opts.KeepAliveInterval
	}
	// yamux's own keepalive starts with the session and gives up 25 s in
	// when the guest has not answered a ping: a guest still booting (a slow
	// TCG boot on a loaded host) would lose its handshake. Pings start once
	// the agent said hello (keepAlive below); the hello is bounded by ctx.
	cfg.EnableKeepAlive = false
	link, err := newHostLink(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent session: %w", err)
	}
	sess, err := yamux.Client(joinConn(link), cfg)
	if err != nil {
		link.Close()
		return nil, fmt.Errorf("agent session: %w", err)
	}
	c := &Client{link: link, sess: sess, log: log}
	go c.acceptIncoming(opts.Egress)

	resp, err := c.call(ctx, Request{
		V: Version, Op: OpHello,
		Hello: &HelloRequest{MinVersion: MinVersion, MaxVersion: Version, Client: opts.Name,
			ExecGraceSeconds: int(opts.ExecGrace / time.Second)},
	})
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("agent hello: %w", err)
	}
	if resp.Hello == nil {
		sess.Close()
		return nil, fmt.Errorf("agent hello: no hello in response: %w", ErrProtocol)
	}
	if p := resp.Hello.Protocol; p < MinVersion || p > Version {
		sess.Close()
		return nil, fmt.Errorf("agent hello: agent picked protocol %d, host speaks %d-%d: %w",
			p, MinVersion, Version, ErrUnsupportedVersion)
	}
	c.hello = *resp.Hello
	log.Debug("agent hello", "agent", c.hello.Agent, "kernel", c.hello.Kernel, "protocol", c.hello.Protocol)
	go c.keepAlive(keepAlive)
	return c, nil
}

// maxMissedPings is how many pings in a row may go unanswered before the
// session is given up: a TCG guest starved of CPU on a loaded host can miss
// one (yamux waits 10 s for each), and a VM that died is reported by
// libvirt anyway.
const maxMissedPings = 3

// keepAlive pings the agent every interval and ends the session when
// maxMissedPings pings in a row went unanswered.
func (c *Client) keepAlive(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	missed := 0
	for {
		select {
		case <-c.sess.CloseChan():
			return
		case <-t.C:
		}
		_, err := c.sess.Ping()
		switch {
		case err == nil:
			missed = 0
		case c.sess.IsClosed():
			return
		default:
			if missed++; missed >= maxMissedPings {
				c.log.Warn("agent keepalive failed: ending the session", "missed_pings", missed, "err", err)
				c.sess.Close()
				return
			}
			c.log.Info("agent missed a keepalive ping", "missed", missed, "err", err)
		}
	}
}

// Hello returns what the agent said in the handshake (the guest's claim).
func (c *Client) Hello() Hello { return c.hello }

// Ping measures one request round trip to the agent.
func (c *Client) Ping(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	if _, err := c.call(ctx, Request{V: Version, Op: OpPing}); err != nil {
		return 0, fmt.Errorf("agent ping: %w", err)
	}
	return time.Since(start), nil
}

// Stats asks the agent for a snapshot of the guest.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	resp, err := c.call(ctx, Request{V: Version, Op: OpStats})
	if err != nil {
		return Stats{}, fmt.Errorf("agent stats: %w", err)
	}
	if resp.Stats == nil {
		return Stats{}, fmt.Errorf("agent stats: no stats in response: %w", ErrProtocol)
	}
	return *resp.Stats, nil
}

// Shutdown asks the agent to sync and power the VM off. It returns once the
// agent has acknowledged; the session ends (Done fires) when the VM is gone.
func (c *Client) Shutdown(ctx context.Context) error {
	if _, err := c.call(ctx, Request{V: Version, Op: OpShutdown}); err != nil {
		return fmt.Errorf("agent shutdown: %w", err)
	}
	return nil
}

// Done is closed when the session ends: Close, the agent going away, or a
// missed keepalive.
func (c *Client) Done() <-chan struct{} { return c.sess.CloseChan() }

// Close ends the session and closes the channel.
func (c *Client) Close() error {
	if err := c.sess.Close(); err != nil {
		return fmt.Errorf("close agent session: %w", err)
	}
	return nil
}

// Drop ends the session the way a crashed host does: the channel is closed
// without the goodbye, so the agent learns of it only when the next host
// session opens (or its keepalive fails), and keeps the session's execs
// with an id for their grace (OpExecAttach). For tests of that path, and
// for handing a VM's channel over without ending its work.
func (c *Client) Drop() error {
	c.link.silent.Store(true)
	return c.Close()
}

// call runs one unary op on a new stream.
func (c *Client) call(ctx context.Context, req Request) (Response, error) {
	st, err := c.sess.OpenStream()
	if err != nil {
		return Response{}, fmt.Errorf("open stream: %w", err)
	}
	defer st.Close()
	// A deadline in the past wakes blocked reads and writes when ctx ends.
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	resp, err := exchange(ctx, st, req)
	if err != nil {
		return resp, err
	}
	if resp.V < MinVersion || resp.V > Version {
		return resp, fmt.Errorf("response of protocol %d: %w", resp.V, ErrUnsupportedVersion)
	}
	return resp, nil
}

// exchange sends req on st and reads the response: an error the agent
// answered is a *RemoteError, a read or write the end of ctx broke is
// ctx's error.
func exchange(ctx context.Context, st net.Conn, req Request) (Response, error) {
	if err := WriteMessage(st, req); err != nil {
		return Response{}, ctxErr(ctx, err)
	}
	var resp Response
	if err := ReadMessage(st, &resp); err != nil {
		return Response{}, ctxErr(ctx, err)
	}
	if resp.Error != nil {
		return resp, &RemoteError{Op: req.Op, Err: *resp.Error}
	}
	return resp, nil
}

// refuse answers a stream the agent opened that the host does not serve:
// time-bounded, so a guest opening streams in a loop costs the host little.
// why nil means the op is not served at all.
func (c *Client) refuse(st net.Conn, why error) {
	defer st.Close()
	st.SetDeadline(time.Now().Add(refuseTimeout))
	var req Request
	if err := ReadMessage(st, &req); err != nil {
		c.log.Debug("agent opened a stream without a valid request", "err", err)
		return
	}
	c.log.Debug("agent opened a stream the host does not serve", "op", req.Op, "why", why)
	werr := why
	if werr == nil {
		werr = fmt.Errorf("op %q from the agent: %w", req.Op, ErrNotImplemented)
	}
	if err := WriteMessage(st, Response{V: Version, Error: ErrorFor(werr)}); err != nil {
		c.log.Warn("refuse agent stream", "err", err)
	}
}

func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%w)", cerr, err)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("agent closed the stream: %w", err)
	}
	return err
}
