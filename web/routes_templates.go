package web

import (
	"net/http"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/tenants"
)

// templateRoutes are the routes of sandbox templates (handlers/templates.go):
// the built-ins and the tenant's own. Building from a recipe and importing
// an image add theirs (routes of helpers recipe and oci) next to these.
func templateRoutes(h *handlers.Handlers) []Route {
	R, W := tenants.PermSandboxesRead, tenants.PermSandboxesWrite
	return []Route{
		{Method: http.MethodGet, Path: "/templates", Perm: R, Handler: h.TemplatesPage},
		{Method: http.MethodPost, Path: "/templates/:name/delete", Perm: W, Handler: h.DeleteTemplatePage},
		{Method: http.MethodGet, Path: "/operator/templates", Perm: tenants.PermOperator, Handler: h.OperatorTemplatesPage},
		{Method: http.MethodGet, Path: "/api/v1/templates", Perm: R, API: true, Handler: h.APITemplates,
			Doc: &Doc{Summary: "List the templates the tenant can start sandboxes from: the platform's built-ins and its own, with size, source, digest and versions", Tag: "templates",
				Answers: ok("The templates and the tenant's template storage", api.TemplateList{})}},
		{Method: http.MethodGet, Path: "/api/v1/templates/:name", Perm: R, API: true, Handler: h.APITemplate,
			Doc: &Doc{Summary: "One template the tenant can see, with its versions", Tag: "templates", Params: api.TemplateParams{},
				Answers: ok("The template", api.Template{}), Errors: map[int]string{404: "No such template (built-in or the tenant's own)"}}},
		{Method: http.MethodDelete, Path: "/api/v1/templates/:name", Perm: W, API: true, Handler: h.APIDeleteTemplate,
			Doc: &Doc{Summary: "Delete one of the tenant's templates with all its versions: its images are removed and unplugged from the tenant's VMs", Tag: "templates",
				Params: api.TemplateParams{}, Answers: done,
				Errors: map[int]string{404: "No such template of the tenant", 409: "A built-in, a template a sandbox that has not ended runs, or one with a build under way"}}},
	}
}
