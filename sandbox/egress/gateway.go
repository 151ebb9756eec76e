package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/netguard"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

// Resolver turns a name into addresses (net.Resolver is one).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Sandboxes confirms that a sandbox id the guest named is an active sandbox
// of the tenant on that VM: the guest's claim is never trusted.
type Sandboxes interface {
	CheckEgress(ctx context.Context, tenantID, vmID, sandboxID string) error
}

// SandboxesFunc adapts a function to Sandboxes.
type SandboxesFunc func(ctx context.Context, tenantID, vmID, sandboxID string) error

// CheckEgress calls f.
func (f SandboxesFunc) CheckEgress(ctx context.Context, tenantID, vmID, sandboxID string) error {
	return f(ctx, tenantID, vmID, sandboxID)
}

// Swapper is the credential broker: for a host a tenant secret is scoped
// to, the gateway terminates the sandbox's TLS with the tenant CA
// (TLSConfig, a leaf per SNI), replaces placeholders with real values in
// what it forwards to that host only, each where its secret may go, and
// rewrites real values in what comes back to placeholders (scrub.go).
type Swapper interface {
	Credentials(ctx context.Context, tenantID, sandboxID, host string) ([]secrets.Credential, bool, error)
	TLSConfig(ctx context.Context, tenantID string) (*tls.Config, error)
}

// Config configures a Gateway. Zero fields take the defaults named.
type Config struct {
	// Policies gives the tenant rules; required.
	Policies Policies
	// Store records every decision; nil logs them only.
	Store *Store
	// Sandboxes checks the guest's claim; nil trusts the sandbox id within
	// the VM's tenant (the VM is the tenant boundary).
	Sandboxes Sandboxes
	// Swapper swaps credentials; nil never intercepts TLS.
	Swapper Swapper
	// Resolver defaults to net.DefaultResolver.
	Resolver Resolver
	// AllowCIDRs are ranges exempt from the blocklist (tenants/netguard):
	// the operator's STOCKADE_EGRESS_ALLOW_CIDRS, read by
	// netguard.ParseAllowance, which refuses loopback, unspecified and
	// metadata ranges; only a test injects 127.0.0.0/8 here. A zoned
	// address is refused whatever this says.
	AllowCIDRs []netip.Prefix
	// UpstreamRoots verifies upstream servers when the gateway terminates
	// TLS itself; nil means the system roots.
	UpstreamRoots *x509.CertPool
	Logger        *slog.Logger
	Clock         clockwork.Clock
	// CacheTTL is how long a tenant's rules are reused; default 2 s, the
	// bound on how late a policy change reaches a running sandbox.
	CacheTTL time.Duration
	// UpstreamWindow bounds the TCP receive window each upstream
	// connection advertises (TCP_WINDOW_CLAMP; the buffer still
	// autotunes up to it); default 1 MiB, negative: the kernel's own
	// bound (net.ipv4.tcp_rmem's maximum). See bufferSockets.
	UpstreamWindow int
	// DialTimeout bounds connecting upstream; default 10 s.
	DialTimeout time.Duration
	// HeaderTimeout bounds reading the proxy request; default 30 s.
	HeaderTimeout time.Duration
	// Audit records a refused connection as egress.denied, at most one per
	// sandbox and host per DenialAuditWindow; nil: egress_events only.
	Audit Auditor
	// DenialAuditWindow is that rate limit's window; default 1 min.
	DenialAuditWindow time.Duration
	// EventsPerWindow bounds the egress_events rows one sandbox writes per
	// EventWindow (default 300 a minute): past it, connections are still
	// served and metered, and the sandbox's next row counts them
	// (Event.Suppressed). A guest naming sandboxes that are not its own
	// shares one bound per VM.
	EventsPerWindow int
	EventWindow     time.Duration
}

// Gateway decides, dials and pipes sandbox connections.
type Gateway struct {
	cfg   Config
	log   *slog.Logger
	rules *ruleCache
	// denials rate-limits the audit events of refused connections;
	// reflected, those of secret values found in responses.
	denials, reflected *audit.Limiter
	// events rate-limits the egress_events rows of each sandbox.
	events *audit.Limiter

	mu       sync.Mutex
	counters map[string]*counter
}

type counter struct{ up, down, conns, reflected atomic.Int64 }

// maxHeaderBytes bounds a proxy request's head (and each intercepted one).
const maxHeaderBytes = 64 << 10

// New checks cfg and fills its defaults.
func New(cfg Config) (*Gateway, error) {
	if cfg.Policies == nil {
		return nil, errors.New("egress gateway: Policies is required")
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = 2 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.UpstreamWindow == 0 {
		cfg.UpstreamWindow = 1 << 20
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = 30 * time.Second
	}
	if cfg.DenialAuditWindow <= 0 {
		cfg.DenialAuditWindow = time.Minute
	}
	if cfg.EventsPerWindow <= 0 {
		cfg.EventsPerWindow = 300
	}
	if cfg.EventWindow <= 0 {
		cfg.EventWindow = time.Minute
	}
	return &Gateway{
		cfg: cfg, log: cfg.Logger.With("component", "egress"),
		rules:    &ruleCache{src: cfg.Policies, ttl: cfg.CacheTTL, clock: cfg.Clock, m: map[string]cachedRules{}},
		counters: map[string]*counter{},
		denials:  audit.NewLimiter(cfg.DenialAuditWindow, 1), reflected: audit.NewLimiter(cfg.DenialAuditWindow, 1),
		events: audit.NewLimiter(cfg.EventWindow, cfg.EventsPerWindow),
	}, nil
}

// Handler serves the egress streams of one VM's agent session: tenantID
// and vmID come from which channel the host opened, never from the guest.
func (g *Gateway) Handler(tenantID, vmID string) agentproto.EgressHandler {
	return func(ctx context.Context, sandboxID string, conn net.Conn) {
		g.ServeConn(ctx, tenantID, vmID, sandboxID, conn)
	}
}

// Bytes returns what a sandbox moved through the gateway since this
// process started, open connections included: up is what the sandbox
// sent, down what it received.
func (g *Gateway) Bytes(sandboxID string) (up, down int64) {
	g.mu.Lock()
	c := g.counters[sandboxID]
	g.mu.Unlock()
	if c == nil {
		return 0, 0
	}
	return c.up.Load(), c.down.Load()
}

// Forget drops a sandbox's live counters (once it is destroyed).
func (g *Gateway) Forget(sandboxID string) {
	g.denials.Forget(sandboxID + "\x00")
	g.events.Forget(sandboxID + "\x00")
	g.reflected.Forget(sandboxID + "\x00")
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.counters[sandboxID]; c != nil && c.conns.Load() == 0 {
		delete(g.counters, sandboxID)
	}
}

// counter is the live counter of a sandbox the check confirmed: a
// guest-chosen id never makes one.
func (g *Gateway) counter(sandboxID string) *counter {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.counters[sandboxID]
	if c == nil {
		c = &counter{}
		g.counters[sandboxID] = c
	}
	return c
}

// conn is one sandbox connection being served.
type conn struct {
	g     *Gateway
	ev    Event
	c     *countConn
	br    *bufio.Reader
	start time.Time
	// unknown: the guest named a sandbox that is not an active one of the
	// tenant on this VM.
	unknown bool
	// host: a connection of the control plane's own (DialAs).
	host bool
	inj  *injector // intercepted: swaps and scrubs
}

// limitKey is what the rate limits of s count under: its sandbox, or for
// a sandbox the guest made up, its VM.
func (s *conn) limitKey() string {
	if s.unknown {
		return "vm:" + s.ev.VMID
	}
	return s.ev.SandboxID
}

// ServeConn serves one connection of a sandbox: reads the proxy request,
// decides, and pipes or refuses. It closes c.
func (g *Gateway) ServeConn(ctx context.Context, tenantID, vmID, sandboxID string, c net.Conn) {
	g.serve(ctx, tenantID, vmID, sandboxID, c, false)
}

// serve is ServeConn; own marks a connection of the control plane's own
// (DialAs): no guest claim to check, and not metered to a sandbox.
func (g *Gateway) serve(ctx context.Context, tenantID, vmID, sandboxID string, c net.Conn, own bool) {
	// The session's end ends every connection on it.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	s := &conn{g: g, start: g.cfg.Clock.Now(), host: own,
		ev: Event{TenantID: tenantID, VMID: vmID, SandboxID: sandboxID}}
	s.ev.StartedAt = s.start

	if g.cfg.Sandboxes != nil && !own {
		if err := g.cfg.Sandboxes.CheckEgress(ctx, tenantID, vmID, sandboxID); err != nil {
			// Nothing is kept under the guest's id: no live counter, no
			// metering, and its rate limits are the VM's.
			s.c = &countConn{Conn: c, cnt: &counter{}}
			defer s.c.Close()
			defer s.record(ctx)
			s.unknown = true
			s.ev.Method = "-"
			s.deny(http.StatusForbidden, "unknown sandbox", err.Error())
			return
		}
	}
	cnt := g.counter(sandboxID)
	cnt.conns.Add(1)
	defer cnt.conns.Add(-1)
	s.c = &countConn{Conn: c, cnt: cnt}
	defer s.c.Close()
	defer s.record(ctx)
	c.SetReadDeadline(time.Now().Add(g.cfg.HeaderTimeout))
	lim := &capReader{r: s.c, n: maxHeaderBytes}
	s.br = bufio.NewReaderSize(lim, 32<<10)
	req, err := http.ReadRequest(s.br)
	if err != nil {
		s.ev.Method = "-"
		s.deny(http.StatusBadRequest, "bad proxy request", err.Error())
		return
	}
	lim.n = -1
	c.SetReadDeadline(time.Time{})
	s.ev.Method = req.Method

	host, port, err := proxyTarget(req)
	if err != nil {
		s.ev.Host = req.Host
		s.deny(http.StatusBadRequest, "bad proxy request", err.Error())
		return
	}
	s.ev.Host, s.ev.Port = host, port

	rules, version, err := g.rules.get(ctx, tenantID)
	if err != nil {
		g.log.Error("egress rules", "tenant", tenantID, "err", err)
		s.deny(http.StatusServiceUnavailable, "policy unavailable", "")
		return
	}
	s.ev.PolicyVersion = version
	d := rules.Decide(host, port)
	if !d.Allowed {
		s.deny(http.StatusForbidden, d.Rule, "")
		return
	}
	s.ev.Rule = d.Rule

	addrs, err := g.resolve(ctx, host)
	if err != nil {
		var b *netguard.Blocked
		if errors.As(err, &b) {
			s.deny(http.StatusForbidden, "blocked: "+b.Error(), "")
			return
		}
		s.fail(http.StatusBadGateway, err)
		return
	}
	up, err := g.dial(ctx, addrs, port)
	if err != nil {
		s.fail(http.StatusBadGateway, err)
		return
	}
	defer up.Close()
	g.bufferSockets(up)
	s.ev.Addr = up.RemoteAddr().String()
	s.ev.Decision = DecisionAllow

	if req.Method == http.MethodConnect {
		s.tunnel(ctx, req, host, up)
		return
	}
	if req.URL.Scheme == "https" {
		intercepted, failed := s.broker(ctx, host)
		if failed {
			return
		}
		if intercepted {
			if err := s.inj.swapRequest(req); err != nil {
				s.fail(http.StatusBadRequest, err)
				return
			}
		}
		tc := tls.Client(up, &tls.Config{ServerName: host, RootCAs: g.cfg.UpstreamRoots, NextProtos: []string{"http/1.1"},
			MinVersion: tls.VersionTLS12})
		hctx, cancel := context.WithTimeout(ctx, g.cfg.HeaderTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			s.fail(http.StatusBadGateway, fmt.Errorf("upstream TLS: %w", err))
			return
		}
		up = tc
	}
	s.forward(req, up)
}

// proxyTarget is the host and port a proxy request names.
func proxyTarget(req *http.Request) (string, int, error) {
	var hostport, defPort string
	if req.Method == http.MethodConnect {
		hostport = req.Host
		if hostport == "" && req.URL != nil {
			hostport = req.URL.Host
		}
	} else {
		if req.URL == nil || req.URL.Host == "" {
			return "", 0, errors.New("a proxy request needs an absolute URL")
		}
		switch req.URL.Scheme {
		case "http":
			defPort = "80"
		case "https":
			// Some clients (busybox wget) ask the proxy for https URLs in
			// plain form: the gateway makes the TLS connection upstream.
			defPort = "443"
		default:
			return "", 0, fmt.Errorf("scheme %q: only http and https (or CONNECT)", req.URL.Scheme)
		}
		hostport = req.URL.Host
	}
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		if defPort == "" {
			return "", 0, fmt.Errorf("CONNECT target %q: want host:port", hostport)
		}
		host, p = hostport, defPort
	}
	host = normalizeHost(host)
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 || host == "" {
		return "", 0, fmt.Errorf("target %q: bad host or port", hostport)
	}
	return host, port, nil
}

// resolve returns host's addresses, all of them checked: one blocked
// address refuses the name (a name pointing at both a public and a private
// address is a rebinding attempt). A literal with a zone is refused
// (netguard.Blocked).
func (g *Gateway) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if err := netguard.CheckHost(host, g.cfg.AllowCIDRs); err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		lctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout)
		defer cancel()
		addrs, err = g.cfg.Resolver.LookupNetIP(lctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", host)
		}
	}
	for _, a := range addrs {
		if err := netguard.Check(a, g.cfg.AllowCIDRs); err != nil {
			return nil, err
		}
	}
	return addrs, nil
}

// dial connects to the first checked address that answers: the addresses
// come from resolve, never from a second lookup, and the dialer checks
// each again as it connects.
func (g *Gateway) dial(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, error) {
	d := netguard.Dialer(g.cfg.DialTimeout, g.cfg.AllowCIDRs)
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), uint16(port)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("connect: %w", errors.Join(errs...))
}

// bufferSockets bounds what the kernel holds for one upstream connection. The bytes the gateway relays cross two
// sockets where a direct download crosses one; with the kernel's
// autotuning each queue grows to megabytes whenever the upstream is the
// faster side, and the bytes are then out of the CPU caches by the time
// they are copied out: a relayed download cost twice the CPU time of a
// direct one and ran at 0.6 of its speed (BenchmarkGatewayHost). Bounded,
// the relay's working set stays in cache, and a sandbox that reads
// slowly makes the host's kernel hold about UpstreamWindow per
// connection instead of tcp_rmem's maximum. The upstream side is a
// window clamp rather than SO_RCVBUF: that would turn autotuning off and
// be cut to net.core.rmem_max (208 KiB on a stock kernel), while 1 MiB of
// window still fills a 50 ms path at the agent channel's rate.
func (g *Gateway) bufferSockets(up net.Conn) {
	if n := g.cfg.UpstreamWindow; n > 0 {
		if err := clampWindow(up, n); err != nil {
			g.log.Debug("egress upstream window", "err", err)
		}
	}
}

// clampWindow sets TCP_WINDOW_CLAMP on a TCP connection.
func clampWindow(c net.Conn, n int) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_WINDOW_CLAMP, n)
	}); err != nil {
		return err
	}
	return serr
}

// broker arms the connection's injector with the credentials of the
// secrets scoped to host, when there are any (intercepted). A broker that
// fails is answered 502 here (failed): the request must not go out with
// its placeholders unswapped, nor be tunnelled past the swap.
func (s *conn) broker(ctx context.Context, host string) (intercepted, failed bool) {
	sw := s.g.cfg.Swapper
	if sw == nil || s.host {
		return false, false
	}
	creds, ok, err := sw.Credentials(ctx, s.ev.TenantID, s.ev.SandboxID, host)
	if err != nil {
		s.fail(http.StatusBadGateway, fmt.Errorf("credentials for %s: %w", host, err))
		return false, true
	}
	if ok {
		s.ev.Intercepted = true
		s.inj = newInjector(creds)
	}
	return ok, false
}

// tunnel answers CONNECT and splices, or terminates TLS for a host a
// secret is scoped to; either way pinned to host (pinning.go).
func (s *conn) tunnel(ctx context.Context, req *http.Request, host string, up net.Conn) {
	intercepted, failed := s.broker(ctx, host)
	if failed {
		return
	}
	if intercepted {
		s.intercept(ctx, host, up)
		return
	}
	if _, err := io.WriteString(s.c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		s.ev.Error = err.Error()
		return
	}
	s.ev.Status = http.StatusOK
	// Not intercepted: a TLS ClientHello must still name host.
	gate := &helloGate{br: s.br, host: host, fail: func() { up.Close(); s.c.Close() }}
	err := splice(s.c, gate, up)
	if gate.err != nil {
		s.ev.Decision, s.ev.Rule, s.ev.Status, s.ev.Error = DecisionDeny, "misdirected request", http.StatusMisdirectedRequest, gate.err.Error()
		return
	}
	if err != nil {
		s.ev.Error = err.Error()
	}
}

// forward sends one plain HTTP request upstream and its response back; the
// connection then closes (every request is decided on its own).
func (s *conn) forward(req *http.Request, up net.Conn) {
	stripHopHeaders(req.Header)
	req.Close = true
	req.RequestURI = ""
	if err := req.Write(up); err != nil {
		s.fail(http.StatusBadGateway, fmt.Errorf("write request upstream: %w", err))
		return
	}
	br := bufio.NewReader(up)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		s.fail(http.StatusBadGateway, fmt.Errorf("read response: %w", err))
		return
	}
	defer resp.Body.Close()
	if s.inj != nil {
		if err := s.inj.scrubResponse(req, resp); err != nil {
			s.fail(http.StatusBadGateway, err)
			return
		}
	}
	s.ev.Status = resp.StatusCode
	// Framed by the response itself: done when its body is, whatever the
	// upstream does with the connection after.
	resp.Close = true
	if s.inj == nil && rawBody(req, resp) {
		if err := s.passBody(resp, br, up); err != nil {
			s.ev.Error = err.Error()
		}
		// resp.Body never saw its bytes: closed, it must not wait for them.
		up.Close()
		return
	}
	if err := resp.Write(s.c); err != nil {
		s.ev.Error = err.Error()
	}
}

// rawBody says whether resp's body may go to the sandbox as the upstream
// sent it: a Content-Length body (not chunked, not the bodyless answer to
// a HEAD), with nothing to scrub (the caller checks).
func rawBody(req *http.Request, resp *http.Response) bool {
	return req.Method != http.MethodHead && resp.ContentLength > 0 && len(resp.TransferEncoding) == 0 &&
		resp.StatusCode >= 200 && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified
}

// passBody writes resp's head as Response.Write would, then its body of
// Content-Length bytes from br (what the head's read buffered) and up
// (straight from the socket: splice(2) when both ends are sockets, one
// copy otherwise). The body is bounded by the head's length as
// Response.Write bounds it.
func (s *conn) passBody(resp *http.Response, br *bufio.Reader, up net.Conn) error {
	var head bytes.Buffer
	text := strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode)+" ")
	if text == "" || text == resp.Status {
		text = http.StatusText(resp.StatusCode)
	}
	fmt.Fprintf(&head, "HTTP/1.1 %03d %s\r\n", resp.StatusCode, text)
	h := resp.Header.Clone()
	for _, k := range []string{"Connection", "Keep-Alive", "Transfer-Encoding", "Trailer"} {
		h.Del(k)
	}
	h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	h.Set("Connection", "close")
	h.Write(&head)
	head.WriteString("\r\n")
	// The head and what its read buffered of the body go in one write (a
	// small response is all there): one syscall, one wakeup of the client.
	n := resp.ContentLength
	if k := int(min(int64(br.Buffered()), n)); k > 0 {
		b, _ := br.Peek(k)
		head.Write(b)
		br.Discard(k)
		n -= int64(k)
	}
	if _, err := s.c.Write(head.Bytes()); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	m, err := s.c.ReadFrom(&io.LimitedReader{R: up, N: n})
	if err == nil && m < n {
		err = fmt.Errorf("upstream body cut at %d of %d bytes: %w", resp.ContentLength-n+m, resp.ContentLength, io.ErrUnexpectedEOF)
	}
	return err
}

func stripHopHeaders(h http.Header) {
	for _, k := range []string{"Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate", "Connection",
		"Keep-Alive", "Te", "Trailer", "Upgrade"} {
		h.Del(k)
	}
}

// deny refuses with a clear text body naming the rule, and records it.
func (s *conn) deny(status int, rule, detail string) {
	s.ev.Decision, s.ev.Rule, s.ev.Status, s.ev.Error = DecisionDeny, rule, status, detail
	what := s.ev.Method + " " + net.JoinHostPort(s.ev.Host, strconv.Itoa(s.ev.Port))
	if s.ev.Host == "" {
		what = "this connection"
	}
	body := fmt.Sprintf("stockade egress: %s denied: %s\n", what, rule)
	if status != http.StatusForbidden {
		body = fmt.Sprintf("stockade egress: %s refused: %s\n", what, rule)
	}
	s.respond(status, rule, body)
}

// fail answers an allowed connection that could not be made.
func (s *conn) fail(status int, err error) {
	s.ev.Decision, s.ev.Status, s.ev.Error = DecisionAllow, status, err.Error()
	body := fmt.Sprintf("stockade egress: %s %s allowed (%s) but failed: %v\n", s.ev.Method,
		net.JoinHostPort(s.ev.Host, strconv.Itoa(s.ev.Port)), s.ev.Rule, err)
	s.respond(status, s.ev.Rule, body)
}

func (s *conn) respond(status int, rule, body string) {
	s.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(s.c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Stockade-Egress-Rule: %s\r\n"+
		"Content-Length: %d\r\nConnection: close\r\n\r\n%s", status, http.StatusText(status), headerSafe(rule), len(body), body)
}

func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}

// record stores the event with the bytes moved, within the sandbox's rate
// limit; past it, only the bytes are metered.
func (s *conn) record(ctx context.Context) {
	s.ev.BytesUp, s.ev.BytesDown = s.c.up.Load(), s.c.down.Load()
	now := s.g.cfg.Clock.Now()
	s.ev.DurationMS = now.Sub(s.start).Milliseconds()
	s.ev.SecretsReflected = s.reflections()
	defer s.auditReflections(ctx) // after Record: it names the event
	if s.ev.Decision == "" {
		s.ev.Decision = DecisionDeny
	}
	s.ev.unmetered = s.unknown || s.host
	s.ev.bound()
	// A refusal by rule (403) or of a misdirected tunnel (421) is
	// security-relevant: audited, rate-limited.
	if s.ev.Decision == DecisionDeny && (s.ev.Status == http.StatusForbidden || s.ev.Status == http.StatusMisdirectedRequest) {
		defer func() { s.g.auditDenial(ctx, s.ev, s.limitKey()) }() // after Record: it names the event
	}
	admitted, suppressed := s.g.events.Admit(s.limitKey()+"\x00", now)
	if !admitted {
		s.g.log.Debug("egress (over the event rate limit)", "tenant", s.ev.TenantID, "sandbox", s.ev.SandboxID, "method", s.ev.Method,
			"host", s.ev.Host, "port", s.ev.Port, "decision", s.ev.Decision, "bytes_up", s.ev.BytesUp, "bytes_down", s.ev.BytesDown)
		if s.g.cfg.Store == nil || s.unknown || s.host {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		end := s.ev.StartedAt.Add(time.Duration(s.ev.DurationMS) * time.Millisecond)
		if err := s.g.cfg.Store.Meter(rctx, s.ev.TenantID, s.ev.SandboxID, s.ev.BytesUp, s.ev.BytesDown, end); err != nil {
			s.g.log.Error("meter egress", "tenant", s.ev.TenantID, "sandbox", s.ev.SandboxID, "err", err)
		}
		return
	}
	s.ev.Suppressed = suppressed
	if suppressed > 0 {
		s.g.log.Warn("egress events rate-limited", "tenant", s.ev.TenantID, "sandbox", s.ev.SandboxID, "vm", s.ev.VMID,
			"suppressed", suppressed, "limit", s.g.cfg.EventsPerWindow, "window", s.g.cfg.EventWindow.String())
	}
	s.g.log.Info("egress", "tenant", s.ev.TenantID, "sandbox", s.ev.SandboxID, "method", s.ev.Method,
		"host", s.ev.Host, "port", s.ev.Port, "decision", s.ev.Decision, "rule", s.ev.Rule, "addr", s.ev.Addr,
		"status", s.ev.Status, "bytes_up", s.ev.BytesUp, "bytes_down", s.ev.BytesDown, "err", s.ev.Error)
	if s.g.cfg.Store == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.g.cfg.Store.Record(rctx, &s.ev); err != nil {
		s.g.log.Error("record egress event", "tenant", s.ev.TenantID, "sandbox", s.ev.SandboxID, "err", err)
	}
}

// splice copies both ways until both ends are done: each direction's end
// half-closes the other side; an error closes both.
func splice(c net.Conn, cr io.Reader, up net.Conn) error {
	errc := make(chan error, 1)
	go func() {
		_, err := io.Copy(up, cr)
		if err == nil {
			err = closeWrite(up)
		}
		errc <- err
	}()
	var derr error
	if cc, ok := c.(*countConn); ok {
		// ReadFrom straight from the socket (splice(2) socket to socket).
		_, derr = cc.ReadFrom(up)
	} else {
		_, derr = io.Copy(c, up)
	}
	if derr == nil {
		derr = closeWrite(c)
	}
	if derr != nil {
		c.Close()
		up.Close()
	} else {
		// The upstream is done; a sandbox that never closes its side is
		// not kept forever.
		c.SetReadDeadline(time.Now().Add(time.Minute))
	}
	uerr := <-errc
	if derr != nil {
		return derr
	}
	if uerr != nil && !errors.Is(uerr, net.ErrClosed) && !errors.Is(uerr, io.EOF) {
		var ne net.Error
		if !errors.As(uerr, &ne) || !ne.Timeout() {
			return uerr
		}
	}
	return nil
}

func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// countConn counts what the sandbox sent (up) and received (down), for
// the event and the sandbox's live counter.
type countConn struct {
	net.Conn
	cnt      *counter
	up, down atomic.Int64
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.up.Add(int64(n))
	c.cnt.up.Add(int64(n))
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.down.Add(int64(n))
	c.cnt.down.Add(int64(n))
	return n, err
}

func (c *countConn) CloseWrite() error { return closeWrite(c.Conn) }

// meterChunk is how much a ReadFrom moves between updates of the
// counters: the live counter lags an open connection by at most this.
const meterChunk = 1 << 20

// ReadFrom hands r to the connection's own ReadFrom (a TCP connection
// splices from a socket; an agent stream reads into its frame buffer) a
// meterChunk at a time, counting each. r may be an *io.LimitedReader (its
// N is honoured and updated); it is unwrapped so the connection sees the
// socket itself.
func (c *countConn) ReadFrom(r io.Reader) (int64, error) {
	rf, ok := c.Conn.(io.ReaderFrom)
	if !ok {
		return io.Copy(onlyWriter{c}, r)
	}
	limit := int64(-1)
	lr, limited := r.(*io.LimitedReader)
	if limited {
		r, limit = lr.R, lr.N
	}
	var total int64
	for limit != 0 {
		chunk := int64(meterChunk)
		if limit > 0 {
			chunk = min(chunk, limit)
		}
		n, err := rf.ReadFrom(&io.LimitedReader{R: r, N: chunk})
		total += n
		c.down.Add(n)
		c.cnt.down.Add(n)
		if limit > 0 {
			limit -= n
			lr.N = limit
		}
		if err != nil {
			return total, err
		}
		if n < chunk { // r's EOF
			return total, nil
		}
	}
	return total, nil
}

// onlyWriter hides a ReadFrom (io.Copy would call it again).
type onlyWriter struct{ w io.Writer }

func (w onlyWriter) Write(p []byte) (int, error) { return w.w.Write(p) }

// capReader fails after n bytes (n < 0: no bound): the proxy request head
// is bounded.
type capReader struct {
	r io.Reader
	n int
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n < 0 {
		return c.r.Read(p)
	}
	if c.n == 0 {
		return 0, errors.New("proxy request head over the size bound")
	}
	if len(p) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= n
	return n, err
}
