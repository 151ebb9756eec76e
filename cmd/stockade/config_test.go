package main

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// parseConfig reads env (plus a fresh data dir) and args like serve does,
// and returns the config and check's verdict.
func parseConfig(t *testing.T, env map[string]string, args ...string) (config, error) {
	t.Helper()
	all := map[string]string{"STOCKADE_DATA_DIR": t.TempDir()}
	for k, v := range env {
		all[k] = v
	}
	var c config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.flags(fs, func(k string) string { return all[k] })
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse flags %v: %v", args, err)
	}
	return c, c.check()
}

func TestConfigGitHubURLs(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		api, git string // the values kept; "" when check must refuse
		refusal  string // what the refusal must name
	}{
		{"defaults", nil, "https://api.github.com", "https://github.com", ""},
		{"enterprise server", map[string]string{"STOCKADE_GITHUB_API": "https://ghe.example.com/api/v3", "STOCKADE_GITHUB_URL": "https://ghe.example.com"},
			"https://ghe.example.com/api/v3", "https://ghe.example.com", ""},
		{"trailing slashes", map[string]string{"STOCKADE_GITHUB_API": "https://ghe.example.com/api/v3/", "STOCKADE_GITHUB_URL": "https://ghe.example.com/"},
			"https://ghe.example.com/api/v3", "https://ghe.example.com", ""},
		{"not http", map[string]string{"STOCKADE_GITHUB_URL": "ssh://git@github.com"}, "", "", "STOCKADE_GITHUB_URL"},
		{"no host", map[string]string{"STOCKADE_GITHUB_API": "https://"}, "", "", "STOCKADE_GITHUB_API"},
		// Credentials in the URL would go into every clone URL and log line.
		{"userinfo in url", map[string]string{"STOCKADE_GITHUB_URL": "https://x-access-token:ghp_s3cret@github.com"}, "", "", "STOCKADE_GITHUB_URL"},
		{"user in api", map[string]string{"STOCKADE_GITHUB_API": "https://bot@api.github.com"}, "", "", "STOCKADE_GITHUB_API"},
		{"path in url", map[string]string{"STOCKADE_GITHUB_URL": "https://evil.example/github.com"}, "", "", "STOCKADE_GITHUB_URL"},
		{"enterprise path in url", map[string]string{"STOCKADE_GITHUB_URL": "https://ghe.example.com/api/v3"}, "", "", "STOCKADE_GITHUB_URL"},
		{"other path in api", map[string]string{"STOCKADE_GITHUB_API": "https://api.github.com/repos/acme"}, "", "", "STOCKADE_GITHUB_API"},
		{"query in api", map[string]string{"STOCKADE_GITHUB_API": "https://api.github.com?access_token=s3cret"}, "", "", "STOCKADE_GITHUB_API"},
		{"query in url", map[string]string{"STOCKADE_GITHUB_URL": "https://github.com/?x=1"}, "", "", "STOCKADE_GITHUB_URL"},
		{"fragment", map[string]string{"STOCKADE_GITHUB_URL": "https://github.com#x"}, "", "", "STOCKADE_GITHUB_URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(t, tc.env)
			if tc.api == "" {
				if err == nil || !strings.Contains(err.Error(), tc.refusal) {
					t.Errorf("Got(check()) = %v; want an error naming %s", err, tc.refusal)
				}
				if err != nil && strings.Contains(err.Error(), "s3cret") {
					t.Errorf("Got(check()) = %v; want the credentials left out of the message", err)
				}
				return
			}
			if err != nil || c.GitHubAPI != tc.api || c.GitHubURL != tc.git {
				t.Errorf("Got(check()) = %v, api %q, git %q; want nil, %q, %q", err, c.GitHubAPI, c.GitHubURL, tc.api, tc.git)
			}
		})
	}
}

// A value that does not parse stops serve, naming the variable, instead of
// running with 0 (or the default) in its place.
func TestConfigBadValues(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"STOCKADE_RECORDING_RETENTION_DAYS", "abc"},
		{"STOCKADE_RECORDING_RETENTION_DAYS", "0"},
		{"STOCKADE_RECORDING_RETENTION_DAYS", "-3"},
		{"STOCKADE_COMPLIANCE_INTERVAL", "5 minutes"},
		{"STOCKADE_COMPLIANCE_INTERVAL", "0"},
		{"STOCKADE_PROBE_INTERVAL", "daily"},
		{"STOCKADE_METRICS_TENANTS", "lots"},
		{"STOCKADE_METRICS_TENANTS", "0"},
		{"STOCKADE_RECORD_INPUT", "yes please"},
		{"STOCKADE_DEV_IDP", "sure"},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			_, err := parseConfig(t, map[string]string{tc.name: tc.value})
			if err == nil || !strings.Contains(err.Error(), tc.name) {
				t.Errorf("Got(check()) = %v; want an error naming %s", err, tc.name)
			}
		})
	}
	t.Run("good values kept", func(t *testing.T) {
		c, err := parseConfig(t, map[string]string{"STOCKADE_RECORDING_RETENTION_DAYS": "30", "STOCKADE_COMPLIANCE_INTERVAL": "90s",
			"STOCKADE_PROBE_INTERVAL": "0", "STOCKADE_METRICS_TENANTS": "7", "STOCKADE_RECORD_INPUT": "true"})
		if err != nil || c.RetentionDays != 30 || c.ComplianceInterval != 90*time.Second || c.ProbeInterval != -1 || c.MetricsTenants != 7 || !c.RecordInput {
			t.Errorf("Got(check()) = %v, %+v; want nil, 30 days, 90s, on-demand probe, 7 tenants, input recorded", err, c)
		}
	})
	t.Run("a flag overrides a bad variable", func(t *testing.T) {
		c, err := parseConfig(t, map[string]string{"STOCKADE_RECORDING_RETENTION_DAYS": "abc"}, "--recording-retention-days", "30")
		if err != nil || c.RetentionDays != 30 {
			t.Errorf("Got(check()) = %v, %d days; want nil, 30 (flags win)", err, c.RetentionDays)
		}
	})
	t.Run("serve stops", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		getenv := env(map[string]string{"STOCKADE_DATA_DIR": t.TempDir(), "STOCKADE_ADDR": freeAddr(t), "STOCKADE_RECORDING_RETENTION_DAYS": "abc"})
		err := run(ctx, []string{"serve"}, getenv, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "STOCKADE_RECORDING_RETENTION_DAYS") {
			t.Errorf("Got(serve) = %v; want an error naming STOCKADE_RECORDING_RETENTION_DAYS", err)
		}
	})
}

// The development identity provider signs anyone in as any email, platform
// operators included: on an address other machines reach it needs
// --dev-idp in so many words.
func TestConfigDevIdPReach(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		ok   bool
	}{
		{"default address", nil, nil, true},
		{"loopback v6", map[string]string{"STOCKADE_ADDR": "[::1]:8080"}, nil, true},
		{"localhost", map[string]string{"STOCKADE_ADDR": "localhost:8080"}, nil, true},
		{"all interfaces", map[string]string{"STOCKADE_ADDR": "0.0.0.0:8080"}, nil, false},
		{"empty host", map[string]string{"STOCKADE_ADDR": ":8080"}, nil, false},
		{"lan address", map[string]string{"STOCKADE_ADDR": "192.0.2.10:8080"}, nil, false},
		// Loopback behind a proxy that publishes it: the world reaches it.
		{"public url", map[string]string{"STOCKADE_PUBLIC_URL": "https://stockade.example.com"}, nil, false},
		{"flag", map[string]string{"STOCKADE_ADDR": "0.0.0.0:8080"}, []string{"--dev-idp"}, true},
		{"env", map[string]string{"STOCKADE_ADDR": "0.0.0.0:8080", "STOCKADE_DEV_IDP": "true"}, nil, true},
		{"env false", map[string]string{"STOCKADE_ADDR": "0.0.0.0:8080", "STOCKADE_DEV_IDP": "false"}, nil, false},
		{"real issuer", map[string]string{"STOCKADE_ADDR": "0.0.0.0:8080", "STOCKADE_OIDC_ISSUER": "https://idp.example.com",
			"STOCKADE_OIDC_CLIENT_ID": "stockade"}, nil, true},
		{"both providers", map[string]string{"STOCKADE_OIDC_ISSUER": "https://idp.example.com", "STOCKADE_OIDC_CLIENT_ID": "stockade"},
			[]string{"--dev-idp"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(t, tc.env, tc.args...)
			switch {
			case tc.ok && err != nil:
				t.Errorf("Got(check()) = %v; want nil", err)
			case !tc.ok && (err == nil || !strings.Contains(err.Error(), "dev-idp")):
				t.Errorf("Got(check()) = %v; want a refusal naming --dev-idp", err)
			}
		})
	}
	t.Run("serve refuses", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		getenv := env(map[string]string{"STOCKADE_DATA_DIR": t.TempDir(), "STOCKADE_ADDR": "0.0.0.0:0"})
		err := run(ctx, []string{"serve"}, getenv, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "development identity provider") || !strings.Contains(err.Error(), "0.0.0.0:0") {
			t.Errorf("Got(serve on 0.0.0.0 without an issuer) = %v; want a refusal naming the address and the provider", err)
		}
	})
}
