package views

import "time"

// PortsView is the Ports card of a sandbox's page (ports.templ): open a
// port, make a preview link, list and revoke links.
type PortsView struct {
	SandboxID string
	Running   bool
	CSRF      string
	// NewURL is the preview link just made, token included: shown once.
	NewURL string
	// Port and TTL are the form's values; Errors its refusals by field.
	Port, TTLMinutes string
	Errors           map[string]string
	Links            []PreviewLinkRow
	Now              time.Time
}

// PreviewLinkRow is one preview link.
type PreviewLinkRow struct {
	ID        string
	Port      int
	CreatedBy string
	CreatedAt time.Time
	ExpiresAt time.Time
	Revoked   bool
	Active    bool
}

func (r PreviewLinkRow) state() string {
	switch {
	case r.Revoked:
		return "revoked"
	case !r.Active:
		return "expired"
	}
	return "active"
}
