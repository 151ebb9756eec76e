package agentproto

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// EgressProxyAddr is where the agent listens inside every sandbox's network
// namespace; HTTP_PROXY and HTTPS_PROXY point at it.
const EgressProxyAddr = "127.0.0.1:3128"

// EgressHandler serves one connection a sandbox made to its proxy listener.
// conn carries the sandbox's bytes exactly as sent (the HTTP proxy protocol:
// CONNECT or a plain request); the handler owns conn and closes it.
// sandboxID is the guest's claim: the handler checks it against what the
// host knows about the VM the session belongs to. ctx ends with the session.
type EgressHandler func(ctx context.Context, sandboxID string, conn net.Conn)

// maxEgressStreams bounds the egress connections one agent session holds
// open at once; beyond it new ones are refused with CodeExhausted.
const maxEgressStreams = 512

// EgressConn carries a connection's bytes over a stream as ChannelData
// frames (OpEgress, after the Response). An empty frame ends one direction
// (CloseWrite); a ChannelError frame ends the stream with an error.
//
// It is the bulk path of egress: a frame's data is read straight into the
// caller's buffer and written from one reused buffer (ReadFrom fills it
// from the source directly), so no frame costs an allocation or an extra
// copy (under TCG each copy of a download is a visible share of the
// guest's CPU).
type EgressConn struct {
	net.Conn

	wmu  sync.Mutex
	wbuf []byte // header + up to egressChunk of data, under wmu

	// remain is what is left of the data frame being read; hdr its header.
	remain int
	hdr    [5]byte
	eof    bool
}

// egressChunk bounds a frame's data so that the frame (its 5-byte header
// included), one yamux data frame's body, fills exactly one link frame
// (chunkSize would spill 5 bytes into a second one, each a frame to
// checksum and decode in the guest).
const egressChunk = MaxLinkData - 5

// NewEgressConn frames the bytes of st, a stream past its Request/Response.
func NewEgressConn(st net.Conn) *EgressConn { return &EgressConn{Conn: st} }

// Read returns the data of the next frames; io.EOF after the peer's CloseWrite.
func (c *EgressConn) Read(p []byte) (int, error) {
	for c.remain == 0 {
		if c.eof {
			return 0, io.EOF
		}
		if _, err := io.ReadFull(c.Conn, c.hdr[:]); err != nil {
			return 0, fmt.Errorf("egress stream: read frame header: %w", err)
		}
		n := binary.BigEndian.Uint32(c.hdr[1:5])
		if n > MaxFrameSize {
			return 0, fmt.Errorf("egress stream: frame of %d bytes: %w", n, ErrTooLarge)
		}
		switch Channel(c.hdr[0]) {
		case ChannelData:
			if n == 0 {
				c.eof = true
				continue
			}
			c.remain = int(n)
		case ChannelError:
			msg := make([]byte, n)
			if _, err := io.ReadFull(c.Conn, msg); err != nil {
				return 0, fmt.Errorf("egress stream: read error frame: %w", err)
			}
			return 0, fmt.Errorf("egress stream: peer error %q: %w", msg, ErrRemote)
		default:
			return 0, fmt.Errorf("egress stream: frame on channel %d: %w", c.hdr[0], ErrProtocol)
		}
	}
	if len(p) > c.remain {
		p = p[:c.remain]
	}
	n, err := c.Conn.Read(p)
	c.remain -= n
	if errors.Is(err, io.EOF) {
		// The stream ended inside a frame: a cut, not the peer's CloseWrite.
		return n, fmt.Errorf("egress stream: read frame data: %w", io.ErrUnexpectedEOF)
	}
	return n, err
}

// Write sends p in frames of at most egressChunk bytes.
func (c *EgressConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wbuf == nil {
		c.wbuf = make([]byte, 5+egressChunk)
	}
	n := 0
	for len(p) > 0 {
		k := copy(c.wbuf[5:], p)
		if err := c.sendLocked(c.wbuf, k); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// ReadFrom sends what r yields until its EOF, each read straight into a
// frame's buffer (the lock is held only while a frame is sent, not while
// r blocks).
func (c *EgressConn) ReadFrom(r io.Reader) (int64, error) {
	buf := make([]byte, 5+egressChunk)
	var total int64
	for {
		k, rerr := r.Read(buf[5:])
		if k > 0 {
			c.wmu.Lock()
			err := c.sendLocked(buf, k)
			c.wmu.Unlock()
			if err != nil {
				return total, err
			}
			total += int64(k)
		}
		if errors.Is(rerr, io.EOF) {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// sendLocked writes buf's first 5+k bytes as the frame of the k bytes of
// data after its header (under wmu).
func (c *EgressConn) sendLocked(buf []byte, k int) error {
	buf[0] = byte(ChannelData)
	binary.BigEndian.PutUint32(buf[1:5], uint32(k))
	if _, err := c.Conn.Write(buf[:5+k]); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

// CloseWrite tells the peer no more bytes come this way.
func (c *EgressConn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return WriteFrame(c.Conn, ChannelData, nil)
}

// OpenEgress is the agent's end: it opens a stream on open, asks the host
// to take a connection of sandboxID and returns the framed stream. ctx
// bounds the exchange only.
func OpenEgress(ctx context.Context, open func() (net.Conn, error), sandboxID string) (*EgressConn, error) {
	st, err := open()
	if err != nil {
		return nil, fmt.Errorf("egress: open stream: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Unix(1, 0)) })
	err = func() error {
		req := Request{V: Version, Op: OpEgress, Egress: &EgressRequest{Sandbox: sandboxID}}
		if err := WriteMessage(st, req); err != nil {
			return err
		}
		var resp Response
		if err := ReadMessage(st, &resp); err != nil {
			return err
		}
		if resp.Error != nil {
			return &RemoteError{Op: OpEgress, Err: *resp.Error}
		}
		return nil
	}()
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("egress of %s: %w", sandboxID, ctxErr(ctx, err))
	}
	return NewEgressConn(st), nil
}

// acceptIncoming serves the streams the agent opens: egress when the
// client has an EgressHandler, a refusal otherwise.
func (c *Client) acceptIncoming(h EgressHandler) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sem := make(chan struct{}, maxEgressStreams)
	for {
		st, err := c.sess.AcceptStream()
		if err != nil {
			return
		}
		if h == nil {
			c.refuse(st, nil)
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			c.refuse(st, fmt.Errorf("%d egress connections open: %w", maxEgressStreams, ErrExhausted))
			continue
		}
		go func() {
			defer func() { <-sem }()
			c.serveIncoming(ctx, st, h)
		}()
	}
}

func (c *Client) serveIncoming(ctx context.Context, st net.Conn, h EgressHandler) {
	st.SetDeadline(time.Now().Add(refuseTimeout))
	var req Request
	if err := ReadMessage(st, &req); err != nil {
		c.log.Debug("agent opened a stream without a valid request", "err", err)
		st.Close()
		return
	}
	var rerr error
	switch {
	case req.Op != OpEgress:
		rerr = fmt.Errorf("op %q from the agent: %w", req.Op, ErrNotImplemented)
	case req.V < MinVersion || req.V > Version:
		rerr = fmt.Errorf("egress request of protocol %d: %w", req.V, ErrUnsupportedVersion)
	case req.Egress == nil:
		rerr = fmt.Errorf("egress without its body: %w", ErrBadRequest)
	default:
		rerr = CheckSandboxID(req.Egress.Sandbox)
	}
	if rerr != nil {
		WriteMessage(st, Response{V: Version, Error: ErrorFor(rerr)})
		st.Close()
		return
	}
	if err := WriteMessage(st, Response{V: Version}); err != nil {
		st.Close()
		return
	}
	st.SetDeadline(time.Time{})
	h(ctx, req.Egress.Sandbox, NewEgressConn(st))
}
