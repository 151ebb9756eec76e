package main

import (
	"strings"
	"testing"
)

// TestConfigIncident: the platform's incident contacts and runbook are read
// from the environment; a contact that is not an email address or a
// runbook that is not an http(s) URL stops serve naming the variable.
func TestConfigIncident(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		contacts []string
		runbook  string
		wantErr  string
	}{
		{"unset", nil, nil, "", ""},
		{"both", map[string]string{"STOCKADE_INCIDENT_CONTACTS": "secops@corp.test, oncall@corp.test", "STOCKADE_INCIDENT_RUNBOOK_URL": "https://wiki.corp.test/ir"},
			[]string{"secops@corp.test", "oncall@corp.test"}, "https://wiki.corp.test/ir", ""},
		{"not an email", map[string]string{"STOCKADE_INCIDENT_CONTACTS": "secops"}, nil, "", "STOCKADE_INCIDENT_CONTACTS"},
		{"a display name", map[string]string{"STOCKADE_INCIDENT_CONTACTS": "Sec Ops <secops@corp.test>"}, nil, "", "STOCKADE_INCIDENT_CONTACTS"},
		{"a script runbook", map[string]string{"STOCKADE_INCIDENT_RUNBOOK_URL": "javascript:alert(1)"}, nil, "", "STOCKADE_INCIDENT_RUNBOOK_URL"},
		{"credentials in the runbook", map[string]string{"STOCKADE_INCIDENT_RUNBOOK_URL": "https://u:p@wiki.corp.test/ir"}, nil, "", "STOCKADE_INCIDENT_RUNBOOK_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(t, tc.env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Got(check()) = %v; want an error naming %s", err, tc.wantErr)
				}
				return
			}
			if got := splitList(c.IncidentContacts); err != nil || strings.Join(got, ",") != strings.Join(tc.contacts, ",") || c.IncidentRunbookURL != tc.runbook {
				t.Errorf("Got(check()) = %v, contacts %q, runbook %q; want nil, %q, %q", err, got, c.IncidentRunbookURL, tc.contacts, tc.runbook)
			}
		})
	}
}
