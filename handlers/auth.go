package handlers

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

// SessionCookieName is the browser session cookie; the __Host- prefix pins
// it to this origin whenever it can be Secure.
func SessionCookieName(secure bool) string {
	if secure {
		return "__Host-stockade_session"
	}
	return "stockade_session"
}

func (h *Handlers) setSessionCookie(c echo.Context, secret string) {
	c.SetCookie(&http.Cookie{
		Name: SessionCookieName(h.cfg.SecureCookies), Value: secret, Path: "/",
		MaxAge: int(h.cfg.SessionAbsolute.Seconds()), HttpOnly: true,
		Secure: h.cfg.SecureCookies, SameSite: http.SameSiteLaxMode,
	})
}

func (h *Handlers) clearSessionCookie(c echo.Context) {
	c.SetCookie(&http.Cookie{
		Name: SessionCookieName(h.cfg.SecureCookies), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: h.cfg.SecureCookies, SameSite: http.SameSiteLaxMode,
	})
}

// LoginPage shows the sign-in card.
func (h *Handlers) LoginPage(c echo.Context) error {
	if CallerOf(c).User != nil {
		return c.Redirect(http.StatusSeeOther, "/")
	}
	return render(c, http.StatusOK, views.LoginPage(h.page(c, "Sign in", "login"), views.LoginView{
		ProviderName: h.cfg.ProviderName, DevIdP: h.cfg.DevIdP, ReturnTo: c.QueryParam("return_to"),
	}))
}

// LoginStart redirects to the identity provider.
func (h *Handlers) LoginStart(c echo.Context) error {
	url, err := h.idp.Begin(c.Response(), c.Request(), c.QueryParam("return_to"))
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusFound, url)
}

// LoginCallback finishes the OIDC flow and starts a session.
func (h *Handlers) LoginCallback(c echo.Context) error {
	ctx := c.Request().Context()
	id, returnTo, err := h.idp.Finish(c.Response(), c.Request())
	if err != nil {
		h.log.WarnContext(ctx, "login failed", "err", err, "request_id", c.Response().Header().Get(echo.HeaderXRequestID))
		h.AuditAuthFailure(c, audit.TypeLoginFailed, "", map[string]any{"reason": err.Error()})
		return render(c, http.StatusUnauthorized, views.LoginPage(h.page(c, "Sign in", "login"), views.LoginView{
			ProviderName: h.cfg.ProviderName, DevIdP: h.cfg.DevIdP,
			Error: "Sign-in did not complete. Please try again.",
		}))
	}
	// Only a verified email may claim invitations or operator rights.
	email := id.Email
	if !id.EmailVerified {
		email = ""
	}
	user, err := h.store.UpsertUserAtLogin(ctx, tenants.Identity{Issuer: id.Issuer, Subject: id.Subject, Email: email, Name: id.Name})
	if err != nil {
		return err
	}
	uts, err := h.store.UserTenants(ctx, user.ID)
	if err != nil {
		return err
	}
	// One tenant: act in it. Several: the user picks one explicitly.
	tenantID := ""
	if len(uts) == 1 {
		tenantID = uts[0].Tenant.ID
	}
	// A fresh session id at every login: a planted cookie never becomes a
	// signed-in session.
	if old := CallerOf(c).Session; old != nil {
		_ = h.store.DeleteSession(ctx, old.ID)
	}
	secret, sess, err := h.store.CreateSession(ctx, user.ID, tenantID, c.Request().UserAgent(), c.RealIP(), h.cfg.SessionAbsolute)
	if err != nil {
		return err
	}
	h.setSessionCookie(c, secret)
	_ = h.audit.Record(ctx, audit.Event{
		TenantID: tenantID, Type: "auth.login", Outcome: "success",
		ActorKind: "user", ActorID: user.ID, ActorName: user.Email,
		RemoteAddr: c.RealIP(), RequestID: c.Response().Header().Get(echo.HeaderXRequestID),
		Details: map[string]any{"issuer": id.Issuer, "session": sess.ID[:12]},
	})
	if returnTo == "" || !strings.HasPrefix(returnTo, "/") || strings.HasPrefix(returnTo, "//") {
		returnTo = "/"
	}
	return c.Redirect(http.StatusSeeOther, returnTo)
}

// Logout ends the session.
func (h *Handlers) Logout(c echo.Context) error {
	cl := CallerOf(c)
	if cl.Session != nil {
		if err := h.store.DeleteSession(c.Request().Context(), cl.Session.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		_ = h.audit.Record(c.Request().Context(), audit.Event{
			TenantID: cl.TenantID(), Type: "auth.logout", Outcome: "success",
			ActorKind: "user", ActorID: cl.User.ID, ActorName: cl.User.Email,
			RemoteAddr: c.RealIP(), RequestID: c.Response().Header().Get(echo.HeaderXRequestID),
		})
	}
	h.clearSessionCookie(c)
	return redirect(c, "/login")
}

// ChooseTenant lists the caller's tenants when none is active.
func (h *Handlers) ChooseTenant(c echo.Context) error {
	cl := CallerOf(c)
	p := h.page(c, "Choose a tenant", "")
	if len(cl.Tenants) == 0 {
		return render(c, http.StatusOK, views.NoTenant(p, views.NoTenantView{IsOperator: cl.Operator}))
	}
	return render(c, http.StatusOK, views.ChooseTenant(p, views.ChooseTenantView{Tenants: p.Tenants}))
}

// SwitchTenant makes another of the caller's tenants the active one.
func (h *Handlers) SwitchTenant(c echo.Context) error {
	cl := CallerOf(c)
	slug := c.FormValue("slug")
	for _, ut := range cl.Tenants {
		if ut.Tenant.Slug == slug {
			if err := h.store.SetSessionTenant(c.Request().Context(), cl.Session.ID, ut.Tenant.ID); err != nil {
				return err
			}
			h.flash(c, "info", "Now acting in "+ut.Tenant.Name+" as "+string(ut.Role)+".")
			return redirect(c, "/")
		}
	}
	return errdefs.ErrNotFound
}
