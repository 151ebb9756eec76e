package handlers

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/views"
)

// Me describes the caller: GET /api/v1/me.
func (h *Handlers) Me(c echo.Context) error {
	cl := CallerOf(c)
	out := map[string]any{"kind": cl.Kind, "operator": cl.Operator}
	if cl.User != nil {
		out["user"] = map[string]any{"id": cl.User.ID, "email": cl.User.Email, "name": cl.User.Name, "issuer": cl.User.Issuer}
	}
	if cl.Token != nil {
		out["token"] = map[string]any{"id": cl.Token.ID, "name": cl.Token.Name, "prefix": cl.Token.Prefix,
			"expires_at": cl.Token.ExpiresAt.UTC().Format(timeJSON)}
	}
	if cl.Tenant != nil {
		out["tenant"] = cl.Tenant.Slug
		out["tenant_name"] = cl.Tenant.Name
		out["role"] = string(cl.Role)
	} else {
		out["tenant"] = nil
		out["role"] = nil
	}
	return c.JSON(http.StatusOK, out)
}

// Settings shows the signed-in person's profile and session.
func (h *Handlers) Settings(c echo.Context) error {
	cl := CallerOf(c)
	v := views.SettingsView{Email: cl.User.Email, Name: cl.User.Name, Issuer: cl.User.Issuer, Role: string(cl.Role)}
	if cl.Session != nil {
		v.SessionCreated, v.SessionExpires = cl.Session.CreatedAt, cl.Session.ExpiresAt
	}
	return render(c, http.StatusOK, views.Settings(h.page(c, "Settings", "settings"), v))
}

// Healthz says the process is alive.
func (h *Handlers) Healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// Readyz says whether the server can serve: its database answers, its
// identity provider is discovered and, when it runs VMs, a libvirt host is
// reachable and the guest image's templates loaded. A 503 names each check
// that failed ("libvirt": why).
func (h *Handlers) Readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	var failed []string
	check := func(name string, err error) {
		checks[name] = "ok"
		if err != nil {
			checks[name] = err.Error()
			failed = append(failed, err.Error())
		}
	}
	if h.ready != nil {
		check("server", h.ready(ctx))
	}
	if h.vms != nil {
		check("libvirt", h.vms.Available())
	}
	if h.sbx != nil { // a broken guest image: no sandbox can be created
		check("templates", h.sbx.TemplatesAvailable())
	}
	if len(failed) > 0 {
		return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "error": strings.Join(failed, "; "), "checks": checks})
	}
	return c.JSON(http.StatusOK, map[string]any{"status": "ready", "checks": checks})
}
