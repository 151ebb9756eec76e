package views

import "time"

// NavIntegrations marks the Settings > Integrations page.
const NavIntegrations = "integrations"

// IntegrationsView is the tenant's outgoing webhook endpoints and their
// recent deliveries (Settings > Integrations). Never a secret's value.
type IntegrationsView struct {
	Endpoints  []WebhookRow
	Deliveries []WebhookDeliveryRow
	// CanEdit: admins add, enable, disable, test and delete endpoints.
	CanEdit    bool
	Form       WebhookForm
	EventTypes []string
	// SecretChoices are the tenant's live secrets, one of which signs.
	SecretChoices []Choice
}

// WebhookRow is one endpoint.
type WebhookRow struct {
	ID          string
	URL         string
	SecretName  string
	EventTypes  []string // empty: every type
	Description string
	Enabled     bool
	CreatedBy   string
	CreatedAt   time.Time
}

// WebhookDeliveryRow is one event sent (or being sent) to one endpoint.
type WebhookDeliveryRow struct {
	ID         string
	EventType  string
	EventID    string
	Endpoint   string
	State      string // pending | delivered | failed
	Attempts   int
	StatusCode int
	Error      string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// WebhookForm is the add form after a failed POST.
type WebhookForm struct {
	URL         string
	SecretName  string
	Description string
	EventTypes  []string
	Errors      map[string]string
}

// Checked reports whether the form had event type t ticked.
func (f WebhookForm) Checked(t string) bool {
	for _, x := range f.EventTypes {
		if x == t {
			return true
		}
	}
	return false
}

// signingPlaceholder is the empty choice of the signing secret: a prompt,
// or what to do when the tenant has no secret yet.
func signingPlaceholder(choices []Choice) string {
	if len(choices) == 0 {
		return "No secrets yet: add one first"
	}
	return "Choose a secret…"
}
