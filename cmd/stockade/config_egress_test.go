package main

import (
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants/netguard"
)

// TestConfigEgress: the egress retention is a positive number of days
// (90 by default), and the operator's allowance can open private ranges
// but never loopback or metadata: those are for tests, injected in code.
func TestConfigEgress(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		days int    // kept; 0 when check must refuse
		err  string // what the refusal names
	}{
		{"default retention", nil, 90, ""},
		{"retention set", map[string]string{"STOCKADE_EGRESS_RETENTION_DAYS": "7"}, 7, ""},
		{"retention zero", map[string]string{"STOCKADE_EGRESS_RETENTION_DAYS": "0"}, 0, "STOCKADE_EGRESS_RETENTION_DAYS"},
		{"retention negative", map[string]string{"STOCKADE_EGRESS_RETENTION_DAYS": "-1"}, 0, "STOCKADE_EGRESS_RETENTION_DAYS"},
		{"private allowance", map[string]string{"STOCKADE_EGRESS_ALLOW_CIDRS": "10.20.0.0/16"}, 90, ""},
		{"loopback allowance", map[string]string{"STOCKADE_EGRESS_ALLOW_CIDRS": "10.20.0.0/16,127.0.0.0/8"}, 0, "never allowed"},
		{"metadata allowance", map[string]string{"STOCKADE_EGRESS_ALLOW_CIDRS": "169.254.169.254"}, 0, "never allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(t, tc.env)
			if err == nil {
				// What serve does with the allowance.
				_, err = netguard.ParseAllowance(c.EgressAllowCIDRs)
			}
			if tc.days == 0 {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("Got(check) = %v; want an error naming %q", err, tc.err)
				}
				return
			}
			if err != nil || c.EgressRetentionDays != tc.days {
				t.Errorf("Got(check) = %v, %d days; want nil, %d", err, c.EgressRetentionDays, tc.days)
			}
		})
	}
}
