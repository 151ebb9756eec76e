package handlers

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/views"
)

var secretTTLChoices = []views.Choice{
	{Value: "1h", Label: "1 hour"}, {Value: "24h", Label: "1 day"}, {Value: "7d", Label: "7 days"},
	{Value: "30d", Label: "30 days"}, {Value: "90d", Label: "90 days"}, {Value: "365d", Label: "1 year"},
}

// splitHosts reads a comma or whitespace separated host list.
func splitHosts(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
}

func (h *Handlers) secretsView(c echo.Context, form views.SecretForm) (views.SecretsView, error) {
	cl := CallerOf(c)
	list, err := h.secrets.List(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		return views.SecretsView{}, err
	}
	v := views.SecretsView{CanEdit: tenants.Can(cl.Role, tenants.PermSecretsWrite), Form: form, TTLChoices: secretTTLChoices}
	for _, s := range list {
		row := views.SecretRow{Name: s.Name, State: s.State, CreatedAt: s.CreatedAt, ExpiresAt: s.ExpiresAt, RevokedAt: s.RevokedAt}
		if v.CanEdit {
			row.Hosts, row.CreatedBy, row.Inject = s.Hosts, s.CreatedBy, s.Inject
		}
		v.Rows = append(v.Rows, row)
	}
	return v, nil
}

// SecretsPage lists the tenant's secrets: admins see hosts and may add and
// revoke; others see names and states.
func (h *Handlers) SecretsPage(c echo.Context) error {
	v, err := h.secretsView(c, newSecretForm())
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Secrets(h.page(c, "Secrets", views.NavSecrets), v))
}

// CreateSecret stores a secret from the form. The value is never echoed
// back, not even when the form fails.
func (h *Handlers) CreateSecret(c echo.Context) error {
	cl := CallerOf(c)
	form := injectForm(c)
	form.Name, form.Hosts, form.TTL = strings.TrimSpace(c.FormValue("name")), strings.TrimSpace(c.FormValue("hosts")), c.FormValue("ttl")
	value := c.FormValue("value")
	ns := secrets.NewSecret{Name: form.Name, Value: value, Hosts: splitHosts(form.Hosts)}
	// What the form itself cannot read is reported with what the store
	// would refuse, so every field at fault shows at once.
	var errs []error
	var err error
	if ns.TTL, err = tenants.ParseTTL(form.TTL); err != nil {
		errs = append(errs, err)
	}
	if ns.Inject, err = formInject(form); err != nil {
		errs = append(errs, err)
	}
	var sec secrets.Secret
	if len(errs) > 0 {
		_, err = ns.Check()
		err = errors.Join(append(errs, err)...)
	} else {
		sec, err = h.secrets.Create(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, ns)
	}
	if err != nil {
		return reshow(c, err, refusal{
			Conflict: &errdefs.FieldError{Field: "name", Rule: "secret_exists", Detail: "a live secret has this name: revoke it first to replace it"},
			// The value is never sent back: a refused form asks for it again.
			Keep: func(errs map[string]string) {
				if _, ok := errs["value"]; !ok && value != "" {
					errs["value"] = "enter the value again: it is never sent back to the page"
				}
			},
		}, &form.Errors, func() (templ.Component, error) {
			v, err := h.secretsView(c, form)
			return views.Secrets(h.page(c, "Secrets", views.NavSecrets), v), err
		})
	}
	v, err := h.secretsView(c, newSecretForm())
	if err != nil {
		return err
	}
	v.Created, v.CreatedEchoable = sec.Name, slices.ContainsFunc(sec.Inject, secrets.Echoable)
	c.Response().Header().Set("Cache-Control", "no-store")
	p := h.page(c, "Secrets", views.NavSecrets)
	p.Flash = append(p.Flash, views.Flash{Kind: views.FlashSuccess, ID: "secret-saved",
		Text: "Secret " + sec.Name + " saved. Its value cannot be shown again: to change it, revoke it and create it anew."})
	return render(c, http.StatusOK, views.Secrets(p, v))
}

// newSecretForm is the empty create form: Authorization ticked.
func newSecretForm() views.SecretForm {
	return views.SecretForm{TTL: "30d", Inject: secrets.DefaultInject()}
}

// injectForm reads the "goes in" fields of a secrets form.
func injectForm(c echo.Context) views.SecretForm {
	f := views.SecretForm{Headers: strings.TrimSpace(c.FormValue("headers"))}
	if vals, err := c.FormParams(); err == nil {
		f.Inject = vals["inject"]
	}
	return f
}

// formInject is the locations a form ticked and named; none at all is an
// error (a form has no "default").
func formInject(f views.SecretForm) ([]string, error) {
	locs := slices.Clone(f.Inject)
	for _, h := range splitHosts(f.Headers) {
		locs = append(locs, secrets.InjectHeaderPrefix+h)
	}
	if len(locs) == 0 {
		return nil, errdefs.Invalid("inject", "inject_none", "tick at least one place the secret may go")
	}
	return secrets.NormalizeInject(locs)
}

// SetSecretInject changes where a secret may go, from the secrets page.
func (h *Handlers) SetSecretInject(c echo.Context) error {
	cl := CallerOf(c)
	name := c.Param("name")
	form := injectForm(c)
	sec, err := func() (secrets.Secret, error) {
		inject, err := formInject(form)
		if err != nil {
			return secrets.Secret{}, err
		}
		return h.secrets.SetInject(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, name, inject)
	}()
	if err != nil {
		return reshow(c, err, refusal{}, &form.Errors, func() (templ.Component, error) {
			v, err := h.secretsView(c, newSecretForm())
			v.Edit, v.EditForm = name, form
			return views.Secrets(h.page(c, "Secrets", views.NavSecrets), v), err
		})
	}
	msg := "Saved where " + sec.Name + " goes. The gateway applies it from the next connection."
	kind := views.FlashSuccess
	if slices.ContainsFunc(sec.Inject, secrets.Echoable) {
		kind, msg = views.FlashWarn, msg+" It may now go in a URL or request body: an upstream that stores or echoes it there could hand it back."
	}
	h.flash(c, kind, msg)
	return redirect(c, "/settings/secrets")
}

// RevokeSecret revokes a secret from the secrets page.
func (h *Handlers) RevokeSecret(c echo.Context) error {
	cl := CallerOf(c)
	if err := h.secrets.Revoke(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("name")); err != nil {
		return err
	}
	h.flash(c, "success", "Secret revoked. The gateway stops using it at the next request.")
	return redirect(c, "/settings/secrets")
}

func secretJSON(s secrets.Secret, full bool) api.Secret {
	ts := func(t *time.Time) *string {
		if t == nil {
			return nil
		}
		v := t.UTC().Format(timeJSON)
		return &v
	}
	out := api.Secret{Name: s.Name, State: s.State, CreatedAt: s.CreatedAt.UTC().Format(timeJSON), ExpiresAt: ts(s.ExpiresAt), RevokedAt: ts(s.RevokedAt)}
	if full {
		out.Hosts, out.Inject, out.CreatedBy = s.Hosts, s.Inject, s.CreatedBy
	}
	return out
}

// APISecrets lists the tenant's secrets.
func (h *Handlers) APISecrets(c echo.Context) error {
	cl := CallerOf(c)
	list, err := h.secrets.List(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		return err
	}
	full := tenants.Can(cl.Role, tenants.PermSecretsWrite)
	out := each(list, func(s secrets.Secret) api.Secret { return secretJSON(s, full) })
	return c.JSON(http.StatusOK, api.SecretList{Secrets: out})
}

// APICreateSecret stores a secret: {name, value, hosts, ttl}. The answer
// never holds the value.
func (h *Handlers) APICreateSecret(c echo.Context) error {
	var in api.CreateSecret
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	ttl, err := tenants.ParseTTL(in.TTL)
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	s, err := h.secrets.Create(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, secrets.NewSecret{Name: in.Name, Value: in.Value, Hosts: in.Hosts, Inject: in.Inject, TTL: ttl})
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusCreated, secretJSON(s, true))
}

// APIUpdateSecret changes where the tenant's live secret :name may be
// injected: {inject: [...]} (empty: the Authorization header only).
func (h *Handlers) APIUpdateSecret(c echo.Context) error {
	var in api.UpdateSecret
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl := CallerOf(c)
	s, err := h.secrets.SetInject(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("name"), in.Inject)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, secretJSON(s, true))
}

// APIRevokeSecret revokes the tenant's live secret called :name.
func (h *Handlers) APIRevokeSecret(c echo.Context) error {
	cl := CallerOf(c)
	if err := h.secrets.Revoke(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("name")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
