package main

import (
	"strings"
	"testing"
)

func TestConfigRecordingCaps(t *testing.T) {
	tests := []struct {
		name            string
		env             map[string]string
		session, tenant int64 // bytes passed on; 0 when check must refuse
	}{
		{"defaults", nil, 50 << 20, 5 << 30},
		{"set", map[string]string{"STOCKADE_RECORDING_MAX_MIB": "8", "STOCKADE_RECORDING_TENANT_MAX_MIB": "100"}, 8 << 20, 100 << 20},
		{"no caps", map[string]string{"STOCKADE_RECORDING_MAX_MIB": "-1", "STOCKADE_RECORDING_TENANT_MAX_MIB": "-1"}, -1, -1},
		{"zero", map[string]string{"STOCKADE_RECORDING_MAX_MIB": "0"}, 0, 0},
		{"not a number", map[string]string{"STOCKADE_RECORDING_TENANT_MAX_MIB": "5GiB"}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(t, tc.env)
			if tc.session == 0 {
				if err == nil || !strings.Contains(err.Error(), "STOCKADE_RECORDING_") {
					t.Errorf("Got(check()) = %v; want an error naming the variable", err)
				}
				return
			}
			if got, gotT := mib(c.RecordingMaxMiB), mib(c.RecordingTenantMaxMiB); err != nil || got != tc.session || gotT != tc.tenant {
				t.Errorf("Got(check()) = %v, caps %d, %d; want nil, %d, %d", err, got, gotT, tc.session, tc.tenant)
			}
		})
	}
}
