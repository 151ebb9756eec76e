package api

// WebhookEndpoint is an outgoing webhook endpoint (its secret by name only).
type WebhookEndpoint struct {
	ID          string   `json:"id"`
	URL         string   `json:"url"`
	SecretName  string   `json:"secret_name" doc:"the tenant secret holding the whsec_ key"`
	EventTypes  []string `json:"event_types" nonnull:"true" doc:"empty: every event"`
	Description string   `json:"description,omitempty"`
	Enabled     bool     `json:"enabled"`
	CreatedBy   string   `json:"created_by,omitempty"`
	CreatedAt   string   `json:"created_at" format:"date-time"`
	UpdatedAt   string   `json:"updated_at" format:"date-time"`
}

// WebhookList answers GET /api/v1/integrations/webhooks.
type WebhookList struct {
	Webhooks []WebhookEndpoint `json:"webhooks" nonnull:"true"`
}

// CreateWebhook is the body of POST /api/v1/integrations/webhooks.
type CreateWebhook struct {
	URL         string   `json:"url" doc:"https; private and loopback addresses are refused"`
	SecretName  string   `json:"secret_name" doc:"the tenant secret holding the whsec_ key, scoped to the URL's host"`
	EventTypes  []string `json:"event_types,omitempty" enum:"sandbox.created,sandbox.destroyed,run.completed" doc:"empty: every event"`
	Description string   `json:"description,omitempty" maxLength:"200"`
}

// UpdateWebhook is the body of PATCH /api/v1/integrations/webhooks/{id}.
type UpdateWebhook struct {
	Enabled *bool `json:"enabled" doc:"false: the endpoint gets no new events"`
}

// WebhookDelivery is one event sent (or to be sent) to an endpoint.
type WebhookDelivery struct {
	ID         string `json:"id"`
	EndpointID string `json:"endpoint_id"`
	EventID    string `json:"event_id" doc:"the event_id in the payload: the same across redeliveries"`
	EventType  string `json:"event_type" doc:"sandbox.created, sandbox.destroyed, run.completed or webhook.test"`
	State      string `json:"state" enum:"pending,delivered,failed"`
	Attempts   int    `json:"attempts" doc:"requests made"`
	StatusCode int    `json:"status_code" doc:"of the last answer; 0: none"`
	Error      string `json:"error,omitempty" doc:"why the last attempt failed"`
	MessageID  string `json:"message_id,omitempty" doc:"the webhook-id header"`
	CreatedAt  string `json:"created_at" format:"date-time"`
	UpdatedAt  string `json:"updated_at" format:"date-time"`
}

// DeliveryList answers GET /api/v1/integrations/deliveries.
type DeliveryList struct {
	Deliveries []WebhookDelivery `json:"deliveries" nonnull:"true"`
}

// DeliveryQuery filters the deliveries.
type DeliveryQuery struct {
	EndpointID string `query:"endpoint_id" doc:"one endpoint only"`
	Limit      int    `query:"limit" minimum:"1" maximum:"500" doc:"default 100"`
}
