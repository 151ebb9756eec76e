package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

// vmService returns the VM pool service (required by handlers.New, so it
// never fails); svc.Available says whether a libvirt host answers. Only
// /operator/hosts still asks it; the others use h.vms.
func (h *Handlers) vmService() (*vmpool.Service, error) { return h.vms, nil }

func timePtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := t.UTC().Format(timeJSON)
	return &s
}

func vmJSON(st vmpool.Status) api.VM {
	vm := st.VM
	out := api.VM{
		ID: vm.ID, State: string(vm.State), StateReason: vm.StateReason,
		Progress: api.VMProgress{Phase: string(vm.Phase), Step: vm.Phase.Progress(), Of: vmpool.BootSteps, Since: vm.PhaseAt.UTC().Format(timeJSON)},
		Host:     vm.HostURI, VCPUs: vm.VCPUs, MemoryMiB: vm.MemoryMiB, ImageVersion: vm.ImageVersion,
		AgentVersion: vm.AgentVersion, KernelVersion: vm.KernelVersion, AgentConnected: st.AgentConnected, BootMS: vm.BootMS, BootKind: vm.BootKind,
		CPUTimeMS: st.CPUTime.Milliseconds(), UptimeSeconds: st.Uptime.Seconds(),
		Acquired: vm.AcquiredAt != nil, SandboxesServed: vm.SandboxesServed,
		CreatedAt: vm.CreatedAt.UTC().Format(timeJSON), StartedAt: timePtr(vm.StartedAt), EndedAt: timePtr(vm.EndedAt),
		RecycleAfter: timePtr(vm.RecycleAfter),
	}
	if st.CPUPercent >= 0 {
		p := st.CPUPercent
		out.CPUPercent = &p
	}
	if g := st.Guest; g != nil {
		out.Guest = &api.VMGuest{UptimeSeconds: g.Uptime.Seconds(), CPUs: g.CPUs, Load1: g.Load1, MemTotalBytes: g.MemTotal,
			MemAvailableBytes: g.MemAvailable, CgroupControllers: g.CgroupControllers, Crun: g.Crun}
	}
	return out
}

// APIVMs lists the tenant's VMs: GET /api/v1/vms.
func (h *Handlers) APIVMs(c echo.Context) error {
	svc := h.vms
	sts, err := svc.List(c.Request().Context(), CallerOf(c).Tenant.ID)
	if err != nil {
		return err
	}
	out := each(sts, vmJSON)
	hv := api.Hypervisor{Available: true}
	if err := svc.Available(); err != nil {
		hv = api.Hypervisor{Available: false, Detail: err.Error()}
	}
	return c.JSON(http.StatusOK, api.VMList{VMs: out, Hypervisor: hv})
}

// APICreateVM boots one VM in the caller's tenant pool: POST /api/v1/vms
// with no body or {}. It answers 202 at once; poll the VM for progress.
func (h *Handlers) APICreateVM(c echo.Context) error {
	svc := h.vms
	if c.Request().ContentLength != 0 {
		var in api.CreateVM
		if err := decodeJSON(c, &in); err != nil {
			return err
		}
	}
	cl := CallerOf(c)
	vm, err := svc.Create(c.Request().Context(), cl.Actor(c), cl.Tenant.ID)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/api/v1/vms/"+vm.ID)
	return c.JSON(http.StatusAccepted, vmJSON(vmpool.Status{VM: vm, CPUPercent: -1}))
}

// APIVM shows one VM with live numbers: GET /api/v1/vms/:id.
func (h *Handlers) APIVM(c echo.Context) error {
	svc := h.vms
	st, err := svc.Get(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, vmJSON(st))
}

// APIDestroyVM destroys a VM at once: DELETE /api/v1/vms/:id.
func (h *Handlers) APIDestroyVM(c echo.Context) error {
	svc := h.vms
	cl := CallerOf(c)
	vm, err := svc.Destroy(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, vmJSON(vmpool.Status{VM: vm, CPUPercent: -1}))
}

// APIStopVM shuts a running VM down through its agent: POST /api/v1/vms/:id/stop.
func (h *Handlers) APIStopVM(c echo.Context) error {
	svc := h.vms
	cl := CallerOf(c)
	vm, err := svc.Stop(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, vmJSON(vmpool.Status{VM: vm, CPUPercent: -1}))
}

// APIRecycleVM replaces a running VM with a fresh one: POST /api/v1/vms/:id/recycle.
func (h *Handlers) APIRecycleVM(c echo.Context) error {
	svc := h.vms
	cl := CallerOf(c)
	old, repl, err := svc.Recycle(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/api/v1/vms/"+repl.ID)
	return c.JSON(http.StatusAccepted, api.VMRecycle{
		Recycled:    vmJSON(vmpool.Status{VM: old, CPUPercent: -1}),
		Replacement: vmJSON(vmpool.Status{VM: repl, CPUPercent: -1}),
	})
}

func (h *Handlers) poolJSON(c echo.Context, svc *vmpool.Service, p vmpool.Pool) (api.Pool, error) {
	q, err := svc.Quota(c.Request().Context(), CallerOf(c).Tenant.ID)
	if err != nil {
		return api.Pool{}, err
	}
	out := api.Pool{VCPUs: p.VCPUs, MemoryMiB: p.MemoryMiB, MaxVMs: p.MaxVMs, WarmVMs: p.WarmVMs, RecycleAfterHours: p.RecycleAfterHours,
		Quota: api.PoolQuota{MaxVMs: q.MaxVMs, MaxVCPUs: q.MaxVCPUs, MaxMemoryMiB: q.MaxMemoryMiB, MaxSandboxes: q.MaxSandboxes}}
	if !p.UpdatedAt.IsZero() {
		out.UpdatedAt = timePtr(&p.UpdatedAt)
	}
	return out, nil
}

// APIVMPool shows the pool settings and quota: GET /api/v1/vm-pool.
func (h *Handlers) APIVMPool(c echo.Context) error {
	svc := h.vms
	p, err := svc.Pool(c.Request().Context(), CallerOf(c).Tenant.ID)
	if err != nil {
		return err
	}
	out, err := h.poolJSON(c, svc, p)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

// APISetVMPool replaces the pool settings: PUT /api/v1/vm-pool with every
// field of PoolJSON except quota and updated_at.
func (h *Handlers) APISetVMPool(c echo.Context) error {
	svc := h.vms
	var in api.SetPool
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	var set vmpool.PoolSettings
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
	}{
		{"vcpus", in.VCPUs, &set.VCPUs}, {"memory_mib", in.MemoryMiB, &set.MemoryMiB}, {"max_vms", in.MaxVMs, &set.MaxVMs},
		{"warm_vms", in.WarmVMs, &set.WarmVMs}, {"recycle_after_hours", in.RecycleAfterHours, &set.RecycleAfterHours},
	} {
		if f.v == nil {
			return errdefs.Invalid(f.name, "required", "is required")
		}
		*f.dst = *f.v
	}
	cl := CallerOf(c)
	p, err := svc.SetPool(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, set)
	if err != nil {
		return err
	}
	out, err := h.poolJSON(c, svc, p)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func hostRows(hs []vmpool.HostStatus) []api.Host {
	out := make([]api.Host, 0, len(hs))
	for _, hs := range hs {
		j := api.Host{URI: hs.URI, Health: vmpool.HealthOK, Configured: hs.Configured, DomainType: hs.DomainType,
			CPUs: hs.CPUs, MemoryMiB: hs.MemoryKiB / 1024, FreeMemoryMiB: hs.FreeMemoryKiB / 1024,
			VMs: hs.ActiveVMs, AllocVCPUs: hs.VCPUs, AllocMemoryMiB: hs.MemoryMiB, LastSeenAt: timePtr(hs.LastSeenAt),
			State: hs.Effective(), StateReason: hs.StateReason, Labels: map[string]string(hs.Labels), DownAt: timePtr(hs.DownAt)}
		if j.Labels == nil {
			j.Labels = map[string]string{}
		}
		if !hs.Connected {
			j.Health, j.Reason = vmpool.HealthUnavailable, hs.Reason
		} else if hs.Slow != "" {
			j.Health, j.Reason = vmpool.HealthSlow, hs.Slow
		}
		out = append(out, j)
	}
	return out
}

// APIHosts lists the libvirt hosts (operators): GET /api/v1/hosts.
func (h *Handlers) APIHosts(c echo.Context) error {
	svc := h.vms
	hs, err := svc.Hosts(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.HostList{Hosts: hostRows(hs)})
}

// --- Pages ---

func vmRows(sts []vmpool.Status, slugs map[string]string, now time.Time) []views.VMRow {
	out := make([]views.VMRow, 0, len(sts))
	for _, st := range sts {
		vm := st.VM
		out = append(out, views.VMRow{
			ID: vm.ID, Tenant: slugs[vm.TenantID], State: string(vm.State), StateReason: vm.StateReason,
			Phase: string(vm.Phase), Progress: vm.Phase.Progress(), ProgressMax: vmpool.BootSteps, PhaseFor: now.Sub(vm.PhaseAt),
			Uptime: st.Uptime, VCPUs: vm.VCPUs, MemoryMiB: vm.MemoryMiB, CPUPercent: st.CPUPercent,
			AgentVersion: vm.AgentVersion, Host: vm.HostURI, CreatedAt: vm.CreatedAt, Acquired: vm.AcquiredAt != nil,
			Boot: time.Duration(vm.BootMS) * time.Millisecond, BootKind: vm.BootKind,
		})
	}
	return out
}

func (h *Handlers) vmTable(c echo.Context) (views.VMTable, error) {
	cl := CallerOf(c)
	t := views.VMTable{CanEdit: tenants.Can(cl.Role, tenants.PermVMsWrite), PollURL: "/vms/table"}
	if tok, ok := c.Get(CSRFContextKey).(string); ok {
		t.CSRF = tok
	}
	sts, err := h.vms.List(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		return views.VMTable{}, err
	}
	t.Rows = vmRows(sts, nil, h.clock())
	return t, nil
}

func poolForm(p vmpool.Pool) views.PoolForm {
	return views.PoolForm{VCPUs: strconv.Itoa(p.VCPUs), MemoryMiB: strconv.Itoa(p.MemoryMiB), MaxVMs: strconv.Itoa(p.MaxVMs),
		WarmVMs: strconv.Itoa(p.WarmVMs), RecycleAfterHours: strconv.Itoa(p.RecycleAfterHours)}
}

// vmsView builds the VMs page; form, when not nil, is a rejected pool form
// to show again with its errors.
func (h *Handlers) vmsView(c echo.Context, form *views.PoolForm) (views.VMsView, error) {
	ctx := c.Request().Context()
	cl := CallerOf(c)
	table, err := h.vmTable(c)
	if err != nil {
		return views.VMsView{}, err
	}
	v := views.VMsView{Table: table, CanEdit: table.CanEdit, IsOperator: cl.Operator}
	svc := h.vms
	if err := svc.Available(); err != nil {
		v.Unavailable = err.Error()
	}
	if why := h.frozenReason(c); why != "" {
		v.Unavailable = why
	}
	p, err := svc.Pool(ctx, cl.Tenant.ID)
	if err != nil {
		return views.VMsView{}, err
	}
	v.VMVCPUs, v.VMMemoryMiB = p.VCPUs, p.MemoryMiB
	v.Pool = poolForm(p)
	if form != nil {
		v.Pool = *form
	}
	q, err := svc.Quota(ctx, cl.Tenant.ID)
	if err != nil {
		return views.VMsView{}, err
	}
	v.Quota = views.QuotaView{MaxVMs: q.MaxVMs, MaxVCPUs: q.MaxVCPUs, MaxMemoryMiB: q.MaxMemoryMiB}
	for _, r := range table.Rows {
		if r.State == string(vmpool.StateBooting) || r.State == string(vmpool.StateRunning) || r.State == string(vmpool.StateStopping) {
			v.Quota.UsedVMs++
			v.Quota.UsedVCPUs += r.VCPUs
			v.Quota.UsedMemoryMiB += r.MemoryMiB
		}
	}
	return v, nil
}

// VMsPage is the tenant's VM page: GET /vms.
func (h *Handlers) VMsPage(c echo.Context) error {
	v, err := h.vmsView(c, nil)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.VMs(h.page(c, "VMs", views.NavVMs), v))
}

// VMsTable is the VM table alone, polled by the page: GET /vms/table.
func (h *Handlers) VMsTable(c echo.Context) error {
	t, err := h.vmTable(c)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.VMTableFragment(t))
}

// vmActionResult turns the outcome of a page action into a flash and a
// redirect back to the page. Errors a person can act on become messages;
// not-found and anything unexpected go to the error page.
func (h *Handlers) vmActionResult(c echo.Context, err error, success string) error {
	return h.vmActionResultTo(c, err, success, "/vms")
}

// vmActionResultTo is vmActionResult back to the page at to.
func (h *Handlers) vmActionResultTo(c echo.Context, err error, success, to string) error {
	if err != nil {
		switch {
		case errors.Is(err, vmpool.ErrUnavailable):
			h.flash(c, views.FlashError, "Hypervisor unavailable: "+err.Error())
		case errors.Is(err, errdefs.ErrQuota), errors.Is(err, errdefs.ErrConflict):
			h.flash(c, views.FlashError, "Not done: "+err.Error())
		default:
			return err
		}
		return redirect(c, to)
	}
	h.flash(c, views.FlashSuccess, success)
	return redirect(c, to)
}

// StartVM boots a VM from the page: POST /vms.
func (h *Handlers) StartVM(c echo.Context) error {
	svc := h.vms
	cl := CallerOf(c)
	vm, err := svc.Create(c.Request().Context(), cl.Actor(c), cl.Tenant.ID)
	return h.vmActionResult(c, err, "VM "+shortID(vm.ID)+" is booting.")
}

// confirmVM is the confirm step of stopping or destroying a VM: what
// ends with it, counted.
func (h *Handlers) confirmVM(c echo.Context, verb, effect string) (bool, error) {
	ctx, cl, id := c.Request().Context(), CallerOf(c), c.Param("id")
	if _, err := h.vms.Get(ctx, cl.Tenant.ID, id); err != nil {
		return true, h.vmActionResult(c, err, "")
	}
	list, err := h.sbx.Store().Sandboxes(ctx, cl.Tenant.ID)
	if err != nil {
		return true, err
	}
	n := 0
	for _, sb := range list {
		if sb.VMID == id && (sb.State == sandbox.StateRunning || sb.State == sandbox.StateCreating || sb.State == sandbox.StateStopped) {
			n++
		}
	}
	ends := "No sandbox runs in it."
	if n > 0 {
		ends = fmt.Sprintf("Its %d sandbox(es) end with it, and their terminals.", n)
	}
	return h.askFirst(c, views.ConfirmView{Title: verb + " VM " + shortID(id), Summary: []string{effect + " " + ends}, Cancel: "/vms"})
}

// StopVM shuts a VM down from the page: POST /vms/:id/stop, confirmed.
func (h *Handlers) StopVM(c echo.Context) error {
	if asked, err := h.confirmVM(c, "Stop", "Stopping the VM shuts it down through its agent."); asked {
		return err
	}
	svc := h.vms
	cl := CallerOf(c)
	_, err := svc.Stop(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	return h.vmActionResult(c, err, "VM "+shortID(c.Param("id"))+" is shutting down.")
}

// DestroyVM destroys a VM from the page: POST /vms/:id/destroy, confirmed.
func (h *Handlers) DestroyVM(c echo.Context) error {
	if asked, err := h.confirmVM(c, "Destroy", "Destroying the VM ends it at once, with its disk."); asked {
		return err
	}
	svc := h.vms
	cl := CallerOf(c)
	_, err := svc.Destroy(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	return h.vmActionResult(c, err, "VM "+shortID(c.Param("id"))+" destroyed.")
}

// RecycleVM replaces a VM from the page: POST /vms/:id/recycle.
func (h *Handlers) RecycleVM(c echo.Context) error {
	svc := h.vms
	cl := CallerOf(c)
	_, repl, err := svc.Recycle(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	return h.vmActionResult(c, err, "VM "+shortID(c.Param("id"))+" recycled; "+shortID(repl.ID)+" is booting in its place.")
}

// SetVMPool saves the pool settings form: POST /vms/pool. Errors are shown
// in place, next to the field (or above the form for a quota).
func (h *Handlers) SetVMPool(c echo.Context) error {
	svc := h.vms
	form := views.PoolForm{
		VCPUs: strings.TrimSpace(c.FormValue("vcpus")), MemoryMiB: strings.TrimSpace(c.FormValue("memory_mib")),
		MaxVMs: strings.TrimSpace(c.FormValue("max_vms")), WarmVMs: strings.TrimSpace(c.FormValue("warm_vms")),
		RecycleAfterHours: strings.TrimSpace(c.FormValue("recycle_after_hours")),
	}
	var set vmpool.PoolSettings
	// Every field at fault shows at once: those that are no number, and
	// the ranges of those that are.
	var errs []error
	for _, f := range []struct {
		name string
		raw  string
		dst  *int
	}{
		{"vcpus", form.VCPUs, &set.VCPUs}, {"memory_mib", form.MemoryMiB, &set.MemoryMiB}, {"max_vms", form.MaxVMs, &set.MaxVMs},
		{"warm_vms", form.WarmVMs, &set.WarmVMs}, {"recycle_after_hours", form.RecycleAfterHours, &set.RecycleAfterHours},
	} {
		n, perr := strconv.Atoi(f.raw)
		switch {
		case f.raw == "":
			errs = append(errs, errdefs.Required(f.name))
		case perr != nil:
			errs = append(errs, errdefs.Invalid(f.name, "number", "must be a whole number"))
		}
		*f.dst = n
	}
	cl := CallerOf(c)
	var err error
	if len(errs) > 0 {
		err = errors.Join(append(errs, set.Validate())...)
	} else {
		_, err = svc.SetPool(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, set)
	}
	if err != nil {
		return reshow(c, err, refusal{Quota: func(qe error) string {
			return "Over the tenant quota: " + qe.Error() + ". Ask a platform operator to raise it, or lower max VMs or the VM size."
		}}, &form.Errors, func() (templ.Component, error) {
			v, err := h.vmsView(c, &form)
			return views.VMs(h.page(c, "VMs", views.NavVMs), v), err
		})
	}
	h.flash(c, views.FlashSuccess, "Pool settings saved.")
	return redirect(c, "/vms")
}

func shortID(id string) string {
	if len(id) > 13 {
		return id[len(id)-12:]
	}
	return id
}
