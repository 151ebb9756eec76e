package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// maxSwapBody bounds a request body the gateway reads to swap placeholders
// in; larger bodies pass unchanged.
const maxSwapBody = 1 << 20

// intercept answers CONNECT, terminates the sandbox's TLS with the tenant
// CA, and forwards each request to host over TLS verified against the
// upstream roots, with placeholders replaced where their secrets may go
// (s.inj), and each response scrubbed of real values. The real values
// exist only on the host, in what goes upstream.
func (s *conn) intercept(ctx context.Context, host string, up net.Conn) {
	tcfg, err := s.g.cfg.Swapper.TLSConfig(ctx, s.ev.TenantID)
	if err != nil {
		s.fail(http.StatusBadGateway, fmt.Errorf("tenant CA: %w", err))
		return
	}
	tcfg = tcfg.Clone()
	tcfg.NextProtos = []string{"http/1.1"}
	if _, err := io.WriteString(s.c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		s.ev.Error = err.Error()
		return
	}
	s.ev.Status = http.StatusOK
	down := tls.Server(&prefixConn{Conn: s.c, r: s.br}, tcfg)
	defer down.Close()
	hctx, cancel := context.WithTimeout(ctx, s.g.cfg.HeaderTimeout)
	defer cancel()
	if err := down.HandshakeContext(hctx); err != nil {
		s.ev.Error = "sandbox TLS handshake: " + err.Error()
		return
	}
	if err := checkSNI(host, down.ConnectionState().ServerName); err != nil {
		s.misdirect(down, err)
		return
	}
	upTLS := tls.Client(up, &tls.Config{ServerName: host, RootCAs: s.g.cfg.UpstreamRoots, NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12})
	defer upTLS.Close()
	if err := upTLS.HandshakeContext(hctx); err != nil {
		s.ev.Error = "upstream TLS handshake: " + err.Error()
		writeTLSError(down, http.StatusBadGateway, fmt.Sprintf("stockade egress: TLS to %s failed: %v\n", host, err))
		return
	}
	dbr := bufio.NewReader(down)
	ubr := bufio.NewReader(upTLS)
	for {
		down.SetReadDeadline(time.Now().Add(5 * time.Minute))
		req, err := http.ReadRequest(dbr)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				s.ev.Error = "read request: " + err.Error()
			}
			return
		}
		down.SetReadDeadline(time.Time{})
		if err := pinHost(req, host, s.ev.Port); err != nil {
			s.misdirect(down, err)
			return
		}
		if err := s.inj.swapRequest(req); err != nil {
			s.ev.Error = err.Error()
			writeTLSError(down, http.StatusBadRequest, "stockade egress: "+err.Error()+"\n")
			return
		}
		if err := req.Write(upTLS); err != nil {
			s.ev.Error = "write request upstream: " + err.Error()
			return
		}
		resp, err := http.ReadResponse(ubr, req)
		if err != nil {
			s.ev.Error = "read response: " + err.Error()
			writeTLSError(down, http.StatusBadGateway, "stockade egress: no response from "+host+"\n")
			return
		}
		if err := s.inj.scrubResponse(req, resp); err != nil {
			resp.Body.Close()
			s.ev.Error = err.Error()
			writeTLSError(down, http.StatusBadGateway, "stockade egress: "+err.Error()+"\n")
			return
		}
		s.ev.Status = resp.StatusCode
		werr := resp.Write(down)
		resp.Body.Close()
		if werr != nil {
			s.ev.Error = "write response: " + werr.Error()
			return
		}
		if req.Close || resp.Close {
			return
		}
	}
}

func writeTLSError(c net.Conn, status int, body string) {
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// prefixConn reads what a bufio.Reader already holds before the conn.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }
