package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/integrations"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/views"
)

const recentDeliveries = 50

func (h *Handlers) integrationsView(c echo.Context, form views.WebhookForm) (views.IntegrationsView, error) {
	s := h.integrations
	ctx, cl := c.Request().Context(), CallerOf(c)
	eps, err := s.Endpoints(ctx, cl.Tenant.ID)
	if err != nil {
		return views.IntegrationsView{}, err
	}
	dls, err := s.Deliveries(ctx, cl.Tenant.ID, "", recentDeliveries)
	if err != nil {
		return views.IntegrationsView{}, err
	}
	v := views.IntegrationsView{CanEdit: tenants.Can(cl.Role, tenants.PermIntegrationsWrite), Form: form, EventTypes: integrations.EventTypes()}
	if v.CanEdit {
		names, err := h.liveSecretNames(ctx, cl.Tenant.ID)
		if err != nil {
			return views.IntegrationsView{}, err
		}
		for _, n := range names {
			v.SecretChoices = append(v.SecretChoices, views.Choice{Value: n, Label: n})
		}
	}
	urls := map[string]string{}
	for _, ep := range eps {
		urls[ep.ID] = ep.URL
		v.Endpoints = append(v.Endpoints, views.WebhookRow{ID: ep.ID, URL: ep.URL, SecretName: ep.SecretName, EventTypes: ep.EventTypes(),
			Description: ep.Description, Enabled: ep.Enabled, CreatedBy: ep.CreatedBy, CreatedAt: ep.CreatedAt})
	}
	for _, d := range dls {
		v.Deliveries = append(v.Deliveries, views.WebhookDeliveryRow{ID: d.ID, EventType: d.EventType, EventID: d.EventID,
			Endpoint: orDeleted(urls[d.EndpointID]), State: d.State, Attempts: d.Attempts, StatusCode: d.StatusCode, Error: d.Error,
			CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt})
	}
	return v, nil
}

func orDeleted(url string) string {
	if url == "" {
		return "(deleted endpoint)"
	}
	return url
}

// IntegrationsPage shows the tenant's outgoing webhook endpoints and their
// recent deliveries; admins add, enable, disable, test and delete them.
func (h *Handlers) IntegrationsPage(c echo.Context) error {
	v, err := h.integrationsView(c, views.WebhookForm{})
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Integrations(h.page(c, "Integrations", views.NavIntegrations), v))
}

// CreateWebhook adds an endpoint from the form; a refused one shows the
// form again with what was typed and every error in place. The signing
// secret is one of the tenant's live secrets, chosen from a list.
func (h *Handlers) CreateWebhook(c echo.Context) error {
	cl := CallerOf(c)
	if err := c.Request().ParseForm(); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrInvalid, err)
	}
	form := views.WebhookForm{URL: strings.TrimSpace(c.FormValue("url")), SecretName: strings.TrimSpace(c.FormValue("secret_name")),
		Description: strings.TrimSpace(c.FormValue("description")), EventTypes: c.Request().Form["event_types"]}
	ne := integrations.NewEndpoint{URL: form.URL, SecretName: form.SecretName, EventTypes: form.EventTypes, Description: form.Description}
	ctx := c.Request().Context()
	names, err := h.liveSecretNames(ctx, cl.Tenant.ID)
	if err != nil {
		return err
	}
	if form.SecretName != "" && !slices.Contains(names, form.SecretName) {
		ne.SecretName = "" // reported here, not as "required" too
		err = errors.Join(errdefs.Invalid("secret_name", "secret_unknown", "choose one of the tenant's live secrets (Settings > Secrets)"),
			h.integrations.Check(ne))
	} else {
		_, err = h.integrations.Create(ctx, cl.Actor(c), cl.Tenant.ID, ne)
	}
	if err != nil {
		return reshow(c, err, refusal{Conflict: &errdefs.FieldError{Field: "url", Rule: "endpoint_limit", Detail: "this tenant has as many endpoints as allowed: delete one first"}},
			&form.Errors, func() (templ.Component, error) {
				v, err := h.integrationsView(c, form)
				return views.Integrations(h.page(c, "Integrations", views.NavIntegrations), v), err
			})
	}
	h.flash(c, "success", "Endpoint added. Send it a test event to check its secret and URL.")
	return redirect(c, "/settings/integrations")
}

// liveSecretNames are the names of the tenant's live secrets, for the
// signing secret's choices.
func (h *Handlers) liveSecretNames(ctx context.Context, tenantID string) ([]string, error) {
	list, err := h.secrets.List(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range list {
		if s.State == secrets.StateActive {
			out = append(out, s.Name)
		}
	}
	return out, nil
}

// EnableWebhook enables an endpoint from the page.
func (h *Handlers) EnableWebhook(c echo.Context) error { return h.setWebhookEnabled(c, true) }

// DisableWebhook disables an endpoint from the page: it gets no new events.
func (h *Handlers) DisableWebhook(c echo.Context) error { return h.setWebhookEnabled(c, false) }

func (h *Handlers) setWebhookEnabled(c echo.Context, enable bool) error {
	s := h.integrations
	cl := CallerOf(c)
	if _, err := s.SetEnabled(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), enable); err != nil {
		return err
	}
	if enable {
		h.flash(c, "success", "Endpoint enabled.")
	} else {
		h.flash(c, "success", "Endpoint disabled: it gets no new events.")
	}
	return redirect(c, "/settings/integrations")
}

// TestWebhook queues a webhook.test event for an endpoint from the page.
func (h *Handlers) TestWebhook(c echo.Context) error {
	s := h.integrations
	cl := CallerOf(c)
	if _, err := s.SendTest(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id")); err != nil {
		return err
	}
	h.flash(c, "success", "Test event queued: its delivery shows below within seconds.")
	return redirect(c, "/settings/integrations")
}

// DeleteWebhook deletes an endpoint from the page.
func (h *Handlers) DeleteWebhook(c echo.Context) error {
	s := h.integrations
	cl := CallerOf(c)
	if err := s.Delete(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id")); err != nil {
		return err
	}
	h.flash(c, "success", "Endpoint deleted.")
	return redirect(c, "/settings/integrations")
}

// APIWebhooks lists the tenant's endpoints.
func (h *Handlers) APIWebhooks(c echo.Context) error {
	s := h.integrations
	list, err := s.Endpoints(c.Request().Context(), CallerOf(c).Tenant.ID)
	if err != nil {
		return err
	}
	out := api.WebhookList{Webhooks: make([]api.WebhookEndpoint, 0, len(list))}
	for _, ep := range list {
		out.Webhooks = append(out.Webhooks, webhookJSON(ep))
	}
	return c.JSON(http.StatusOK, out)
}

// APICreateWebhook adds an endpoint: {url, secret_name, event_types,
// description}.
func (h *Handlers) APICreateWebhook(c echo.Context) error {
	s := h.integrations
	var in api.CreateWebhook
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl := CallerOf(c)
	ep, err := s.Create(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, integrations.NewEndpoint(in))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, webhookJSON(ep))
}

// APIUpdateWebhook enables or disables an endpoint: {enabled}.
func (h *Handlers) APIUpdateWebhook(c echo.Context) error {
	s := h.integrations
	var in api.UpdateWebhook
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.Enabled == nil {
		return errdefs.Invalid("enabled", "required", "must be true or false")
	}
	cl := CallerOf(c)
	ep, err := s.SetEnabled(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), *in.Enabled)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, webhookJSON(ep))
}

// APIDeleteWebhook deletes an endpoint.
func (h *Handlers) APIDeleteWebhook(c echo.Context) error {
	s := h.integrations
	cl := CallerOf(c)
	if err := s.Delete(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// APITestWebhook queues a webhook.test event for an endpoint and answers
// its delivery (pending).
func (h *Handlers) APITestWebhook(c echo.Context) error {
	s := h.integrations
	cl := CallerOf(c)
	d, err := s.SendTest(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, deliveryJSON(d))
}

// APIWebhookDeliveries lists the tenant's recent deliveries, newest first:
// ?endpoint_id= for one endpoint, ?limit= up to 500 (default 100).
func (h *Handlers) APIWebhookDeliveries(c echo.Context) error {
	s := h.integrations
	limit := 0
	if l := c.QueryParam("limit"); l != "" {
		var err error
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > 500 {
			return errdefs.Invalid("limit", "range", "must be 1 to 500")
		}
	}
	list, err := s.Deliveries(c.Request().Context(), CallerOf(c).Tenant.ID, c.QueryParam("endpoint_id"), limit)
	if err != nil {
		return err
	}
	out := api.DeliveryList{Deliveries: make([]api.WebhookDelivery, 0, len(list))}
	for _, d := range list {
		out.Deliveries = append(out.Deliveries, deliveryJSON(d))
	}
	return c.JSON(http.StatusOK, out)
}

func webhookJSON(e integrations.Endpoint) api.WebhookEndpoint {
	types := e.EventTypes()
	if types == nil {
		types = []string{}
	}
	return api.WebhookEndpoint{ID: e.ID, URL: e.URL, SecretName: e.SecretName, EventTypes: types, Description: e.Description,
		Enabled: e.Enabled, CreatedBy: e.CreatedBy, CreatedAt: e.CreatedAt.Format(time.RFC3339Nano), UpdatedAt: e.UpdatedAt.Format(time.RFC3339Nano)}
}

func deliveryJSON(d integrations.Delivery) api.WebhookDelivery {
	return api.WebhookDelivery{ID: d.ID, EndpointID: d.EndpointID, EventID: d.EventID, EventType: d.EventType, State: d.State,
		Attempts: d.Attempts, StatusCode: d.StatusCode, Error: d.Error, MessageID: d.MessageID,
		CreatedAt: d.CreatedAt.Format(time.RFC3339Nano), UpdatedAt: d.UpdatedAt.Format(time.RFC3339Nano)}
}
