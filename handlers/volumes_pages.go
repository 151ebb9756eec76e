package handlers

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

func (h *Handlers) volumesView(c echo.Context, form views.VolumeForm) (views.VolumesView, error) {
	ctx := c.Request().Context()
	cl := CallerOf(c)
	list, err := h.volumes.List(ctx, cl.Tenant.ID)
	if err != nil {
		return views.VolumesView{}, err
	}
	q, err := h.store.Quota(ctx, cl.Tenant.ID)
	if err != nil {
		return views.VolumesView{}, err
	}
	v := views.VolumesView{CanEdit: tenants.Can(cl.Role, tenants.PermSandboxesWrite), QuotaGiB: q.MaxVolumeGiB, Form: form}
	for _, st := range list {
		row := views.VolumeRow{Name: st.Name, ID: st.ID, SizeGiB: st.SizeGiB, CreatedAt: st.CreatedAt, CreatedBy: st.CreatedByName, LastUsedAt: st.LastUsedAt}
		for _, a := range st.Attachments {
			s := a.VMID
			if a.ReadOnly {
				s += " (read-only)"
			}
			row.Attached = append(row.Attached, s)
		}
		for _, m := range st.Mounts {
			s := m.SandboxID + " at " + m.Path
			if m.ReadOnly {
				s += " (read-only)"
			}
			row.MountedBy = append(row.MountedBy, s)
		}
		v.UsedGiB += st.SizeGiB
		v.Rows = append(v.Rows, row)
	}
	return v, nil
}

func (h *Handlers) volumesPage(c echo.Context, v views.VolumesView) templ.Component {
	return views.Volumes(h.page(c, "Volumes", views.NavVolumes), v)
}

// VolumesPage lists the tenant's volumes (GET /volumes).
func (h *Handlers) VolumesPage(c echo.Context) error {
	v, err := h.volumesView(c, views.VolumeForm{SizeGiB: "10"})
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, h.volumesPage(c, v))
}

// formGiB reads a whole number of GiB from a form field.
func formGiB(c echo.Context, name string) (int, string, error) {
	s := strings.TrimSpace(c.FormValue(name))
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, s, errdefs.Invalid(name, "integer", "must be a whole number of GiB")
	}
	return n, s, nil
}

// CreateVolume makes a volume from the form (POST /volumes).
func (h *Handlers) CreateVolume(c echo.Context) error {
	cl := CallerOf(c)
	form := views.VolumeForm{Name: strings.TrimSpace(c.FormValue("name"))}
	size, raw, err := formGiB(c, "size_gib")
	form.SizeGiB = raw
	if err == nil {
		_, err = h.volumes.Create(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, form.Name, size)
	}
	if err != nil {
		return reshow(c, err, refusal{
			Conflict: &errdefs.FieldError{Field: "name", Rule: "volume_exists", Detail: "the tenant has a volume of this name"},
			Quota: func(err error) string {
				return "Not created: " + err.Error() + ". Delete a volume, or ask a platform operator for more."
			},
		}, &form.Errors, func() (templ.Component, error) {
			v, err := h.volumesView(c, form)
			return h.volumesPage(c, v), err
		})
	}
	h.flash(c, "success", "Volume "+form.Name+" created.")
	return redirect(c, "/volumes")
}

// ResizeVolume grows a volume from its row's form
// (POST /volumes/:name/resize).
func (h *Handlers) ResizeVolume(c echo.Context) error {
	cl := CallerOf(c)
	name := c.Param("name")
	size, _, err := formGiB(c, "size_gib")
	if err == nil {
		_, err = h.volumes.Resize(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, name, size)
	}
	if err != nil {
		if errdefs.IsNotFound(err) {
			return err
		}
		var errs map[string]string
		return reshow(c, err, refusal{
			Conflict: &errdefs.FieldError{Field: "size_gib", Rule: "attached", Detail: "the volume is attached to a VM: resize it once no sandbox uses it"},
			Quota:    func(err error) string { return "Not resized: " + err.Error() + "." },
		}, &errs, func() (templ.Component, error) {
			v, err := h.volumesView(c, views.VolumeForm{SizeGiB: "10"})
			v.Resize, v.ResizeErrors = name, errs
			if msg, ok := errs[views.FormError]; ok {
				v.ResizeErrors = map[string]string{"size_gib": msg}
			}
			return h.volumesPage(c, v), err
		})
	}
	h.flash(c, "success", "Volume "+name+" is now "+strconv.Itoa(size)+" GiB.")
	return redirect(c, "/volumes")
}

// DeleteVolume deletes a volume (POST /volumes/:name/delete); one in use
// stays, and the page says why.
func (h *Handlers) DeleteVolume(c echo.Context) error {
	cl := CallerOf(c)
	name := c.Param("name")
	if err := h.volumes.Delete(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, name); err != nil {
		if !errdefs.IsConflict(err) {
			return err
		}
		h.flash(c, "error", "Volume "+name+" not deleted: "+err.Error())
		return redirect(c, "/volumes")
	}
	h.flash(c, "success", "Volume "+name+" deleted.")
	return redirect(c, "/volumes")
}
