package compliance

import (
	"context"
	"fmt"

	"github.com/stockade-dev/stockade/tenants/policy"
)

// Where an incident-response setting comes from.
const (
	FromTenant   = "tenant"   // the tenant's policy, incident_response
	FromPlatform = "platform" // the deployment's STOCKADE_INCIDENT_* settings
)

// Incident is a tenant's incident-response process as it stands: who
// responds and which runbook they follow, each from the tenant's policy or,
// when it names none, from the platform ("" when neither names one).
type Incident struct {
	PolicyVersion  int
	Contacts       []string
	ContactsFrom   string
	RunbookURL     string
	RunbookFrom    string
	OnEgressDenied string
}

// Defined reports a process with both someone to call and a runbook.
func (i Incident) Defined() bool { return i.ContactsFrom != "" && i.RunbookFrom != "" }

// ResolveIncident is the process of a tenant on policy version pol under
// platform p: the tenant's own contacts and runbook win, each falling back
// to the platform's on its own.
func ResolveIncident(pol policy.Version, p Platform) Incident {
	ir := pol.Doc.IncidentResponse
	out := Incident{PolicyVersion: pol.Version, OnEgressDenied: ir.OnEgressDenied, Contacts: []string{}}
	switch {
	case len(ir.NotifyEmails) > 0:
		out.Contacts, out.ContactsFrom = ir.NotifyEmails, FromTenant
	case len(p.IncidentContacts) > 0:
		out.Contacts, out.ContactsFrom = p.IncidentContacts, FromPlatform
	}
	switch {
	case ir.RunbookURL != "":
		out.RunbookURL, out.RunbookFrom = ir.RunbookURL, FromTenant
	case p.IncidentRunbookURL != "":
		out.RunbookURL, out.RunbookFrom = p.IncidentRunbookURL, FromPlatform
	}
	return out
}

// Incident is the tenant's incident-response process now: its current
// policy resolved against the platform's settings.
func (s *Service) Incident(ctx context.Context, tenantID string) (Incident, error) {
	pol, err := s.cfg.Policies.Current(ctx, tenantID)
	if err != nil {
		return Incident{}, fmt.Errorf("incident response of tenant %s: %w", tenantID, err)
	}
	return ResolveIncident(pol, s.cfg.Platform), nil
}
