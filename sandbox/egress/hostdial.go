package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// HostVM is the VM column of the events of the control plane's own
// connections (DialAs).
const HostVM = "host"

// DialAs connects to addr (host:port) as the tenant's traffic: the
// connection crosses the gateway as a sandbox's CONNECT would, under the
// same policy, blocklist and operator ranges, and is logged in
// egress_events (and audited when refused) under client (say
// "template-import:<version>") on VM HostVM. It is not metered to a
// sandbox and never intercepted: the caller brings its own credentials.
// A refusal is an error carrying the gateway's sentence.
func (g *Gateway) DialAs(ctx context.Context, tenantID, client, addr string) (net.Conn, error) {
	local, remote := net.Pipe()
	go g.serve(context.WithoutCancel(ctx), tenantID, HostVM, client, remote, true)
	stop := context.AfterFunc(ctx, func() { local.Close() })
	defer stop()
	if _, err := fmt.Fprintf(local, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr); err != nil {
		local.Close()
		return nil, fmt.Errorf("egress to %s: %w", addr, err)
	}
	br := bufio.NewReader(local)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		local.Close()
		return nil, fmt.Errorf("egress to %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		local.Close()
		return nil, &DialError{Addr: addr, Status: resp.StatusCode, Rule: resp.Header.Get("X-Stockade-Egress-Rule"),
			Message: strings.TrimSpace(strings.TrimPrefix(string(b), "stockade egress: "))}
	}
	return &bufConn{Conn: local, r: br}, nil
}

// DialError is a connection the gateway refused or could not make.
type DialError struct {
	Addr    string
	Status  int
	Rule    string
	Message string
}

func (e *DialError) Error() string {
	return fmt.Sprintf("egress to %s refused (%d): %s", e.Addr, e.Status, e.Message)
}

// Denied reports whether the policy refused it (rather than the upstream
// failing).
func (e *DialError) Denied() bool { return e.Status == http.StatusForbidden }

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }
