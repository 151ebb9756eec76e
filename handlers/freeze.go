package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

// freeze freezes the tenant, then destroys its sandboxes with reason
// "frozen". The freeze is recorded first, so no new sandbox starts while
// the live ones are destroyed.
func (h *Handlers) freeze(ctx context.Context, actor audit.Actor, tenantID, reason string) (api.Freeze, error) {
	f, err := h.store.FreezeTenant(ctx, actor, tenantID, reason)
	if err != nil {
		return api.Freeze{}, err
	}
	at := f.Since.UTC().Format(timeJSON)
	out := api.Freeze{TenantID: tenantID, Frozen: true, FrozenAt: &at, Reason: f.Reason}
	n, err := h.sbx.DestroyTenant(context.WithoutCancel(ctx), actor, tenantID, sandbox.ReasonFrozen)
	out.SandboxesDestroyed = n
	if err != nil {
		h.log.WarnContext(ctx, "freeze: sandboxes not all destroyed", "tenant", tenantID, "err", err)
		out.Error = err.Error()
	}
	return out, nil
}

// tenantByID returns a tenant for the operator routes, ErrNotFound if none.
func (h *Handlers) tenantByID(ctx context.Context, id string) (tenants.Tenant, error) {
	return h.store.TenantByID(ctx, id)
}

// APIFreezeTenant freezes a tenant (operators): {reason}. Its sandboxes are
// destroyed, no sandbox or VM may start; recordings and logs stay.
func (h *Handlers) APIFreezeTenant(c echo.Context) error {
	var in api.FreezeRequest
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	ctx := c.Request().Context()
	t, err := h.tenantByID(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	out, err := h.freeze(ctx, CallerOf(c).Actor(c), t.ID, in.Reason)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

// APIUnfreezeTenant lifts a tenant's freeze (operators).
func (h *Handlers) APIUnfreezeTenant(c echo.Context) error {
	ctx := c.Request().Context()
	t, err := h.tenantByID(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	if err := h.store.UnfreezeTenant(ctx, CallerOf(c).Actor(c), t.ID); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.Freeze{TenantID: t.ID})
}

// OperatorFreezeTenant is the freeze button of /operator/tenants. It
// needs a reason, and confirms first with how many live sandboxes it
// destroys (askFirst).
func (h *Handlers) OperatorFreezeTenant(c echo.Context) error {
	ctx := c.Request().Context()
	t, err := h.tenantByID(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	reason := strings.TrimSpace(c.FormValue("reason"))
	if reason == "" {
		err = errdefs.Required("reason")
	} else {
		err = tenants.CheckFreezeReason(reason)
	}
	if err != nil {
		var errs map[string]string
		return reshow(c, err, refusal{}, &errs, func() (templ.Component, error) {
			v, err := h.tenantsView(c, views.TenantForm{})
			for i := range v.Rows {
				if v.Rows[i].ID == t.ID {
					v.Rows[i].FreezeReason, v.Rows[i].FreezeErrors = reason, errs
				}
			}
			return views.Tenants(h.page(c, "Tenants", "tenants"), v), err
		})
	}
	live, err := h.sbx.LiveCount(ctx, t.ID)
	if err != nil {
		return err
	}
	if asked, err := h.askFirst(c, views.ConfirmView{Title: "Freeze " + t.Slug,
		Summary: []string{views.FreezeSummary(t.Slug, live), "Reason: " + reason}, Cancel: "/operator/tenants"}); asked {
		return err
	}
	out, err := h.freeze(ctx, CallerOf(c).Actor(c), t.ID, reason)
	switch {
	case errors.Is(err, errdefs.ErrConflict):
		h.flash(c, views.FlashError, "Tenant "+t.Slug+" is already frozen.")
	case err != nil:
		return err
	case out.Error != "":
		h.flash(c, views.FlashError, "Tenant "+t.Slug+" is frozen, but not every sandbox could be destroyed yet: "+out.Error)
	default:
		h.flash(c, views.FlashSuccess, "Tenant "+t.Slug+" is frozen; sandboxes destroyed: "+strconv.Itoa(out.SandboxesDestroyed)+".")
	}
	return redirect(c, "/operator/tenants")
}

// OperatorUnfreezeTenant is the unfreeze button of /operator/tenants.
func (h *Handlers) OperatorUnfreezeTenant(c echo.Context) error {
	ctx := c.Request().Context()
	t, err := h.tenantByID(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	err = h.store.UnfreezeTenant(ctx, CallerOf(c).Actor(c), t.ID)
	switch {
	case errors.Is(err, errdefs.ErrConflict):
		h.flash(c, views.FlashError, "Tenant "+t.Slug+" is not frozen.")
	case err != nil:
		return err
	default:
		h.flash(c, views.FlashSuccess, "Tenant "+t.Slug+" is unfrozen.")
	}
	return redirect(c, "/operator/tenants")
}

// confirmDestroySandbox is the confirm step of the sandbox page's destroy
// button: its live terminals counted.
func (h *Handlers) confirmDestroySandbox(c echo.Context) (bool, error) {
	ctx, cl, id := c.Request().Context(), CallerOf(c), c.Param("id")
	if _, err := h.sbx.Store().Sandbox(ctx, cl.Tenant.ID, id); err != nil {
		return true, err
	}
	what := "Destroying sandbox " + shortID(id) + " ends its processes and deletes its files for good."
	if n := len(h.terms.Live(cl.Tenant.ID, id)); n > 0 {
		what += fmt.Sprintf(" Its %d live terminal(s) end too.", n)
	}
	return h.askFirst(c, views.ConfirmView{Title: "Destroy sandbox " + shortID(id),
		Summary: []string{what, "Its recordings, command records and usage stay."}, Button: "Destroy sandbox", Cancel: "/sandboxes/" + id})
}
