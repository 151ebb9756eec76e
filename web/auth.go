package web

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// authenticate establishes the caller: an API token (bearer, API routes
// only) or a browser session cookie. It never rejects by itself: authorize
// decides per route.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		handlers.SetMayOpen(c, s.mayOpen(c))
		if authz := c.Request().Header.Get(echo.HeaderAuthorization); authz != "" && s.isAPI(c) {
			if err := s.authenticateToken(c, authz); err != nil {
				return err
			}
			return next(c)
		}
		ck, err := c.Cookie(handlers.SessionCookieName(s.cfg.SecureCookies))
		if err != nil || ck.Value == "" {
			return next(c)
		}
		sess, err := s.store.SessionBySecret(ctx, ck.Value, s.cfg.SessionIdle)
		if errors.Is(err, errdefs.ErrUnauthorized) || errors.Is(err, errdefs.ErrNotFound) {
			c.SetCookie(&http.Cookie{Name: ck.Name, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: s.cfg.SecureCookies, SameSite: http.SameSiteLaxMode})
			return next(c)
		}
		if err != nil {
			return err
		}
		user, err := s.store.UserByID(ctx, sess.UserID)
		if err != nil {
			return err
		}
		uts, err := s.store.UserTenants(ctx, user.ID)
		if err != nil {
			return err
		}
		cl := &handlers.Caller{Kind: "user", User: &user, Session: &sess, Tenants: uts,
			Operator: s.cfg.OperatorEmails[strings.ToLower(user.Email)]}
		for _, ut := range uts {
			if ut.Tenant.ID == sess.TenantID {
				t := ut.Tenant
				cl.Tenant, cl.Role = &t, ut.Role
			}
		}
		handlers.SetCaller(c, cl)
		return next(c)
	}
}

// authenticateToken makes the API token of authz ("Bearer stk_...") the
// caller: the one token lookup of the API routes and /mcp. A refused
// token is audited (rate-limited) and answers errdefs.ErrUnauthorized.
func (s *Server) authenticateToken(c echo.Context, authz string) error {
	scheme, secret, _ := strings.Cut(authz, " ")
	if !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return errdefs.ErrUnauthorized
	}
	tok, tenant, err := s.store.AuthenticateToken(c.Request().Context(), strings.TrimSpace(secret))
	if errors.Is(err, errdefs.ErrUnauthorized) {
		// Known but dead tokens go to their tenant's log; unknown ones
		// to the platform's (never any part of the secret).
		tenantID, details := "", map[string]any{"reason": "unknown or malformed", "path": c.Request().URL.Path}
		var te *tenants.TokenError
		if errors.As(err, &te) {
			tenantID, details["reason"], details["token_prefix"] = te.TenantID, te.Reason, te.Prefix
		}
		s.handlers.AuditAuthFailure(c, audit.TypeTokenFailed, tenantID, details)
	}
	if err != nil {
		return err
	}
	handlers.SetCaller(c, &handlers.Caller{Kind: "token", Token: &tok, Tenant: &tenant, Role: tok.Role})
	c.Set(bearerKey, true)
	return nil
}

const bearerKey = "stockade.bearer"

// authorize enforces a route's permission.
func (s *Server) authorize(r Route) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			cl := handlers.CallerOf(c)
			if r.Perm == tenants.PermPublic {
				return next(c)
			}
			if cl.Kind == "anonymous" {
				if r.API {
					return errdefs.ErrUnauthorized
				}
				return c.Redirect(http.StatusSeeOther, "/login?return_to="+url.QueryEscape(c.Request().URL.RequestURI()))
			}
			switch {
			case r.Perm == tenants.PermSignedIn:
				return next(c)
			case r.Perm == tenants.PermOperator:
				if !cl.Operator {
					s.handlers.AuditAccessDenied(c, "", map[string]any{"permission": string(r.Perm)})
					if !r.API {
						return forbidden(handlers.OperatorRefusal())
					}
					return forbidden("this needs a platform operator")
				}
				return next(c)
			}
			if cl.Tenant == nil {
				if r.API {
					return forbidden("no tenant selected: choose one in the web app, or use an API token")
				}
				return c.Redirect(http.StatusSeeOther, "/tenants/choose")
			}
			if !tenants.Can(cl.Role, r.Perm) {
				s.handlers.AuditAccessDenied(c, cl.Tenant.ID, map[string]any{"permission": string(r.Perm), "role": string(cl.Role)})
				if !r.API { // a person in the browser: in words, and whom to ask
					return forbidden(s.handlers.Refusal(c, r.Perm))
				}
				return forbidden("the " + string(cl.Role) + " role does not allow " + string(r.Perm))
			}
			for _, chk := range r.Also {
				if (chk.When == nil || chk.When(c)) && !tenants.Can(cl.Role, chk.Perm) {
					s.handlers.AuditAccessDenied(c, cl.Tenant.ID, map[string]any{"permission": string(chk.Perm), "role": string(cl.Role)})
					if !r.API {
						return forbidden(s.handlers.Refusal(c, chk.Perm))
					}
					return forbidden("the " + string(cl.Role) + " role " + chk.Refusal)
				}
			}
			return next(c)
		}
	}
}

func forbidden(detail string) error { return errdefs.WithDetail(errdefs.ErrForbidden, detail) }
