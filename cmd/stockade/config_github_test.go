package main

import (
	"strings"
	"testing"
)

func TestConfigGitHubURLs(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		api, git string // the values kept; "" when check must refuse
	}{
		{"defaults", nil, "https://api.github.com", "https://github.com"},
		{"enterprise server", map[string]string{"STOCKADE_GITHUB_API": "https://ghe.example.com/api/v3", "STOCKADE_GITHUB_URL": "https://ghe.example.com"},
			"https://ghe.example.com/api/v3", "https://ghe.example.com"},
		{"not http", map[string]string{"STOCKADE_GITHUB_URL": "ssh://git@github.com"}, "", ""},
		{"no host", map[string]string{"STOCKADE_GITHUB_API": "https://"}, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := checkedConfig(t, tc.env)
			if tc.api == "" {
				if err == nil || !strings.Contains(err.Error(), "STOCKADE_GITHUB_") {
					t.Errorf("Got(check()) = %v; want an error naming the variable", err)
				}
				return
			}
			if err != nil || c.GitHubAPI != tc.api || c.GitHubURL != tc.git {
				t.Errorf("Got(check()) = %v, api %q, git %q; want nil, %q, %q", err, c.GitHubAPI, c.GitHubURL, tc.api, tc.git)
			}
		})
	}
}
