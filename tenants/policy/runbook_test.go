package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/policy"
)

// TestRunbookURL: the incident-response runbook is an http(s) URL or empty;
// anything else names its path.
func TestRunbookURL(t *testing.T) {
	v := validator(t)
	tests := []struct {
		url string
		ok  bool
	}{
		{"", true},
		{"https://wiki.acme.test/runbooks/agent-compromise", true},
		{"http://intranet.acme.test/rb?id=7#step-2", true},
		{"javascript:alert(1)", false},
		{"ftp://files.acme.test/runbook", false},
		{"https://", false},
		{"https://wiki.acme.test/a b", false},
		{"https://wiki.acme.test/" + strings.Repeat("a", 2100), false},
	}
	for _, tc := range tests {
		t.Run(tc.url[:min(len(tc.url), 40)], func(t *testing.T) {
			d := policy.Defaults()
			d.IncidentResponse.RunbookURL = tc.url
			got, err := v.Check(d)
			switch {
			case tc.ok && err != nil:
				t.Fatalf("Got(Check) = %v; want nil", err)
			case tc.ok && got.IncidentResponse.RunbookURL != tc.url:
				t.Errorf("Got(runbook_url) = %q; want %q", got.IncidentResponse.RunbookURL, tc.url)
			case !tc.ok:
				var fe *errdefs.FieldError
				if !errors.Is(err, errdefs.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "/incident_response/runbook_url" {
					t.Errorf("Got(Check) = %v; want a field error on /incident_response/runbook_url", err)
				}
			}
		})
	}
}
