package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestMCPCommand: `stockade mcp` prints the Claude Code command and the
// mcpServers document for STOCKADE_URL and STOCKADE_TOKEN, the token by
// reference unless --inline-token; --check connects to the real /mcp with
// an MCP client and names the tools; a bad token fails the check.
func TestMCPCommand(t *testing.T) {
	e := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t)})
	tn := e.Tenant(t, "cli-mcp")
	token := e.Token(t, tn, tenants.RoleDeveloper)
	getenv := env(map[string]string{"STOCKADE_URL": e.URL + "/", "STOCKADE_TOKEN": token})
	endpoint := e.URL + "/mcp"

	out, stderr, err := cli(t, getenv, "mcp", "--check")
	if err != nil {
		t.Fatalf("stockade mcp --check: %v (%s)", err, stderr)
	}
	wantCmd := "claude mcp add --transport http stockade " + endpoint + ` --header "Authorization: Bearer $STOCKADE_TOKEN"`
	if !strings.Contains(out, wantCmd) {
		t.Errorf("Got(stockade mcp) =\n%s\nwant the line %s", out, wantCmd)
	}
	if strings.Contains(out, token) {
		t.Errorf("Got(stockade mcp) prints the token; want ${STOCKADE_TOKEN} without --inline-token")
	}
	if !strings.Contains(stderr, "list_sandboxes") || !strings.Contains(stderr, "exec") {
		t.Errorf("Got(stockade mcp --check stderr) = %q; want the tools", stderr)
	}

	out, _, err = cli(t, getenv, "mcp", "--json", "--inline-token", "--name", "sbx")
	var doc struct {
		MCPServers map[string]struct {
			Type    string            `json:"type"`
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"mcpServers"`
	}
	if err != nil || json.Unmarshal([]byte(out), &doc) != nil {
		t.Fatalf("Got(stockade mcp --json) = %v\n%s; want a JSON document", err, out)
	}
	if s := doc.MCPServers["sbx"]; s.Type != "http" || s.URL != endpoint || s.Headers["Authorization"] != "Bearer "+token {
		t.Errorf("Got(mcpServers.sbx) = %+v; want http, %s, the bearer token", s, endpoint)
	}

	bad := env(map[string]string{"STOCKADE_URL": e.URL, "STOCKADE_TOKEN": "stk_not_a_token"})
	for _, tc := range []struct {
		name    string
		getenv  func(string) string
		args    []string
		wantErr string
	}{
		{"a bad token fails the check", bad, []string{"mcp", "--check"}, "check " + endpoint},
		{"no token", env(map[string]string{"STOCKADE_URL": e.URL}), []string{"mcp"}, "STOCKADE_TOKEN is not set"},
		{"bad name", getenv, []string{"mcp", "--name", "a b"}, "--name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := cli(t, tc.getenv, tc.args...); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Got(stockade %s) = %v; want an error saying %q", strings.Join(tc.args, " "), err, tc.wantErr)
			}
		})
	}
}
