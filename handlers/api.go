package handlers

import (
	"context"
	"net/http"
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

// Readyz says whether the server can serve: its database answers.
func (h *Handlers) Readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if h.ready != nil {
		if err := h.ready(ctx); err != nil {
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": err.Error()})
		}
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}
