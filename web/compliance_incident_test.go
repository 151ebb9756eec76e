package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/compliance"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestComplianceIncidentResponse: with platform operators but no incident
// contacts anywhere, "Is there a defined incident-response process?" warns
// and says that the policy and the platform both name none; the platform's
// runbook (STOCKADE_INCIDENT_RUNBOOK_URL) counts and is shown as the
// platform's; once the tenant's policy names contacts nothing is missing,
// the page and the export saying where each setting comes from.
func TestComplianceIncidentResponse(t *testing.T) {
	ce := newComplianceEnvOn(t, webtest.Options{}, compliance.Platform{Gateway: true, SecretsEncrypted: true,
		OperatorContacts: []string{"ops@platform.test"}, IncidentRunbookURL: "https://wiki.platform.test/agent-incident"})
	ctx := context.Background()
	auditor := ce.people[tenants.RoleAuditor]
	// Without sandboxes no probe runs here, so the item stays at warn for
	// that alone ("no probe run yet"); what the process lacks is in the
	// evidence (tenants/compliance tests the statuses).
	check := func(wantStatus string, wantTexts, notTexts []string) {
		t.Helper()
		if _, err := ce.svc.Evaluate(ctx, ce.acme.ID); err != nil { // what the evaluation loop does
			t.Fatal(err)
		}
		var out complianceJSON
		if s, body := auditor.JSON(t, http.MethodGet, "/api/v1/compliance", nil, &out); s != http.StatusOK {
			t.Fatalf("Got(GET /api/v1/compliance) = %d %s; want 200", s, body)
		}
		status, ev := out.item(compliance.ItemIncidentResponse)
		all := strings.Join(ev, "\n")
		if status != wantStatus {
			t.Errorf("Got(incident_response) = %s %q; want %s", status, ev, wantStatus)
		}
		for _, w := range wantTexts {
			if !strings.Contains(all, w) {
				t.Errorf("Got(incident_response evidence) = %q; want %q in it", ev, w)
			}
		}
		for _, w := range notTexts {
			if strings.Contains(all, w) {
				t.Errorf("Got(incident_response evidence) = %q; want no %q", ev, w)
			}
		}
	}
	check("warn", []string{"no incident contact: neither the tenant's policy (version 0, incident_response.notify_emails) nor the platform (STOCKADE_INCIDENT_CONTACTS)",
		"the runbook for a compromised agent, from the platform (STOCKADE_INCIDENT_RUNBOOK_URL"}, []string{"ops@platform.test", "no runbook"})
	_, page := auditor.GetPage(t, "/compliance")
	for _, want := range []string{`id="incident-no-contacts"`, `href="https://wiki.platform.test/agent-incident"`, "the policy names none)"} {
		if !strings.Contains(page, want) {
			t.Errorf("Got(compliance page) without %q; want the missing contacts and the platform's runbook shown as such", want)
		}
	}

	doc := policy.Defaults()
	doc.IncidentResponse.NotifyEmails = []string{"secops@acme.test"}
	if s, body := ce.people[tenants.RoleAdmin].JSON(t, http.MethodPut, "/api/v1/policy", map[string]any{"policy": doc, "reason": "incident contacts"}, nil); s != http.StatusOK {
		t.Fatalf("Got(PUT /api/v1/policy) = %d %s; want 200", s, body)
	}
	check("warn", []string{"incident contacts from the tenant's policy (version 1): secops@acme.test", "from the platform (STOCKADE_INCIDENT_RUNBOOK_URL",
		"no probe run yet"}, []string{"no incident contact", "no runbook"})

	s, body, _ := auditor.Request(t, http.MethodGet, "/compliance/export", "", nil)
	var exp struct {
		Incident struct {
			Contacts     []string `json:"contacts"`
			ContactsFrom string   `json:"contacts_from"`
			RunbookURL   string   `json:"runbook_url"`
			RunbookFrom  string   `json:"runbook_from"`
		} `json:"incident_response"`
	}
	if err := json.Unmarshal([]byte(body), &exp); s != http.StatusOK || err != nil {
		t.Fatalf("Got(GET /compliance/export) = %d, %v; want 200 JSON", s, err)
	}
	if in := exp.Incident; strings.Join(in.Contacts, ",") != "secops@acme.test" || in.ContactsFrom != "tenant" ||
		in.RunbookURL != "https://wiki.platform.test/agent-incident" || in.RunbookFrom != "platform" {
		t.Errorf("Got(export incident_response) = %+v; want the tenant's contacts and the platform's runbook, each with its source", in)
	}
}
