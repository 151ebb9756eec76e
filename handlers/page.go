package handlers

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/views"
)

// CSRFContextKey is where web/'s CSRF middleware leaves the token.
const CSRFContextKey = "csrf"

// page builds the shell view model for the signed-in caller.
func (h *Handlers) page(c echo.Context, title, active string) views.Page {
	cl := CallerOf(c)
	p := views.Page{
		Title:        title,
		Active:       active,
		IsOperator:   cl.Operator,
		DevIdP:       h.cfg.DevIdP,
		RequestID:    c.Response().Header().Get(echo.HeaderXRequestID),
		AssetVersion: h.cfg.AssetVersion,
	}
	if tok, ok := c.Get(CSRFContextKey).(string); ok {
		p.CSRF = tok
	}
	if cl.User != nil {
		p.User = views.User{Email: cl.User.Email, Name: cl.User.Name}
	}
	if cl.Tenant != nil {
		p.Tenant = views.Tenant{Slug: cl.Tenant.Slug, Name: cl.Tenant.Name}
		p.Role = string(cl.Role)
	}
	for _, ut := range cl.Tenants {
		p.Tenants = append(p.Tenants, views.TenantChoice{
			Slug: ut.Tenant.Slug, Name: ut.Tenant.Name, Role: string(ut.Role),
			Current: cl.Tenant != nil && cl.Tenant.ID == ut.Tenant.ID,
		})
	}
	p.Nav = nav(c)
	p.Flash = h.takeFlash(c)
	if f := h.tenantFreeze(c); f != nil {
		p.Frozen = &views.FreezeView{Since: f.Freeze.Since, Reason: f.Freeze.Reason, By: f.Freeze.By}
	}
	return p
}

// tenantFreeze is the caller's tenant's freeze, nil when it is not frozen
// (or the lookup failed: logged, the page goes on without the banner).
func (h *Handlers) tenantFreeze(c echo.Context) *tenants.FrozenError {
	cl := CallerOf(c)
	if cl.Tenant == nil {
		return nil
	}
	f, frozen, err := h.store.TenantFreeze(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		h.log.WarnContext(c.Request().Context(), "read tenant freeze", "tenant", cl.Tenant.ID, "err", err)
		return nil
	}
	if !frozen {
		return nil
	}
	return &tenants.FrozenError{Freeze: f}
}

// frozenReason is why a create form of a frozen tenant is disabled ("" when
// it is not frozen).
func (h *Handlers) frozenReason(c echo.Context) string {
	if f := h.tenantFreeze(c); f != nil {
		return "Disabled: " + f.Error() + "."
	}
	return ""
}

const flashCookie = "stockade_flash"

// flash leaves a one-shot message for the next page (post/redirect/get).
// The cookie is signed so nobody can plant messages in a victim's page.
func (h *Handlers) flash(c echo.Context, kind, text string) {
	v := kind + "|" + text
	enc := base64.RawURLEncoding.EncodeToString([]byte(v))
	c.SetCookie(&http.Cookie{
		Name: flashCookie, Value: enc + "." + h.sign(enc), Path: "/", MaxAge: 60,
		HttpOnly: true, Secure: h.cfg.SecureCookies, SameSite: http.SameSiteLaxMode,
	})
}

func (h *Handlers) takeFlash(c echo.Context) []views.Flash {
	ck, err := c.Cookie(flashCookie)
	if err != nil || ck.Value == "" {
		return nil
	}
	c.SetCookie(&http.Cookie{Name: flashCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: h.cfg.SecureCookies, SameSite: http.SameSiteLaxMode})
	enc, sig, ok := strings.Cut(ck.Value, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(h.sign(enc))) {
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return nil
	}
	kind, text, _ := strings.Cut(string(raw), "|")
	return []views.Flash{{Kind: kind, Text: text}}
}

func (h *Handlers) sign(s string) string {
	m := hmac.New(sha256.New, h.cfg.FlashKey)
	m.Write([]byte("flash:" + s))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// redirect answers a form post with 303 See Other.
func redirect(c echo.Context, to string) error { return c.Redirect(http.StatusSeeOther, to) }

// ErrorShell is the shell model for error pages rendered by web/.
func (h *Handlers) ErrorShell(c echo.Context) views.Page {
	return h.page(c, "Error", "")
}

// askFirst is the confirm step of a destructive form post: unless the post
// says confirm=yes it answers with a page saying what the action will do
// (v.Summary, counted by the caller after it found the object, so another
// tenant's is still "not found") and a button that posts the same form
// again, confirmed; asked is then true and err what rendering said. With
// static/js/app.js the form's data-confirm dialog confirms instead.
func (h *Handlers) askFirst(c echo.Context, v views.ConfirmView) (asked bool, err error) {
	if c.FormValue("confirm") == "yes" {
		return false, nil
	}
	v.Action = c.Request().URL.Path
	if vals, err := c.FormParams(); err == nil {
		for name, vs := range vals {
			if name == "confirm" || name == "_csrf" {
				continue
			}
			for _, x := range vs {
				v.Fields = append(v.Fields, views.Choice{Value: name, Label: x})
			}
		}
		slices.SortFunc(v.Fields, func(a, b views.Choice) int { return strings.Compare(a.Value, b.Value) })
	}
	if v.Button == "" {
		v.Button = v.Title
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return true, render(c, http.StatusOK, views.Confirm(h.page(c, v.Title, ""), v))
}
