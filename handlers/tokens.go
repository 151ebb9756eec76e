package handlers

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

var ttlChoices = []views.Choice{
	{Value: "24h", Label: "1 day"}, {Value: "7d", Label: "7 days"}, {Value: "30d", Label: "30 days"},
	{Value: "90d", Label: "90 days"}, {Value: "365d", Label: "1 year"},
}

func (h *Handlers) tokensView(c echo.Context, form views.TokenForm) (views.TokensView, error) {
	cl := CallerOf(c)
	ts, err := h.store.ListTokens(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		return views.TokensView{}, err
	}
	now := h.clock()
	v := views.TokensView{CanEdit: tenants.Can(cl.Role, tenants.PermTokensWrite), Roles: roleNames(), Form: form, TTLChoices: ttlChoices}
	for _, t := range ts {
		v.Rows = append(v.Rows, views.TokenRow{
			ID: t.ID, Name: t.Name, Prefix: t.Prefix, Role: string(t.Role), CreatedAt: t.CreatedAt,
			ExpiresAt: t.ExpiresAt, LastUsedAt: t.LastUsedAt, Revoked: t.RevokedAt != nil, Expired: !t.ExpiresAt.After(now),
		})
	}
	return v, nil
}

// Tokens lists the tenant's API tokens.
func (h *Handlers) Tokens(c echo.Context) error {
	v, err := h.tokensView(c, views.TokenForm{Role: string(tenants.RoleDeveloper), TTL: "30d"})
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Tokens(h.page(c, "API tokens", "tokens"), v))
}

// CreateToken makes a token and shows its secret once, in this response
// only: never in a redirect, a flash or a log.
func (h *Handlers) CreateToken(c echo.Context) error {
	cl := CallerOf(c)
	form := views.TokenForm{Name: strings.TrimSpace(c.FormValue("name")), Role: c.FormValue("role"), TTL: c.FormValue("ttl")}
	secret, tok, err := func() (string, tenants.APIToken, error) {
		ttl, err := tenants.ParseTTL(form.TTL)
		if err != nil {
			return "", tenants.APIToken{}, err
		}
		return h.store.CreateToken(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, tenants.NewToken{Name: form.Name, Role: tenants.Role(form.Role), TTL: ttl})
	}()
	status := http.StatusOK
	if err != nil {
		status = errdefs.HTTPStatus(err)
		if form.Errors, err = fieldErrors(err); err != nil {
			return err
		}
	} else {
		form = views.TokenForm{Role: string(tenants.RoleDeveloper), TTL: "30d"}
	}
	v, err := h.tokensView(c, form)
	if err != nil {
		return err
	}
	if secret != "" {
		v.NewSecret, v.NewSecretName = secret, tok.Name
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, status, views.Tokens(h.page(c, "API tokens", "tokens"), v))
}

// RevokeToken revokes a token from the tokens page.
func (h *Handlers) RevokeToken(c echo.Context) error {
	cl := CallerOf(c)
	if err := h.store.RevokeToken(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id")); err != nil {
		return err
	}
	h.flash(c, "success", "Token revoked. It stops working immediately.")
	return redirect(c, "/settings/tokens")
}

// TokenJSON is a token in the API (never its secret, except once at creation).
type TokenJSON = api.Token

func tokenJSON(t tenants.APIToken) TokenJSON {
	out := TokenJSON{ID: t.ID, Name: t.Name, Prefix: t.Prefix, Role: string(t.Role),
		CreatedAt: t.CreatedAt.UTC().Format(timeJSON), ExpiresAt: t.ExpiresAt.UTC().Format(timeJSON), Revoked: t.RevokedAt != nil}
	if t.LastUsedAt != nil {
		s := t.LastUsedAt.UTC().Format(timeJSON)
		out.LastUsedAt = &s
	}
	return out
}

// APITokens lists tokens.
func (h *Handlers) APITokens(c echo.Context) error {
	ts, err := h.store.ListTokens(c.Request().Context(), CallerOf(c).Tenant.ID)
	if err != nil {
		return err
	}
	out := make([]TokenJSON, 0, len(ts))
	for _, t := range ts {
		out = append(out, tokenJSON(t))
	}
	return c.JSON(http.StatusOK, api.TokenList{Tokens: out})
}

// APICreateToken creates a token: {name, role, ttl}; the secret is in the
// response once.
func (h *Handlers) APICreateToken(c echo.Context) error {
	var in api.CreateToken
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	ttl, err := tenants.ParseTTL(in.TTL)
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	secret, tok, err := h.store.CreateToken(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, tenants.NewToken{Name: in.Name, Role: tenants.Role(in.Role), TTL: ttl})
	if err != nil {
		return err
	}
	out := tokenJSON(tok)
	out.Token = secret
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusCreated, out)
}

// APIRevokeToken revokes a token.
func (h *Handlers) APIRevokeToken(c echo.Context) error {
	cl := CallerOf(c)
	if err := h.store.RevokeToken(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
