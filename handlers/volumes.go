package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/volumes"
)

// volumeRequests turns a create's volumes into the service's requests.
func volumeRequests(in []api.VolumeMount) []volumes.Request {
	if len(in) == 0 {
		return nil
	}
	out := make([]volumes.Request, len(in))
	for i, m := range in {
		out[i] = volumes.Request{Name: m.Name, Path: m.Path, ReadOnly: m.ReadOnly}
	}
	return out
}

func volumeJSON(st volumes.Status) api.Volume {
	out := api.Volume{Name: st.Name, ID: st.ID, SizeGiB: st.SizeGiB, State: st.State, CreatedBy: st.CreatedByName,
		CreatedAt: st.CreatedAt.UTC().Format(timeJSON), UpdatedAt: st.UpdatedAt.UTC().Format(timeJSON),
		Attachments: []api.VolumeAttachment{}, Mounts: []api.VolumeUse{}}
	if st.LastUsedAt != nil {
		t := st.LastUsedAt.UTC().Format(timeJSON)
		out.LastUsedAt = &t
	}
	for _, a := range st.Attachments {
		out.Attachments = append(out.Attachments, api.VolumeAttachment{VMID: a.VMID, ReadOnly: a.ReadOnly, AttachedAt: a.AttachedAt.UTC().Format(timeJSON)})
	}
	for _, m := range st.Mounts {
		out.Mounts = append(out.Mounts, api.VolumeUse{SandboxID: m.SandboxID, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out
}

// APIVolumes lists the tenant's volumes with its quota:
// GET /api/v1/volumes.
func (h *Handlers) APIVolumes(c echo.Context) error {
	ctx := c.Request().Context()
	cl := CallerOf(c)
	list, err := h.volumes.List(ctx, cl.Tenant.ID)
	if err != nil {
		return err
	}
	q, err := h.store.Quota(ctx, cl.Tenant.ID)
	if err != nil {
		return err
	}
	out := api.VolumeList{Volumes: each(list, volumeJSON), QuotaGiB: q.MaxVolumeGiB}
	for _, v := range list {
		out.UsedGiB += v.SizeGiB
	}
	return c.JSON(http.StatusOK, out)
}

// APIVolume shows the tenant's volume :name: GET /api/v1/volumes/:name.
func (h *Handlers) APIVolume(c echo.Context) error {
	st, err := h.volumes.Get(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("name"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, volumeJSON(st))
}

// APICreateVolume makes a volume: POST /api/v1/volumes {name, size_gib}.
func (h *Handlers) APICreateVolume(c echo.Context) error {
	var in api.CreateVolume
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl := CallerOf(c)
	ctx := c.Request().Context()
	v, err := h.volumes.Create(ctx, cl.Actor(c), cl.Tenant.ID, in.Name, in.SizeGiB)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/api/v1/volumes/"+v.Name)
	return c.JSON(http.StatusCreated, volumeJSON(volumes.Status{Volume: v}))
}

// APIResizeVolume grows the tenant's detached volume :name:
// PATCH /api/v1/volumes/:name {size_gib}.
func (h *Handlers) APIResizeVolume(c echo.Context) error {
	var in api.ResizeVolume
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl := CallerOf(c)
	v, err := h.volumes.Resize(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("name"), in.SizeGiB)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, volumeJSON(volumes.Status{Volume: v}))
}

// APIDeleteVolume deletes the tenant's volume :name and its data; one
// attached to a VM is a conflict: DELETE /api/v1/volumes/:name.
func (h *Handlers) APIDeleteVolume(c echo.Context) error {
	cl := CallerOf(c)
	if err := h.volumes.Delete(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("name")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
