package handlers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Ports (ports.go)
//
// A sandbox port is served through a reverse proxy whose transport dials a
// tunnel over the agent channel (sandbox.Service.DialPort), so HTTP and
// WebSocket (Upgrade) both pass. Three doors lead there:
//   - /api/v1/sandboxes/:id/ports/:port/... for a session or API token of
//     the tenant with sandboxes.write;
//   - /preview/<token>/... for anyone holding a live preview link;
//   - <port>-<id>.<STOCKADE_PREVIEW_DOMAIN> when configured: a preview link
//     as ?stockade_preview=<token> once, then a cookie of that host.
//
// What the sandbox answers is untrusted: headers are bounded, its
// documents served on the console's origin get a sandboxing CSP (an opaque
// origin: no access to the console's cookies or API) and its Set-Cookie is
// dropped there; the caller's credentials (Authorization, the console's
// cookies, the preview cookie) never reach the sandbox.

// Proxy bounds.
const (
	// portHeaderBytes bounds the response header the sandbox sends.
	portHeaderBytes = 64 << 10
	// portHeaderTimeout bounds the wait for the response header.
	portHeaderTimeout = 2 * time.Minute
	// previewQuery and previewCookie carry a preview link's token on a
	// preview host.
	previewQuery  = "stockade_preview"
	previewCookie = "stockade_preview"
)

// guestCSP is the policy of a document a sandbox serves on the console's
// origin: sandboxed into an opaque origin, scripts allowed.
const guestCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// portTarget is one proxied request: where it goes and how.
type portTarget struct {
	tenantID, sandboxID string
	port                int
	// path is the request path inside the sandbox's server.
	path string
	// sameOrigin: served on the console's own origin (sandbox the document,
	// drop Set-Cookie).
	sameOrigin bool
}

// APIPort proxies a request to a sandbox port:
// ANY /api/v1/sandboxes/:id/ports/:port/*.
func (h *Handlers) APIPort(c echo.Context) error {
	port, err := sandbox.ParsePort(c.Param("port"))
	cl := CallerOf(c)
	if err != nil {
		// The sandbox first: another tenant's is not found whatever the port.
		if _, serr := h.sbx.Get(c.Request().Context(), cl.Tenant.ID, c.Param("id")); serr != nil {
			return serr
		}
		return err
	}
	r := c.Request()
	if isUpgrade(r) && !h.sameOrigin(r) {
		return fmt.Errorf("%w: a page of another site may not open a sandbox port (Origin %q)", errdefs.ErrForbidden, r.Header.Get("Origin"))
	}
	return h.proxyPort(c, portTarget{tenantID: cl.Tenant.ID, sandboxID: c.Param("id"), port: port,
		path: "/" + c.Param("*"), sameOrigin: true})
}

// APIPortURL answers where a port is reached: GET /api/v1/sandboxes/:id/ports/:port.
func (h *Handlers) APIPortURL(c echo.Context) error {
	cl := CallerOf(c)
	sb, err := h.sbx.Get(c.Request().Context(), cl.Tenant.ID, c.Param("id"))
	if err != nil {
		return err
	}
	port, err := sandbox.ParsePort(c.Param("port"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.PortURL{URL: h.publicBase(c) + portPath(sb.ID, port)})
}

func portPath(id string, port int) string {
	return "/api/v1/sandboxes/" + id + "/ports/" + strconv.Itoa(port) + "/"
}

// Preview proxies a request with a preview link: ANY /preview/:token/*.
// An unknown, expired or revoked link is a plain 404.
func (h *Handlers) Preview(c echo.Context) error {
	l, err := h.sbx.ResolvePreview(c.Request().Context(), c.Param("token"))
	if err != nil {
		return echo.NewHTTPError(http.StatusNotFound, "This preview link does not exist, expired or was revoked.")
	}
	return h.proxyPort(c, portTarget{tenantID: l.TenantID, sandboxID: l.SandboxID, port: l.Port,
		path: "/" + c.Param("*"), sameOrigin: true})
}

// PreviewHost serves requests whose Host is <port>-<sandbox id>.<preview
// domain> (STOCKADE_PREVIEW_DOMAIN); others go on to next. It runs before
// routing, as the whole host is the sandbox's.
func (h *Handlers) PreviewHost(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		port, id, ok := h.previewHostOf(c.Request().Host)
		if !ok {
			return next(c)
		}
		r := c.Request()
		if tok := r.URL.Query().Get(previewQuery); tok != "" {
			l, err := h.sbx.ResolvePreview(r.Context(), tok)
			if err != nil || l.SandboxID != id || l.Port != port {
				return echo.NewHTTPError(http.StatusNotFound, "This preview link does not exist, expired or was revoked.")
			}
			c.SetCookie(&http.Cookie{Name: previewCookie, Value: tok, Path: "/", HttpOnly: true, Secure: h.cfg.SecureCookies,
				SameSite: http.SameSiteLaxMode, Expires: l.ExpiresAt})
			q := r.URL.Query()
			q.Del(previewQuery)
			u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
			return c.Redirect(http.StatusSeeOther, u.String())
		}
		ck, err := r.Cookie(previewCookie)
		if err != nil {
			return echo.NewHTTPError(http.StatusNotFound, "Open this preview with its link.")
		}
		l, err := h.sbx.ResolvePreview(r.Context(), ck.Value)
		if err != nil || l.SandboxID != id || l.Port != port {
			return echo.NewHTTPError(http.StatusNotFound, "This preview link does not exist, expired or was revoked.")
		}
		return h.proxyPort(c, portTarget{tenantID: l.TenantID, sandboxID: l.SandboxID, port: l.Port, path: r.URL.Path})
	}
}

// PreviewHostCookie is the preview link token a request to a preview host
// carries in its cookie: what the door of another replica resolves to
// find the sandbox and forward the request to the owner of its channel.
// ok is false for any other request (not a preview host, no cookie, or a
// link in the query, which the door answers by itself: it only sets the
// cookie).
func (h *Handlers) PreviewHostCookie(r *http.Request) (token string, ok bool) {
	if _, _, ok := h.previewHostOf(r.Host); !ok || r.URL.Query().Get(previewQuery) != "" {
		return "", false
	}
	ck, err := r.Cookie(previewCookie)
	if err != nil || ck.Value == "" {
		return "", false
	}
	return ck.Value, true
}

// previewHostOf parses host as <port>-<sandbox id>.<preview domain>.
func (h *Handlers) previewHostOf(host string) (int, string, bool) {
	d := h.cfg.PreviewDomain
	if d == "" {
		return 0, "", false
	}
	if hp, _, err := net.SplitHostPort(host); err == nil {
		host = hp
	}
	label, ok := strings.CutSuffix(strings.ToLower(host), "."+strings.ToLower(d))
	if !ok || strings.Contains(label, ".") {
		return 0, "", false
	}
	p, id, ok := strings.Cut(label, "-")
	if !ok {
		return 0, "", false
	}
	port, err := sandbox.ParsePort(p)
	if err != nil || id == "" {
		return 0, "", false
	}
	return port, id, true
}

// previewURL is where a preview link's token opens its port.
func (h *Handlers) previewURL(c echo.Context, l sandbox.PreviewLink, token string) string {
	if d := h.cfg.PreviewDomain; d != "" {
		scheme := "http"
		if h.cfg.SecureCookies {
			scheme = "https"
		}
		return fmt.Sprintf("%s://%d-%s.%s/?%s=%s", scheme, l.Port, l.SandboxID, d, previewQuery, token)
	}
	return h.publicBase(c) + "/preview/" + token + "/"
}

// publicBase is the server's public URL without a trailing slash (the Host
// asked when none is configured).
func (h *Handlers) publicBase(c echo.Context) string {
	if h.cfg.PublicURL != "" {
		return strings.TrimSuffix(h.cfg.PublicURL, "/")
	}
	return c.Scheme() + "://" + c.Request().Host
}

func isUpgrade(r *http.Request) bool {
	return r.Header.Get("Upgrade") != "" && strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade")
}

// proxyPort dials the tunnel first, so a refusal (no such sandbox, not
// running, nothing listening, a bad port) is a clear error, then hands the
// tunnel to a reverse proxy for this one request.
func (h *Handlers) proxyPort(c echo.Context, t portTarget) error {
	r := c.Request()
	conn, err := h.sbx.DialPort(r.Context(), t.tenantID, t.sandboxID, t.port)
	if err != nil {
		return err
	}
	var once sync.Once
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var got net.Conn
		once.Do(func() { got = conn })
		if got != nil {
			return got, nil
		}
		return h.sbx.DialPort(ctx, t.tenantID, t.sandboxID, t.port)
	}
	tr := &http.Transport{DialContext: dial, DisableKeepAlives: true, MaxResponseHeaderBytes: portHeaderBytes,
		ResponseHeaderTimeout: portHeaderTimeout, DisableCompression: true}
	defer tr.CloseIdleConnections()
	defer once.Do(func() { conn.Close() }) // not used: a request that never dialled
	hostPort := "localhost:" + strconv.Itoa(t.port)
	rp := &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", hostPort
			pr.Out.URL.Path, pr.Out.URL.RawPath = t.path, ""
			pr.Out.Host = hostPort
			stripCredentials(pr.Out)
		},
		ModifyResponse: func(resp *http.Response) error {
			if t.sameOrigin {
				resp.Header.Del("Set-Cookie")
				resp.Header.Set("Content-Security-Policy", guestCSP)
			}
			resp.Header.Del("Strict-Transport-Security")
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			h.log.Info("port proxy", "sandbox", t.sandboxID, "port", t.port, "err", err)
			http.Error(w, "stockade: the sandbox's server on port "+strconv.Itoa(t.port)+" gave no valid answer", http.StatusBadGateway)
		},
	}
	// The console's own headers are not the guest's: the proxy copies the
	// guest's (bounded), under the console's frame and referrer rules.
	hdr := c.Response().Header()
	hdr.Del("Content-Security-Policy")
	hdr.Del("Cache-Control")
	hdr.Set("Referrer-Policy", "no-referrer")
	rp.ServeHTTP(c.Response(), r)
	in, out := conn.Bytes()
	h.log.Debug("port tunnel", "sandbox", t.sandboxID, "port", t.port, "bytes_in", in, "bytes_out", out)
	return nil
}

// stripCredentials removes what authenticated the caller to the console:
// the sandbox never sees a session, token, CSRF or preview cookie.
func stripCredentials(r *http.Request) {
	r.Header.Del("Authorization")
	r.Header.Del("X-Csrf-Token")
	cookies := r.Cookies()
	r.Header.Del("Cookie")
	for _, ck := range cookies {
		if strings.HasPrefix(ck.Name, "stockade_") || strings.HasPrefix(ck.Name, "__Host-stockade_") {
			continue
		}
		r.AddCookie(ck)
	}
}

// APICreatePreviewLink makes a preview link: POST /api/v1/sandboxes/:id/previews.
func (h *Handlers) APICreatePreviewLink(c echo.Context) error {
	var in api.CreatePreviewLink
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl := CallerOf(c)
	l, token, err := h.sbx.CreatePreviewLink(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), in.Port,
		time.Duration(in.TTLSeconds)*time.Second)
	if err != nil {
		return err
	}
	out := h.previewJSON(l)
	out.URL = h.previewURL(c, l, token)
	return c.JSON(http.StatusCreated, out)
}

// APIPreviewLinks lists a sandbox's preview links: GET /api/v1/sandboxes/:id/previews.
func (h *Handlers) APIPreviewLinks(c echo.Context) error {
	cl := CallerOf(c)
	links, err := h.sbx.PreviewLinks(c.Request().Context(), cl.Tenant.ID, c.Param("id"))
	if err != nil {
		return err
	}
	out := api.PreviewLinkList{Links: []api.PreviewLink{}}
	for _, l := range links {
		out.Links = append(out.Links, h.previewJSON(l))
	}
	return c.JSON(http.StatusOK, out)
}

// APIRevokePreviewLink revokes one: DELETE /api/v1/sandboxes/:id/previews/:preview_id.
func (h *Handlers) APIRevokePreviewLink(c echo.Context) error {
	cl := CallerOf(c)
	l, err := h.sbx.RevokePreviewLink(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), c.Param("preview_id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.previewJSON(l))
}

func (h *Handlers) previewJSON(l sandbox.PreviewLink) api.PreviewLink {
	return api.PreviewLink{ID: l.ID, SandboxID: l.SandboxID, Port: l.Port, CreatedBy: l.CreatedBy, CreatedAt: l.CreatedAt.UTC().Format(timeJSON),
		ExpiresAt: l.ExpiresAt.UTC().Format(timeJSON), RevokedAt: timePtr(l.RevokedAt), Active: l.Active(h.clock())}
}

// errPortForm is what the page says of a refused port or link.
func errPortForm(err error) string {
	var fe *errdefs.FieldError
	if errors.As(err, &fe) {
		return fe.Field + " " + fe.Detail
	}
	return err.Error()
}
