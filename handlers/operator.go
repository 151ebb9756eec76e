package handlers

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

func (h *Handlers) tenantsView(c echo.Context, form views.TenantForm) (views.TenantsView, error) {
	ts, err := h.store.ListTenants(c.Request().Context())
	if err != nil {
		return views.TenantsView{}, err
	}
	frozen, err := h.store.FrozenTenants(c.Request().Context())
	if err != nil {
		return views.TenantsView{}, err
	}
	v := views.TenantsView{Form: form}
	for _, t := range ts {
		row := views.TenantRow{ID: t.ID, Slug: t.Slug, Name: t.Name, Members: t.Members, CreatedAt: t.CreatedAt}
		if f, ok := frozen[t.ID]; ok {
			row.Frozen = &views.FreezeView{Since: f.Since, Reason: f.Reason, By: f.By}
		} else if row.Live, err = h.sbx.LiveCount(c.Request().Context(), t.ID); err != nil {
			return views.TenantsView{}, err // what the freeze button's confirmation counts
		}
		v.Rows = append(v.Rows, row)
	}
	if v.Quotas, err = h.tenantQuotas(c.Request().Context(), ts); err != nil {
		return views.TenantsView{}, err
	}
	return v, nil
}

// OperatorTenants lists every tenant (platform operators).
func (h *Handlers) OperatorTenants(c echo.Context) error {
	v, err := h.tenantsView(c, views.TenantForm{})
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Tenants(h.page(c, "Tenants", "tenants"), v))
}

// OperatorCreateTenant creates a tenant, optionally inviting its first admin.
func (h *Handlers) OperatorCreateTenant(c echo.Context) error {
	cl := CallerOf(c)
	form := views.TenantForm{Slug: strings.TrimSpace(c.FormValue("slug")), Name: strings.TrimSpace(c.FormValue("name")), AdminEmail: strings.TrimSpace(c.FormValue("admin_email"))}
	t, err := h.store.CreateTenantWithAdmin(c.Request().Context(), cl.Actor(c), form.Slug, form.Name, form.AdminEmail)
	if err != nil {
		status := errdefs.HTTPStatus(err)
		err = conflictAsField(err, "slug", "slug_taken", "is already taken")
		if form.Errors, err = fieldErrors(err); err != nil {
			return err
		}
		v, err := h.tenantsView(c, form)
		if err != nil {
			return err
		}
		return render(c, status, views.Tenants(h.page(c, "Tenants", "tenants"), v))
	}
	msg := "Tenant " + t.Slug + " created."
	if form.AdminEmail != "" {
		msg += " " + form.AdminEmail + " is invited as admin."
	}
	h.flash(c, "success", msg)
	return redirect(c, "/operator/tenants")
}

// APITenants lists tenants (operators).
func (h *Handlers) APITenants(c echo.Context) error {
	ts, err := h.store.ListTenants(c.Request().Context())
	if err != nil {
		return err
	}
	frozen, err := h.store.FrozenTenants(c.Request().Context())
	if err != nil {
		return err
	}
	out := make([]api.Tenant, 0, len(ts))
	for _, t := range ts {
		n := t.Members
		tj := api.Tenant{ID: t.ID, Slug: t.Slug, Name: t.Name, Members: &n, CreatedAt: t.CreatedAt.UTC().Format(timeJSON)}
		if f, ok := frozen[t.ID]; ok {
			at := f.Since.UTC().Format(timeJSON)
			tj.FrozenAt = &at
		}
		out = append(out, tj)
	}
	return c.JSON(http.StatusOK, api.TenantList{Tenants: out})
}

// APICreateTenant creates a tenant (operators): {slug, name, admin_email}.
func (h *Handlers) APICreateTenant(c echo.Context) error {
	var in api.CreateTenant
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	t, err := h.store.CreateTenantWithAdmin(c.Request().Context(), CallerOf(c).Actor(c), strings.TrimSpace(in.Slug), strings.TrimSpace(in.Name), strings.TrimSpace(in.AdminEmail))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, api.Tenant{ID: t.ID, Slug: t.Slug, Name: t.Name, CreatedAt: t.CreatedAt.UTC().Format(timeJSON)})
}

// OperatorDestroyVM destroys any tenant's VM from /operator/hosts: POST
// /operator/vms/:id/destroy. It is for a VM stuck booting or stopping (a
// hung guest, an agent that never answers) that its tenant cannot end;
// the VM's tenant's audit log records vm.destroyed by the operator.
func (h *Handlers) OperatorDestroyVM(c echo.Context) error {
	const back = "/operator/hosts"
	svc, err := h.vmService()
	if err != nil {
		return h.vmActionResultTo(c, err, "", back)
	}
	ctx, id := c.Request().Context(), c.Param("id")
	sts, err := svc.ListAll(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(sts, func(st vmpool.Status) bool { return st.ID == id })
	if i < 0 {
		return fmt.Errorf("destroy vm %s: %w", id, errdefs.ErrNotFound)
	}
	_, err = svc.Destroy(ctx, CallerOf(c).Actor(c), sts[i].TenantID, id)
	return h.vmActionResultTo(c, err, "VM "+shortID(id)+" destroyed.", back)
}
