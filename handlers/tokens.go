package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/a-h/templ"
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

// tokenOwner is the person whose tokens the caller's own are: the signed-in
// user, or the member who made the calling token ("" for a token no member
// made, which owns none).
func tokenOwner(cl *Caller) string {
	switch {
	case cl.User != nil:
		return cl.User.ID
	case cl.Token != nil && cl.Token.CreatedByUserID != nil:
		return *cl.Token.CreatedByUserID
	}
	return ""
}

// listTokens is the tokens the caller may see: every token of the tenant
// with tokens.read, else their own (tokens.own).
func (h *Handlers) listTokens(c echo.Context) (ts []tenants.APIToken, all bool, err error) {
	cl := CallerOf(c)
	ctx := c.Request().Context()
	if tenants.Can(cl.Role, tenants.PermTokensRead) {
		ts, err = h.store.ListTokens(ctx, cl.Tenant.ID)
		return ts, true, err
	}
	owner := tokenOwner(cl)
	if owner == "" {
		return nil, false, nil
	}
	ts, err = h.store.ListTokensOf(ctx, cl.Tenant.ID, owner)
	return ts, false, err
}

// revokeToken revokes a token the caller may revoke: any of the tenant's
// with tokens.write, else only their own; another member's is not found.
func (h *Handlers) revokeToken(c echo.Context) error {
	cl := CallerOf(c)
	ctx, id := c.Request().Context(), c.Param("id")
	if tenants.Can(cl.Role, tenants.PermTokensWrite) {
		return h.store.RevokeToken(ctx, cl.Actor(c), cl.Tenant.ID, id)
	}
	owner := tokenOwner(cl)
	if owner == "" {
		return fmt.Errorf("revoke token %s: %w", id, errdefs.ErrNotFound)
	}
	return h.store.RevokeTokenOf(ctx, cl.Actor(c), cl.Tenant.ID, owner, id)
}

// tokenForm is the create form's defaults: 30 days, developer when the
// caller may make one, else their own role.
func tokenForm(cl *Caller) views.TokenForm {
	role := tenants.RoleDeveloper
	if !slices.Contains(tenants.RolesCoveredBy(cl.Role), role) {
		role = cl.Role
	}
	return views.TokenForm{Role: string(role), TTL: "30d"}
}

func (h *Handlers) tokensView(c echo.Context, form views.TokenForm) (views.TokensView, error) {
	cl := CallerOf(c)
	ts, all, err := h.listTokens(c)
	if err != nil {
		return views.TokensView{}, err
	}
	owner, anyRevoke := tokenOwner(cl), tenants.Can(cl.Role, tenants.PermTokensWrite)
	var roles []string
	for _, r := range tenants.RolesCoveredBy(cl.Role) {
		roles = append(roles, string(r))
	}
	v := views.TokensView{CanEdit: true, All: all, Role: string(cl.Role), Roles: roles, Form: form, TTLChoices: ttlChoices}
	names := map[string]string{}
	if all {
		ms, err := h.store.ListMembers(c.Request().Context(), cl.Tenant.ID)
		if err != nil {
			return views.TokensView{}, err
		}
		for _, m := range ms {
			if m.UserID != nil {
				names[*m.UserID] = m.Email
			}
		}
	}
	now := h.clock()
	for _, t := range ts {
		mine := owner != "" && t.CreatedByUserID != nil && *t.CreatedByUserID == owner
		row := views.TokenRow{
			ID: t.ID, Name: t.Name, Prefix: t.Prefix, Role: string(t.Role), CreatedAt: t.CreatedAt,
			ExpiresAt: t.ExpiresAt, LastUsedAt: t.LastUsedAt, Revoked: t.RevokedAt != nil, Expired: !t.ExpiresAt.After(now),
			Mine: mine, CanRevoke: mine || anyRevoke,
		}
		switch {
		case mine:
			row.CreatedBy = "you"
		case t.CreatedByUserID == nil:
			row.CreatedBy = "an operator"
		case names[*t.CreatedByUserID] != "":
			row.CreatedBy = names[*t.CreatedByUserID]
		default:
			row.CreatedBy = "a former member"
		}
		v.Rows = append(v.Rows, row)
	}
	return v, nil
}

// Tokens lists the caller's API tokens, or all of the tenant's for those
// who may read them (tokens.read).
func (h *Handlers) Tokens(c echo.Context) error {
	v, err := h.tokensView(c, tokenForm(CallerOf(c)))
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Tokens(h.page(c, "API tokens", "tokens"), v))
}

// CreateToken makes a token, of a role the caller's covers, and shows its
// secret once, in this response only: never in a redirect, a flash or a log.
func (h *Handlers) CreateToken(c echo.Context) error {
	cl := CallerOf(c)
	form := views.TokenForm{Name: strings.TrimSpace(c.FormValue("name")), Role: c.FormValue("role"), TTL: c.FormValue("ttl")}
	nt := tenants.NewToken{Name: form.Name, Role: tenants.Role(form.Role)}
	var (
		secret string
		tok    tenants.APIToken
		err    error
	)
	if nt.TTL, err = tenants.ParseTTL(form.TTL); err != nil {
		// Every field at fault shows at once, the TTL's with the others'.
		_, cerr := nt.Check()
		err = errors.Join(err, cerr)
	} else {
		secret, tok, err = h.store.CreateToken(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, nt)
	}
	if err != nil {
		return reshow(c, err, refusal{}, &form.Errors, func() (templ.Component, error) {
			v, err := h.tokensView(c, form)
			return views.Tokens(h.page(c, "API tokens", "tokens"), v), err
		})
	}
	v, err := h.tokensView(c, tokenForm(cl))
	if err != nil {
		return err
	}
	if secret != "" {
		v.NewSecret, v.NewSecretName = secret, tok.Name
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, http.StatusOK, views.Tokens(h.page(c, "API tokens", "tokens"), v))
}

// RevokeToken revokes a token from the tokens page, confirmed.
func (h *Handlers) RevokeToken(c echo.Context) error {
	// The token the caller may revoke (their own, or any with
	// tokens.write): another's is not found, confirmation or not.
	cl := CallerOf(c)
	ts, err := h.store.ListTokens(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		return err
	}
	owner, anyToken := tokenOwner(cl), tenants.Can(cl.Role, tenants.PermTokensWrite)
	i := slices.IndexFunc(ts, func(t tenants.APIToken) bool {
		return t.ID == c.Param("id") && (anyToken || (owner != "" && t.CreatedByUserID != nil && *t.CreatedByUserID == owner))
	})
	if i < 0 {
		return fmt.Errorf("revoke token %s: %w", c.Param("id"), errdefs.ErrNotFound)
	}
	if asked, err := h.askFirst(c, views.ConfirmView{Title: "Revoke token " + ts[i].Name,
		Summary: []string{"Revoking " + ts[i].Name + " (" + ts[i].Prefix + ", " + string(ts[i].Role) + ") stops it working at once: every CLI, agent or script using it gets 401 from its next request."},
		Button:  "Revoke token", Cancel: "/settings/tokens"}); asked {
		return err
	}
	if err := h.revokeToken(c); err != nil {
		return err
	}
	h.flash(c, "success", "Token revoked. It stops working immediately.")
	return redirect(c, "/settings/tokens")
}

func tokenJSON(t tenants.APIToken) api.Token {
	out := api.Token{ID: t.ID, Name: t.Name, Prefix: t.Prefix, Role: string(t.Role),
		CreatedAt: t.CreatedAt.UTC().Format(timeJSON), ExpiresAt: t.ExpiresAt.UTC().Format(timeJSON), Revoked: t.RevokedAt != nil}
	if t.LastUsedAt != nil {
		s := t.LastUsedAt.UTC().Format(timeJSON)
		out.LastUsedAt = &s
	}
	return out
}

// APITokens lists the caller's tokens, or all of the tenant's with
// tokens.read.
func (h *Handlers) APITokens(c echo.Context) error {
	ts, _, err := h.listTokens(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.TokenList{Tokens: each(ts, tokenJSON)})
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

// APIRevokeToken revokes a token: the caller's own, or any with
// tokens.write.
func (h *Handlers) APIRevokeToken(c echo.Context) error {
	if err := h.revokeToken(c); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
