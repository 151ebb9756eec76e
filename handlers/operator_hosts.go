package handlers

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

// hostsView is the data of /operator/hosts.
func (h *Handlers) hostsView(c echo.Context, add views.HostForm) (views.HostsView, error) {
	v := views.HostsView{VMs: views.VMTable{ShowTenant: true, Operator: true}, Add: add}
	if tok, ok := c.Get(CSRFContextKey).(string); ok {
		v.VMs.CSRF = tok
	}
	svc, err := h.vmService()
	if err != nil {
		v.Unavailable = err.Error()
		return v, nil
	}
	ctx := c.Request().Context()
	hs, err := svc.Hosts(ctx)
	if err != nil {
		return v, err
	}
	for _, j := range hostRows(hs) {
		row := views.HostRow{URI: j.URI, Health: j.Health, Reason: j.Reason, Configured: j.Configured, DomainType: j.DomainType,
			CPUs: j.CPUs, MemoryMiB: int(j.MemoryMiB), FreeMemoryMiB: int(j.FreeMemoryMiB), VMs: j.VMs,
			AllocVCPUs: j.AllocVCPUs, AllocMemoryMiB: j.AllocMemoryMiB, State: j.State, StateReason: j.StateReason,
			Labels: vmpool.Labels(j.Labels).String()}
		if j.LastSeenAt != nil {
			row.LastSeen, _ = time.Parse(timeJSON, *j.LastSeenAt)
		}
		if j.DownAt != nil {
			row.DownAt, _ = time.Parse(timeJSON, *j.DownAt)
		}
		v.Hosts = append(v.Hosts, row)
	}
	sts, err := svc.ListAll(ctx)
	if err != nil {
		return v, err
	}
	ts, err := h.store.ListTenants(ctx)
	if err != nil {
		return v, err
	}
	slugs := make(map[string]string, len(ts))
	for _, t := range ts {
		slugs[t.ID] = t.Slug
	}
	v.VMs.Rows = vmRows(sts, slugs, h.clock())
	return v, nil
}

// OperatorHosts lists hosts, with their actions, and every tenant's VMs:
// GET /operator/hosts.
func (h *Handlers) OperatorHosts(c echo.Context) error {
	v, err := h.hostsView(c, views.HostForm{})
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.OperatorHosts(h.page(c, "Hosts", "hosts"), v))
}

// OperatorAddHost is the add form of /operator/hosts: POST /operator/hosts.
// A host that does not answer, a bad URI or labels, or a host already there
// re-show the form with the message and nothing is added.
func (h *Handlers) OperatorAddHost(c echo.Context) error {
	form := views.HostForm{URI: strings.TrimSpace(c.FormValue("uri")), Labels: c.FormValue("labels")}
	labels, err := vmpool.ParseLabels("labels", form.Labels)
	if err == nil {
		_, err = h.vms.AddHost(c.Request().Context(), CallerOf(c).Actor(c), form.URI, labels)
	}
	if errors.Is(err, vmpool.ErrUnavailable) {
		h.flash(c, views.FlashError, "Hypervisor unavailable: "+err.Error())
		return redirect(c, "/operator/hosts")
	}
	if err != nil {
		conflict := &errdefs.FieldError{Field: "uri", Rule: "host_exists", Detail: "this host is already there"}
		return reshow(c, err, refusal{Conflict: conflict}, &form.Errors, func() (templ.Component, error) {
			v, verr := h.hostsView(c, form)
			return views.OperatorHosts(h.page(c, "Hosts", "hosts"), v), verr
		})
	}
	h.flash(c, views.FlashSuccess, "Host "+form.URI+" added.")
	return redirect(c, "/operator/hosts")
}

// OperatorHostAction is the buttons of a host on /operator/hosts: POST
// /operator/hosts/{cordon,uncordon,drain,remove} with the host's uri.
// Draining and removing confirm first; the last active host is refused
// with the reason (the API can force it).
func (h *Handlers) OperatorHostAction(action string) echo.HandlerFunc {
	return func(c echo.Context) error {
		const back = "/operator/hosts"
		uri := strings.TrimSpace(c.FormValue("uri"))
		if action == "drain" || action == "remove" {
			summary := "New VMs go elsewhere; its warm VMs are destroyed and refilled on other hosts; sandboxes running there are left to end. It shows drained once empty."
			if action == "remove" {
				summary = "It is no longer connected to, even if STOCKADE_LIBVIRT_URIS names it; adding it again brings it back."
			}
			if asked, err := h.askFirst(c, views.ConfirmView{Title: strings.ToUpper(action[:1]) + action[1:] + " " + uri,
				Summary: []string{summary}, Cancel: back}); asked {
				return err
			}
		}
		_, err := h.hostAction(c, action, api.HostAction{URI: uri})
		if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalid) {
			h.flash(c, views.FlashError, "Not done: "+err.Error())
			return redirect(c, back)
		}
		return h.vmActionResultTo(c, err, "Host "+uri+": "+action+" done.", back)
	}
}

// hostAction runs one state change of a host.
func (h *Handlers) hostAction(c echo.Context, action string, in api.HostAction) (vmpool.HostStatus, error) {
	ctx, actor := c.Request().Context(), CallerOf(c).Actor(c)
	svc := h.vms
	if err := svc.Started(); err != nil {
		return vmpool.HostStatus{}, err
	}
	if in.URI == "" {
		return vmpool.HostStatus{}, errdefs.Required("uri")
	}
	if len(in.Reason) > 500 {
		return vmpool.HostStatus{}, errdefs.Invalid("reason", "too_long", "at most 500 characters")
	}
	switch action {
	case "cordon":
		return svc.CordonHost(ctx, actor, in.URI, in.Reason, in.Force)
	case "uncordon":
		return svc.UncordonHost(ctx, actor, in.URI)
	case "drain":
		return svc.DrainHost(ctx, actor, in.URI, in.Reason, in.Force)
	}
	return vmpool.HostStatus{}, svc.RemoveHost(ctx, actor, in.URI)
}

// APIOperatorHosts lists the hosts: GET /api/v1/operator/hosts.
func (h *Handlers) APIOperatorHosts(c echo.Context) error { return h.APIHosts(c) }

// APIAddHost adds a host: POST /api/v1/operator/hosts.
func (h *Handlers) APIAddHost(c echo.Context) error {
	var in api.AddHost
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if err := h.vms.Started(); err != nil {
		return err
	}
	st, err := h.vms.AddHost(c.Request().Context(), CallerOf(c).Actor(c), in.URI, vmpool.Labels(in.Labels))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, hostRows([]vmpool.HostStatus{st})[0])
}

// APIHostAction is POST /api/v1/operator/hosts/{cordon,uncordon,drain,remove}.
func (h *Handlers) APIHostAction(action string) echo.HandlerFunc {
	return func(c echo.Context) error {
		var in api.HostAction
		if err := decodeJSON(c, &in); err != nil {
			return err
		}
		st, err := h.hostAction(c, action, in)
		if err != nil {
			return err
		}
		if action == "remove" {
			return c.NoContent(http.StatusNoContent)
		}
		return c.JSON(http.StatusOK, hostRows([]vmpool.HostStatus{st})[0])
	}
}

func hostConstraintJSON(c vmpool.HostConstraint) api.HostConstraint {
	out := api.HostConstraint{TenantID: c.TenantID, Labels: map[string]string(c.Labels)}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if !c.UpdatedAt.IsZero() {
		out.UpdatedAt = timePtr(&c.UpdatedAt)
	}
	return out
}

// APIHostConstraint is GET /api/v1/tenants/:id/host-constraint (operators).
func (h *Handlers) APIHostConstraint(c echo.Context) error {
	ctx := c.Request().Context()
	t, err := h.tenantByID(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	hc, err := h.vms.Store().HostConstraint(ctx, t.ID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, hostConstraintJSON(hc))
}

// APISetHostConstraint is PUT /api/v1/tenants/:id/host-constraint
// (operators, audited host.constraint_set): new VMs of the tenant go only
// to hosts carrying these labels.
func (h *Handlers) APISetHostConstraint(c echo.Context) error {
	var in api.HostConstraint
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	ctx := c.Request().Context()
	t, err := h.tenantByID(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	hc, err := h.vms.SetHostConstraint(ctx, CallerOf(c).Actor(c), t.ID, vmpool.Labels(in.Labels))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, hostConstraintJSON(hc))
}
