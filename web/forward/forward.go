// Package forward sends a request that needs a VM's agent channel to the
// replica that owns the channel, when it arrives at another one: a load
// balancer may send any request to any replica.
//
// The replica that received the request authenticates it and scopes it to
// its tenant first (another tenant's sandbox is "not found" there, never
// forwarded), then reverse-proxies it, credentials included, to the
// owner's internal URL with a signature header: an HMAC, under a key
// derived from the installation's, over the method, the path and query,
// the authenticated principal, the client's address, the sending replica
// and a timestamp. The owner authenticates the request again from its
// credentials and accepts it as forwarded only when the signature is
// valid, fresh and names the principal it authenticated itself; a
// signature a client sent is refused, and never reaches a handler.
// Streams pass through unbuffered: chunked and Server-Sent Events
// answers are flushed as they come, WebSocket upgrades are spliced, and
// request bodies are streamed.
package forward

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Header carries the signature of a forwarded request:
// "v1 <replica id> <unix seconds> <client address> <mac>".
const Header = "X-Stockade-Forward"

// DefaultMaxSkew is how old (or how far in the future) a signature may be.
const DefaultMaxSkew = 30 * time.Second

// RetryAfter is what a client is told to wait when no replica owns the
// channel (a lease expired: adoption pending), in seconds.
const RetryAfter = 2

// Replica is a control-plane process: its id and where the other replicas
// reach it.
type Replica struct{ ID, InternalURL string }

// Owners says which replica owns a VM's agent channel (sandbox/replicas).
type Owners interface {
	// Self is this process.
	Self() Replica
	// OwnerOf is the owner of vmID's channel now, or an error wrapping
	// errdefs.ErrUnavailable when no replica holds a valid lease.
	OwnerOf(ctx context.Context, vmID string) (Replica, error)
}

// Sandboxes finds a tenant's sandbox (sandbox.Store).
type Sandboxes interface {
	Sandbox(ctx context.Context, tenantID, id string) (sandbox.Sandbox, error)
}

// Previews resolves a preview link's token (sandbox.Service).
type Previews interface {
	ResolvePreview(ctx context.Context, token string) (sandbox.PreviewLink, error)
}

// Config configures a Forwarder. Owners, Sandboxes and Key are required.
type Config struct {
	Owners    Owners
	Sandboxes Sandboxes
	// Previews, when set, lets the preview link door (/preview/:token/*)
	// be forwarded too.
	Previews Previews
	// Key is the installation-wide secret; the signing key is derived from
	// it, so it is never used as is.
	Key []byte
	// Clock dates and checks signatures; default the real one.
	Clock clockwork.Clock
	// MaxSkew bounds a signature's age; default DefaultMaxSkew.
	MaxSkew time.Duration
	// Transport reaches the owners; default an http.Transport of its own.
	Transport http.RoundTripper
	Log       *slog.Logger
	// Registerer takes the forward metrics; nil: not registered.
	Registerer prometheus.Registerer
}

// Forwarder routes channel requests to their owner.
type Forwarder struct {
	owners    Owners
	sandboxes Sandboxes
	previews  Previews
	key       []byte
	clock     clockwork.Clock
	maxSkew   time.Duration
	transport http.RoundTripper
	log       *slog.Logger
	forwards  *prometheus.CounterVec
}

// keyContext separates the forwarding key from every other use of the
// installation's key.
const keyContext = "stockade forward v1"

// New builds a Forwarder.
func New(cfg Config) (*Forwarder, error) {
	switch {
	case cfg.Owners == nil || cfg.Sandboxes == nil:
		return nil, errors.New("forward: owners and sandboxes are required")
	case len(cfg.Key) < 16:
		return nil, errors.New("forward: the installation key is required (at least 16 bytes)")
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.MaxSkew <= 0 {
		cfg.MaxSkew = DefaultMaxSkew
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Transport == nil {
		cfg.Transport = &http.Transport{
			Proxy:               nil, // the internal network, never a proxy from the environment
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
			// No response header timeout: a command's answer comes when it ends.
		}
	}
	m := hmac.New(sha256.New, cfg.Key)
	m.Write([]byte(keyContext))
	f := &Forwarder{owners: cfg.Owners, sandboxes: cfg.Sandboxes, previews: cfg.Previews, key: m.Sum(nil), clock: cfg.Clock,
		maxSkew: cfg.MaxSkew, transport: cfg.Transport, log: cfg.Log,
		forwards: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockade_forwards_total",
			Help: "Requests forwarded to the replica owning the VM's agent channel, by route template and result (ok: answered; unreachable: the owner did not answer; no_owner: no lease, 503)."},
			[]string{"route", "result"}),
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(f.forwards); err != nil {
			return nil, fmt.Errorf("forward: register metrics: %w", err)
		}
	}
	return f, nil
}

// Self is this replica.
func (f *Forwarder) Self() Replica { return f.owners.Self() }

// Target says where a request for a tenant's sandbox is served: self when
// this replica owns its VM's channel, or when there is no channel to own
// (no VM yet, or the sandbox ended: the handler answers that); else the
// owner. A sandbox of another tenant is errdefs.ErrNotFound; no owner now
// is an error wrapping errdefs.ErrUnavailable.
func (f *Forwarder) Target(ctx context.Context, tenantID, sandboxID string) (owner Replica, self bool, err error) {
	sb, err := f.sandboxes.Sandbox(ctx, tenantID, sandboxID)
	if err != nil {
		return Replica{}, false, err
	}
	if sb.VMID == "" || !sb.State.Active() {
		return f.Self(), true, nil
	}
	return f.OwnerOfVM(ctx, sb.VMID)
}

// Preview is the tenant, sandbox and principal ("preview:<link id>") of a
// live preview link's token; ok false when there is none (or no Previews):
// the door answers that itself.
func (f *Forwarder) Preview(ctx context.Context, token string) (tenantID, sandboxID, principal string, ok bool) {
	if f.previews == nil || token == "" {
		return "", "", "", false
	}
	l, err := f.previews.ResolvePreview(ctx, token)
	if err != nil {
		return "", "", "", false
	}
	return l.TenantID, l.SandboxID, "preview:" + l.ID, true
}

// OwnerOfVM is the owner of vmID's channel and whether it is this replica.
func (f *Forwarder) OwnerOfVM(ctx context.Context, vmID string) (Replica, bool, error) {
	o, err := f.owners.OwnerOf(ctx, vmID)
	if err != nil {
		if errdefs.IsUnavailable(err) {
			return Replica{}, false, &NoOwnerError{VMID: vmID, err: err}
		}
		return Replica{}, false, fmt.Errorf("owner of vm %s: %w", vmID, err)
	}
	return o, o.ID == f.Self().ID, nil
}

// NoOwnerError is a channel no replica owns now (a lease expired, its VM
// not adopted yet): retry after RetryAfter seconds. It is ErrUnavailable.
type NoOwnerError struct {
	VMID string
	err  error
}

func (e *NoOwnerError) Error() string {
	return "the sandbox's VM is being taken over by another replica: retry in " + strconv.Itoa(RetryAfter) + " s"
}

func (e *NoOwnerError) Is(target error) bool { return target == errdefs.ErrUnavailable }

func (e *NoOwnerError) Unwrap() error { return e.err }

// NoOwner counts a request answered 503 for want of an owner.
func (f *Forwarder) NoOwner(route string) { f.forwards.WithLabelValues(route, "no_owner").Inc() }

// mac is the signature of one request.
func (f *Forwarder) mac(method, uri, principal, remote, from string, unix int64) []byte {
	m := hmac.New(sha256.New, f.key)
	for _, s := range []string{method, uri, principal, remote, from, strconv.FormatInt(unix, 10)} {
		m.Write([]byte(s))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// sign is the Header value for a request this replica forwards.
func (f *Forwarder) sign(method, uri, principal, remote string) string {
	from, now := f.Self().ID, f.clock.Now().Unix()
	mac := f.mac(method, uri, principal, remote, from, now)
	return strings.Join([]string{"v1", from, strconv.FormatInt(now, 10), remote, base64.RawURLEncoding.EncodeToString(mac)}, " ")
}

// requestURI is what a signature covers of r's target: the escaped path
// and the raw query, as they travel.
func requestURI(u *url.URL) string {
	if u.RawQuery == "" {
		return u.EscapedPath()
	}
	return u.EscapedPath() + "?" + u.RawQuery
}

// ErrBadSignature refuses a request whose forward signature is not one a
// replica made just now for this request and principal.
var ErrBadSignature = errdefs.WithDetail(errdefs.ErrForbidden,
	"the "+Header+" header is for requests between replicas, and this one's signature is not valid")

// Take removes r's Header values and returns them (for Verify): called
// before anything else sees the request, so no handler ever does.
func Take(r *http.Request) []string {
	vals := r.Header.Values(Header)
	r.Header.Del(Header)
	return vals
}

// Verify checks the forward signature vals (Take) of r, if any, for
// principal (the caller the receiving side authenticated). forwarded
// reports a valid signature; a request without one is not forwarded (nil
// error); any other signature, a stale one or one from this very replica
// is ErrBadSignature. A forwarded request's RemoteAddr becomes the
// client's that the signature vouches for, so audit records name the
// client, not the replica.
func (f *Forwarder) Verify(r *http.Request, vals []string, principal string) (forwarded bool, err error) {
	if len(vals) == 0 {
		return false, nil
	}
	if len(vals) != 1 {
		return false, ErrBadSignature
	}
	parts := strings.Split(vals[0], " ")
	if len(parts) != 5 || parts[0] != "v1" || parts[1] == f.Self().ID {
		return false, ErrBadSignature
	}
	unix, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return false, ErrBadSignature
	}
	got, err := base64.RawURLEncoding.DecodeString(parts[4])
	if err != nil {
		return false, ErrBadSignature
	}
	want := f.mac(r.Method, requestURI(r.URL), principal, parts[3], parts[1], unix)
	if !hmac.Equal(got, want) {
		return false, ErrBadSignature
	}
	if age := f.clock.Now().Sub(time.Unix(unix, 0)); age > f.maxSkew || age < -f.maxSkew {
		return false, ErrBadSignature
	}
	r.RemoteAddr = parts[3]
	return true, nil
}

// Proxy sends r to owner, signed for principal, and copies the answer
// back as it comes. route labels the metrics; fail answers when the owner
// cannot be reached (nothing was written yet), in the surface's own error
// shape.
func (f *Forwarder) Proxy(w http.ResponseWriter, r *http.Request, owner Replica, principal, route string,
	fail func(w http.ResponseWriter, r *http.Request, err error)) {
	target, err := url.Parse(owner.InternalURL)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		f.forwards.WithLabelValues(route, "unreachable").Inc()
		fail(w, r, fmt.Errorf("forward to replica %s: bad internal URL %q: %w", owner.ID, owner.InternalURL, errdefs.ErrUnavailable))
		return
	}
	remote := r.RemoteAddr
	failed := false
	// The owner's answer comes with the headers its own middleware sets
	// (security headers, the sandbox port's policy, cookies): drop ours so
	// none is doubled, and keep them for an answer of our own. The request
	// id goes along, so both replicas log the request under one id.
	ours := w.Header().Clone()
	rid := ours.Get("X-Request-Id")
	clear(w.Header())
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			if rid != "" {
				pr.Out.Header.Set("X-Request-Id", rid)
			}
			// The owner sees the Host the client asked for: its Origin checks
			// and the URLs it writes are the public ones.
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del(Header)
			pr.Out.Header.Set(Header, f.sign(pr.Out.Method, requestURI(pr.Out.URL), principal, remote))
		},
		Transport:     f.transport,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(f.log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			failed = true
			for k, v := range ours {
				w.Header()[k] = v
			}
			f.log.WarnContext(r.Context(), "forward: owner unreachable", "replica", owner.ID, "route", route, "err", err)
			if r.Context().Err() != nil {
				return // the client went away
			}
			fail(w, r, fmt.Errorf("forward to replica %s: %w", owner.ID, errdefs.Unavailable("owner replica")))
		},
	}
	rp.ServeHTTP(w, r)
	if failed {
		f.forwards.WithLabelValues(route, "unreachable").Inc()
		return
	}
	f.forwards.WithLabelValues(route, "ok").Inc()
}
