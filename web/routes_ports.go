package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/tenants"
)

// PortProxyPath is the route that proxies to a sandbox port; every method
// of portMethods is served on it.
const PortProxyPath = "/api/v1/sandboxes/:id/ports/:port/*"

// portMethods are the methods the port proxy passes on.
// (HEAD is not: the route table's answers are problem documents, which a
// HEAD answer cannot carry).
var portMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// portRoutes are the routes of sandbox ports and their preview links
// (handlers/ports.go); the preview link door itself (/preview/:token/*)
// authenticates by its token and is mounted outside the table (server.go).
func portRoutes(h *handlers.Handlers) []Route {
	W := tenants.PermSandboxesWrite
	proxyErrors := map[int]string{409: "The sandbox is not running", 404: "No such sandbox, or nothing listens on the port in the sandbox",
		422: "The port is not 1 to 65535 (errors[].field: port)", 429: "Too many tunnels open to this sandbox (max_port_tunnels)",
		502: "The sandbox's server gave no valid answer (headers over 64 KiB, or none within 2 minutes)",
		403: "The caller's role lacks sandboxes.write, or a WebSocket handshake from a page of another site"}
	var routes []Route
	for _, m := range portMethods {
		routes = append(routes, Route{Method: m, Path: PortProxyPath, Perm: W, API: true, Handler: h.APIPort, Channel: "id",
			Doc: &Doc{Summary: "Proxy a request (HTTP or a WebSocket upgrade) to a port a process listens on inside the sandbox", Tag: "ports",
				Params: api.PortParams{}, Errors: proxyErrors,
				Answers: []Answer{{Status: http.StatusOK, Desc: "Whatever the sandbox's server answers (any status; 101 for a WebSocket); " +
					"documents get a sandboxing Content-Security-Policy and no Set-Cookie", Content: []Content{{Media: "*/*", Schema: textSchema("", "")}}}}}})
	}
	return append(routes,
		// The Ports card of the sandbox page.
		Route{Method: http.MethodGet, Path: "/sandboxes/:id/ports/open", Perm: W, Handler: h.OpenPort, Channel: "id"},
		Route{Method: http.MethodPost, Path: "/sandboxes/:id/previews", Perm: W, Handler: h.CreatePreviewPage, Channel: "id"},
		Route{Method: http.MethodPost, Path: "/sandboxes/:id/previews/:preview_id/revoke", Perm: W, Handler: h.RevokePreviewPage},
		Route{Method: http.MethodGet, Path: "/api/v1/sandboxes/:id/ports/:port", Perm: W, API: true, Handler: h.APIPortURL, Channel: "id",
			Doc: &Doc{Summary: "Where a sandbox port is reached through this server", Tag: "ports", Params: api.PortParams{},
				Answers: ok("The URL", api.PortURL{}), Errors: map[int]string{422: "The port is not 1 to 65535 (errors[].field: port)"}}},
		Route{Method: http.MethodPost, Path: "/api/v1/sandboxes/:id/previews", Perm: W, API: true, Handler: h.APICreatePreviewLink, Channel: "id",
			Doc: &Doc{Summary: "Create a preview link: an expiring URL that opens a sandbox port without a session", Tag: "ports",
				Body:    jsonIn(api.CreatePreviewLink{}),
				Answers: []Answer{answer(http.StatusCreated, "The link; url (with its token) is shown this once", api.PreviewLink{})},
				Errors: map[int]string{409: "The sandbox has ended", 422: "port not 1 to 65535, or ttl_seconds not 60 to 604800",
					429: "The sandbox has 50 live links (max_preview_links)"}}},
		Route{Method: http.MethodGet, Path: "/api/v1/sandboxes/:id/previews", Perm: W, API: true, Handler: h.APIPreviewLinks,
			Doc: &Doc{Summary: "List a sandbox's preview links, newest first (revoked and expired too)", Tag: "ports",
				Answers: ok("The links", api.PreviewLinkList{})}},
		Route{Method: http.MethodDelete, Path: "/api/v1/sandboxes/:id/previews/:preview_id", Perm: W, API: true, Handler: h.APIRevokePreviewLink,
			Doc: &Doc{Summary: "Revoke a preview link: it stops working at once", Tag: "ports",
				Answers: ok("The link, revoked", api.PreviewLink{}), Errors: map[int]string{409: "Revoked already"}}},
	)
}

// mountPreviews serves the preview link doors: /preview/:token/* on this
// host, and whole preview hosts when a preview domain is configured.
func (s *Server) mountPreviews(h *handlers.Handlers) {
	s.echo.Pre(s.forwardPreviewHost(h), h.PreviewHost)
	s.echo.Any("/preview/:token/*", s.forwardPreview(h.Preview))
	s.echo.Any("/preview/:token", func(c echo.Context) error {
		return c.Redirect(http.StatusSeeOther, c.Request().URL.Path+"/")
	})
}
