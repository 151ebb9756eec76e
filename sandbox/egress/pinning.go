package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"
)

// A tunnel is pinned to its CONNECT host: the TLS ClientHello's SNI must
// name it (intercepted or not), and inside an intercepted tunnel every
// request's Host too. Otherwise a tunnel to an allowed host could carry
// requests for another name served at the same address (domain fronting),
// and an intercepted one would give that name the swapped credential.

// errMisdirected: the SNI or Host is not the CONNECT host (421).
var errMisdirected = errors.New("misdirected")

// checkSNI: sni (from the ClientHello) must be host; for an address
// literal, which clients send no SNI for, it must be empty.
func checkSNI(host, sni string) error {
	norm := normalizeHost(sni)
	if _, err := netip.ParseAddr(host); err == nil {
		if sni == "" {
			return nil
		}
	} else if norm == host {
		return nil
	}
	if sni == "" {
		return fmt.Errorf("%w: TLS ClientHello names no server (SNI) for CONNECT host %s", errMisdirected, host)
	}
	return fmt.Errorf("%w: TLS ClientHello names %.100q, not the CONNECT host %s", errMisdirected, sni, host)
}

// pinHost checks an intercepted request's Host (or absolute URL) against
// the CONNECT host and port; a request without one gets the CONNECT host.
func pinHost(req *http.Request, host string, port int) error {
	h := req.Host
	if req.URL != nil && req.URL.Host != "" && req.URL.Host != h {
		return fmt.Errorf("%w: request URL host %.100q differs from its Host %.100q", errMisdirected, req.URL.Host, h)
	}
	if h == "" {
		req.Host = net.JoinHostPort(host, strconv.Itoa(port))
		return nil
	}
	name, p, err := net.SplitHostPort(h)
	if err != nil {
		name, p = h, ""
	}
	if normalizeHost(name) != host || (p != "" && p != strconv.Itoa(port)) {
		return fmt.Errorf("%w: request for %.100q inside a tunnel to %s", errMisdirected, h, net.JoinHostPort(host, strconv.Itoa(port)))
	}
	return nil
}

// maxHello bounds the TLS record holding a ClientHello the gateway reads.
const maxHello = 16<<10 + 2048

// peekSNI looks at what the sandbox sends first without consuming it:
// when it is a TLS handshake record, the ClientHello's SNI and true. Other
// protocols (ssh, a server that speaks first) are not TLS: "", false.
func peekSNI(br *bufio.Reader) (string, bool, error) {
	b, err := br.Peek(1)
	if err != nil {
		return "", false, err
	}
	if b[0] != 0x16 { // not a TLS handshake record
		return "", false, nil
	}
	hdr, err := br.Peek(5)
	if err != nil {
		return "", true, fmt.Errorf("read TLS record: %w", err)
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	if n > maxHello || 5+n > br.Size() {
		return "", true, fmt.Errorf("TLS record of %d bytes: over the bound", n)
	}
	rec, err := br.Peek(5 + n)
	if err != nil {
		return "", true, fmt.Errorf("read TLS record: %w", err)
	}
	// crypto/tls parses the ClientHello; the handshake stops right there.
	var sni string
	var got bool
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni, got = h.ServerName, true
		return nil, errMisdirected
	}}
	herr := tls.Server(&helloConn{r: bytes.NewReader(rec)}, cfg).Handshake()
	if !got {
		return "", true, fmt.Errorf("read TLS ClientHello: %w", herr)
	}
	return sni, true, nil
}

// helloConn is a net.Conn that only reads the peeked bytes.
type helloConn struct{ r io.Reader }

func (c *helloConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *helloConn) Write(p []byte) (int, error)      { return 0, io.ErrClosedPipe }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }

// helloGate passes the sandbox's bytes upstream once the first ones are
// checked: a TLS ClientHello must name host; on a mismatch it closes both
// ends (the tunnel is already established: there is no status to send).
type helloGate struct {
	br      *bufio.Reader
	host    string
	checked bool
	err     error
	fail    func()
}

func (g *helloGate) Read(p []byte) (int, error) {
	if !g.checked {
		g.checked = true
		// Not TLS: passed as it is (an error, EOF, comes again below).
		if sni, isTLS, err := peekSNI(g.br); isTLS {
			if err == nil {
				err = checkSNI(g.host, sni)
			}
			if err != nil {
				g.err = err
				g.fail()
				return 0, err
			}
		}
	}
	return g.br.Read(p)
}

// misdirect refuses a request inside an intercepted tunnel with 421,
// before anything is sent upstream.
func (s *conn) misdirect(down net.Conn, err error) {
	s.ev.Decision, s.ev.Rule, s.ev.Status, s.ev.Error = DecisionDeny, "misdirected request", http.StatusMisdirectedRequest, err.Error()
	writeTLSError(down, http.StatusMisdirectedRequest, "stockade egress: "+err.Error()+"\n")
}
