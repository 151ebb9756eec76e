// Package agentprototest serves the agent protocol from tests: a guest
// whose every answer the test decides (a hostile or broken one), over the
// same link layer and yamux session the host's agentproto.Client speaks to
// the real agent. It is the guest end of a real connection (a net.Pipe or a
// socket), not a stand-in for the client.
package agentprototest

import (
	"io"
	"net"
	"sync"

	"github.com/hashicorp/yamux"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Reply answers one stream the host opened, whose first message was req.
// The stream closes when it returns.
type Reply func(st net.Conn, req agentproto.Request)

// Serve answers every stream of the first host session on conn with reply,
// each in its own goroutine, until conn closes. It returns the yamux session
// (to close it, or to open streams towards the host).
func Serve(conn net.Conn, reply Reply) (*yamux.Session, error) {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.MaxStreamWindowSize = agentproto.StreamWindow
	cfg.EnableKeepAlive = false // a fake agent must not write before the host opened
	sess, err := yamux.Server(Link(conn), cfg)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			go func() {
				defer st.Close()
				var req agentproto.Request
				if err := agentproto.ReadMessage(st, &req); err != nil {
					return
				}
				reply(st, req)
			}()
		}
	}()
	return sess, nil
}

// Pipe returns the host end of a net.Pipe whose guest end Serve answers
// with reply, and a function that ends both.
func Pipe(reply Reply) (net.Conn, func(), error) {
	hostEnd, agentEnd := net.Pipe()
	sess, err := Serve(agentEnd, reply)
	if err != nil {
		hostEnd.Close()
		agentEnd.Close()
		return nil, nil, err
	}
	return hostEnd, func() { sess.Close(); hostEnd.Close() }, nil
}

// Hello answers a hello with protocol 1 and the capabilities listed.
func Hello(st net.Conn, ops ...agentproto.Op) {
	agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version, Hello: &agentproto.Hello{
		Protocol: agentproto.Version, Agent: "agentprototest", Kernel: "test", Capabilities: agentproto.Capabilities(ops...),
	}})
}

// Link is the agent end of the link layer: it serves the first session a
// host opens on conn and drops frames of any other.
func Link(conn net.Conn) io.ReadWriteCloser {
	pr, pw := io.Pipe()
	var mu sync.Mutex
	w := make(chan *agentproto.LinkWriter, 1)
	go func() {
		lr := agentproto.NewLinkReader(conn)
		var session uint64
		for {
			f, err := lr.Next()
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			switch {
			case f.Kind == agentproto.LinkOpen && session == 0:
				session = f.Session
				w <- agentproto.NewLinkWriter(conn, &mu, session)
			case f.Kind == agentproto.LinkData && f.Session == session:
				pw.Write(f.Data)
			}
		}
	}()
	return &lazyLinkConn{pr: pr, conn: conn, w: w}
}

type lazyLinkConn struct {
	pr   *io.PipeReader
	conn net.Conn
	w    chan *agentproto.LinkWriter
	lw   *agentproto.LinkWriter
}

func (c *lazyLinkConn) Read(p []byte) (int, error) { return c.pr.Read(p) }
func (c *lazyLinkConn) Write(p []byte) (int, error) {
	if c.lw == nil {
		c.lw = <-c.w // the server only answers, so the host has opened by now
	}
	return c.lw.Write(p)
}
func (c *lazyLinkConn) Close() error { c.pr.Close(); return c.conn.Close() }
