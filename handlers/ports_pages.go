package handlers

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

// The Ports card of a sandbox's page (views/ports.templ).

// portsView builds the card for a caller who may use ports (sandboxes.write).
func (h *Handlers) portsView(c echo.Context, v views.SandboxView) (*views.PortsView, error) {
	cl := CallerOf(c)
	links, err := h.sbx.PreviewLinks(c.Request().Context(), cl.Tenant.ID, v.Row.ID)
	if err != nil {
		return nil, err
	}
	pv := &views.PortsView{SandboxID: v.Row.ID, Running: v.Row.State == string(sandbox.StateRunning), CSRF: v.CSRF, Now: h.clock()}
	for _, l := range links {
		pv.Links = append(pv.Links, views.PreviewLinkRow{ID: l.ID, Port: l.Port, CreatedBy: l.CreatedBy, CreatedAt: l.CreatedAt,
			ExpiresAt: l.ExpiresAt, Revoked: l.RevokedAt != nil, Active: l.Active(pv.Now)})
	}
	return pv, nil
}

// renderSandboxPorts renders the sandbox's page with its Ports card as
// edit says (a new link, or a refused form), with status.
func (h *Handlers) renderSandboxPorts(c echo.Context, status int, edit func(*views.PortsView)) error {
	v, err := h.sandboxView(c)
	if err != nil {
		return err
	}
	if v.Ports, err = h.portsView(c, v); err != nil {
		return err
	}
	edit(v.Ports)
	return render(c, status, views.SandboxPage(h.page(c, "Sandbox "+shortID(v.Row.ID), views.NavSandboxes), v))
}

// OpenPort sends the browser to a port of the sandbox through the port
// route: GET /sandboxes/:id/ports/open?port=N.
func (h *Handlers) OpenPort(c echo.Context) error {
	cl := CallerOf(c)
	sb, err := h.sbx.Get(c.Request().Context(), cl.Tenant.ID, c.Param("id"))
	if err != nil {
		return err
	}
	port, err := sandbox.ParsePort(strings.TrimSpace(c.QueryParam("port")))
	if err != nil {
		return h.renderSandboxPorts(c, http.StatusUnprocessableEntity, func(p *views.PortsView) {
			p.Port, p.Errors = c.QueryParam("port"), map[string]string{"port": "Must be a TCP port, 1 to 65535."}
		})
	}
	return c.Redirect(http.StatusSeeOther, portPath(sb.ID, port))
}

// CreatePreviewPage makes a preview link from the card and shows it once:
// POST /sandboxes/:id/previews (port, ttl_minutes).
func (h *Handlers) CreatePreviewPage(c echo.Context) error {
	cl := CallerOf(c)
	portText, ttlText := strings.TrimSpace(c.FormValue("port")), strings.TrimSpace(c.FormValue("ttl_minutes"))
	refuse := func(field, msg string) error {
		return h.renderSandboxPorts(c, http.StatusUnprocessableEntity, func(p *views.PortsView) {
			p.Port, p.TTLMinutes, p.Errors = portText, ttlText, map[string]string{field: msg}
		})
	}
	port, err := sandbox.ParsePort(portText)
	if err != nil {
		if _, serr := h.sbx.Get(c.Request().Context(), cl.Tenant.ID, c.Param("id")); serr != nil {
			return serr
		}
		return refuse("port", "Must be a TCP port, 1 to 65535.")
	}
	var ttl time.Duration
	if ttlText != "" {
		n, err := strconv.Atoi(ttlText)
		if err != nil || n < 1 || n > int(sandbox.MaxPreviewTTL/time.Minute) {
			return refuse("ttl_minutes", "Must be 1 to "+strconv.Itoa(int(sandbox.MaxPreviewTTL/time.Minute))+" minutes.")
		}
		ttl = time.Duration(n) * time.Minute
	}
	l, token, err := h.sbx.CreatePreviewLink(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), port, ttl)
	var fe *errdefs.FieldError
	switch {
	case errors.As(err, &fe):
		return refuse(views.FormError, errPortForm(err))
	case errors.Is(err, errdefs.ErrConflict), errors.Is(err, errdefs.ErrQuota):
		return refuse(views.FormError, "No link made: "+err.Error())
	case err != nil:
		return err
	}
	url := h.previewURL(c, l, token)
	return h.renderSandboxPorts(c, http.StatusOK, func(p *views.PortsView) { p.NewURL = url })
}

// RevokePreviewPage revokes a link from the card:
// POST /sandboxes/:id/previews/:preview_id/revoke.
func (h *Handlers) RevokePreviewPage(c echo.Context) error {
	cl := CallerOf(c)
	_, err := h.sbx.RevokePreviewLink(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), c.Param("preview_id"))
	switch {
	case err == nil:
		h.flash(c, views.FlashSuccess, "Preview link revoked: it no longer opens the port.")
	case errors.Is(err, errdefs.ErrConflict):
		h.flash(c, views.FlashError, "That link was revoked already.")
	default:
		return err
	}
	return redirect(c, "/sandboxes/"+c.Param("id")+"#ports")
}
