package handlers

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/views"
)

// Templates (templates.go): the templates a tenant can see (the platform's
// built-ins and its own, sandbox/templates), their versions and storage,
// and deleting its own. Building (recipe) and importing (oci) have their
// own handlers (template_builds.go, template_import.go).

func templateVersionEntryJSON(v templates.Version) api.TemplateVersionEntry {
	env := v.Defaults.Env
	if env == nil {
		env = map[string]string{}
	}
	return api.TemplateVersionEntry{ID: v.ID, Seq: v.Seq, State: string(v.State), Reason: v.Reason, Source: v.Source, SourceRef: v.SourceRef,
		Digest: v.Digest, SizeBytes: v.SizeBytes, Defaults: api.TemplateDefaults{Env: env, User: v.Defaults.User, Workdir: v.Defaults.Workdir},
		CreatedBy: v.CreatedBy, CreatedAt: v.CreatedAt.UTC().Format(timeJSON), ReadyAt: timePtr(v.ReadyAt)}
}

func templateJSON(e templates.Entry) api.Template {
	out := api.Template{Name: e.Name, Source: e.Source, Builtin: e.Builtin, Digest: e.Current.Digest, SizeBytes: e.Current.SizeBytes,
		CreatedBy: e.CreatedBy, InUse: e.InUse, Versions: []api.TemplateVersionEntry{}}
	switch {
	case e.Builtin:
		out.Version = e.Current.SourceRef
	case e.HasReady:
		out.Version = e.Current.ID
	}
	if !e.CreatedAt.IsZero() {
		out.CreatedAt = timePtr(&e.CreatedAt)
	}
	for _, v := range e.Versions {
		out.Versions = append(out.Versions, templateVersionEntryJSON(v))
	}
	return out
}

// templateListing reads what the templates page and API show: the
// templates the tenant can see, its template storage and its quota.
func (h *Handlers) templateListing(ctx context.Context, tenantID string) ([]templates.Entry, int64, tenants.Quota, error) {
	list, err := h.templates.List(ctx, tenantID)
	if err != nil {
		return nil, 0, tenants.Quota{}, err
	}
	used, err := h.templates.Used(ctx, tenantID)
	if err != nil {
		return nil, 0, tenants.Quota{}, err
	}
	q, err := h.store.Quota(ctx, tenantID)
	return list, used, q, err
}

// APITemplates lists the templates the tenant can see: GET /api/v1/templates.
func (h *Handlers) APITemplates(c echo.Context) error {
	cl := CallerOf(c)
	list, used, q, err := h.templateListing(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		return err
	}
	out := api.TemplateList{Templates: []api.Template{}, StorageBytes: used, QuotaMiB: q.MaxTemplateMiB}
	for _, e := range list {
		out.Templates = append(out.Templates, templateJSON(e))
	}
	return c.JSON(http.StatusOK, out)
}

// APITemplate is one template: GET /api/v1/templates/:name.
func (h *Handlers) APITemplate(c echo.Context) error {
	e, err := h.templates.Get(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("name"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, templateJSON(e))
}

// APIDeleteTemplate deletes one of the tenant's templates:
// DELETE /api/v1/templates/:name (409 while a sandbox runs it).
func (h *Handlers) APIDeleteTemplate(c echo.Context) error {
	cl := CallerOf(c)
	if err := h.deleteTemplate(c.Request().Context(), cl, c); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (h *Handlers) deleteTemplate(ctx context.Context, cl *Caller, c echo.Context) error {
	gone, err := h.templates.Delete(ctx, cl.Actor(c), cl.Tenant.ID, c.Param("name"))
	if err != nil {
		return err
	}
	// The versions' disks leave the VMs that hold them (a VM that keeps
	// one holds it until it ends; the image file is gone already).
	h.sbx.DetachTemplateVersions(context.WithoutCancel(ctx), cl.Tenant.ID, gone)
	return nil
}

// templateActions are the links of other template pages (helpers recipe
// and oci add "Build from a recipe" and "Import an image" here): those the
// caller may open.
func templateActions(c echo.Context) []views.NavItem {
	var out []views.NavItem
	for _, a := range []views.NavItem{
		// Template page links: one line each.
		{Label: "Build from a recipe", Href: TemplateBuildPage},
		{Label: "Import an image", Href: TemplateImportPage},
	} {
		if mayOpen(c, a.Href) {
			out = append(out, a)
		}
	}
	return out
}

// TemplatesPage lists the templates the tenant can see: GET /templates.
func (h *Handlers) TemplatesPage(c echo.Context) error {
	cl := CallerOf(c)
	list, used, q, err := h.templateListing(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		return err
	}
	v := views.TemplatesView{CanDelete: tenants.Can(cl.Role, tenants.PermSandboxesWrite), StorageBytes: used, QuotaMiB: q.MaxTemplateMiB,
		Actions: templateActions(c)}
	for _, e := range list {
		r := views.TemplateRow{Name: e.Name, Source: e.Source, Builtin: e.Builtin, Digest: e.Current.Digest, SizeBytes: e.Current.SizeBytes,
			CreatedBy: e.CreatedBy, InUse: e.InUse, Versions: len(e.Versions), State: "ready"}
		switch {
		case e.Builtin:
			r.Version = e.Current.SourceRef
		case e.HasReady:
			r.Version = "v" + strconv.Itoa(e.Current.Seq)
		case len(e.Versions) > 0:
			r.Version, r.State = "v"+strconv.Itoa(e.Versions[0].Seq), string(e.Versions[0].State)
		}
		if !e.CreatedAt.IsZero() {
			t := e.CreatedAt
			r.CreatedAt = &t
		}
		v.Rows = append(v.Rows, r)
	}
	return render(c, http.StatusOK, views.Templates(h.page(c, "Templates", views.NavTemplates), v))
}

// DeleteTemplatePage deletes one of the tenant's templates from the
// Templates page: POST /templates/:name/delete.
func (h *Handlers) DeleteTemplatePage(c echo.Context) error {
	cl := CallerOf(c)
	e, err := h.templates.Get(c.Request().Context(), cl.Tenant.ID, c.Param("name"))
	if err != nil {
		return err
	}
	summary := []string{fmt.Sprintf("Its %d version(s) and their images go; sandboxes can no longer start from %s.", len(e.Versions), e.Name)}
	if e.InUse > 0 {
		summary = append(summary, fmt.Sprintf("%d sandbox(es) still run it: the delete is refused until they end.", e.InUse))
	}
	if asked, err := h.askFirst(c, views.ConfirmView{Title: "Delete template " + e.Name, Summary: summary, Cancel: "/templates"}); asked {
		return err
	}
	if err := h.deleteTemplate(c.Request().Context(), cl, c); err != nil {
		return err
	}
	h.flash(c, "success", "Template "+c.Param("name")+" deleted.")
	return redirect(c, "/templates")
}

// OperatorTemplatesPage is every tenant's template storage against its
// quota: GET /operator/templates.
func (h *Handlers) OperatorTemplatesPage(c echo.Context) error {
	ctx := c.Request().Context()
	usage, err := h.templates.Usage(ctx)
	if err != nil {
		return err
	}
	ts, err := h.store.ListTenants(ctx)
	if err != nil {
		return err
	}
	slug := map[string]string{}
	for _, t := range ts {
		slug[t.ID] = t.Slug
	}
	var v views.OperatorTemplatesView
	for _, u := range usage {
		name := slug[u.TenantID]
		if name == "" {
			name = u.TenantID
		}
		v.Rows = append(v.Rows, views.OperatorTemplateRow{Tenant: name, Templates: u.Templates, Versions: u.Versions, Bytes: u.Bytes, LimitMiB: u.LimitMiB})
	}
	return render(c, http.StatusOK, views.OperatorTemplates(h.page(c, "Template storage", views.NavOperatorTemplates), v))
}
