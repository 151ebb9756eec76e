package handlers

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/views"
)

// Me describes the caller: GET /api/v1/me.
func (h *Handlers) Me(c echo.Context) error {
	cl := CallerOf(c)
	out := api.Me{Kind: cl.Kind, Operator: cl.Operator}
	if cl.User != nil {
		out.User = &api.MeUser{ID: cl.User.ID, Email: cl.User.Email, Name: cl.User.Name, Issuer: cl.User.Issuer}
	}
	if cl.Token != nil {
		out.Token = &api.MeToken{ID: cl.Token.ID, Name: cl.Token.Name, Prefix: cl.Token.Prefix, ExpiresAt: cl.Token.ExpiresAt.UTC().Format(timeJSON)}
	}
	if cl.Tenant != nil {
		slug, role := cl.Tenant.Slug, string(cl.Role)
		out.Tenant, out.TenantName, out.Role = &slug, cl.Tenant.Name, &role
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
	return c.JSON(http.StatusOK, api.Status{Status: "ok"})
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
	check("server", h.ready(ctx))
	if h.vms.Started() == nil {
		check("libvirt", h.vms.Available())
	}
	// A broken guest image: no sandbox can be created.
	check("templates", h.sbx.TemplatesAvailable())
	var repl *api.Replication
	if h.replication != nil {
		r, err := h.replication(ctx)
		check("replication", err)
		repl = r
	}
	if len(failed) > 0 {
		return c.JSON(http.StatusServiceUnavailable, api.Status{Status: "unavailable", Error: strings.Join(failed, "; "), Checks: checks, Replication: repl})
	}
	return c.JSON(http.StatusOK, api.Status{Status: "ready", Checks: checks, Replication: repl})
}
