package main

import (
	"strings"
	"testing"
)

func TestConfigTemplateImports(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		refusal string // "" when check accepts
		max     int64
	}{
		{"defaults", nil, "", 2 << 30},
		{"registries and a bound", map[string]string{"STOCKADE_TEMPLATE_REGISTRIES": "ghcr.io, registry.example.com:5000", "STOCKADE_TEMPLATE_MAX_UPLOAD_BYTES": "1048576"}, "", 1 << 20},
		{"a reference is no registry", map[string]string{"STOCKADE_TEMPLATE_REGISTRIES": "ghcr.io/acme"}, "STOCKADE_TEMPLATE_REGISTRIES", 0},
		{"zero bound", map[string]string{"STOCKADE_TEMPLATE_MAX_UPLOAD_BYTES": "0"}, "STOCKADE_TEMPLATE_MAX_UPLOAD_BYTES", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(t, tc.env)
			if tc.refusal != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refusal) {
					t.Errorf("Got(check()) = %v; want an error naming %s", err, tc.refusal)
				}
				return
			}
			if err != nil || c.TemplateMaxUpload != tc.max {
				t.Errorf("Got(check()) = %v, max %d; want nil, %d", err, c.TemplateMaxUpload, tc.max)
			}
		})
	}
}
