package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web"
	"github.com/stockade-dev/stockade/web/webtest"
)

// nodeMCPSDK is the TypeScript SDK the Node test drives /mcp with, pinned.
const nodeMCPSDK = "@modelcontextprotocol/sdk@1.32.2"

// nodeClient is the Node script: the SDK's Client over its Streamable HTTP
// transport, the endpoint and token read from stdin (no secret in argv or
// the environment); it prints what it got as one JSON line.
const nodeClient = `
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { url, token, sandboxId } = JSON.parse(input);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: "Bearer " + token } },
});
const client = new Client({ name: "stockade-node-test", version: "1.0.0" });
await client.connect(transport);
const tools = await client.listTools();
const list = await client.callTool({ name: "list_sandboxes", arguments: {} });
const missing = await client.callTool({ name: "read_file", arguments: { sandbox_id: sandboxId } });
console.log(JSON.stringify({
  server: client.getServerVersion(),
  tools: tools.tools.map((t) => t.name),
  execSchema: tools.tools.find((t) => t.name === "exec")?.inputSchema,
  list: list.structuredContent,
  listIsError: list.isError ?? false,
  missing: { isError: missing.isError, text: missing.content.map((c) => c.text).join("") },
}));
await client.close();
`

// TestMCPNodeClient: the real npm MCP client (TypeScript SDK, pinned)
// initializes, lists the tools and calls one against /mcp; bad input is a
// tool error naming the field; the calls are audited.
func TestMCPNodeClient(t *testing.T) {
	mods := webtest.NodeModules(t, nodeMCPSDK, "@modelcontextprotocol/sdk")
	env := webtest.New(t, webtest.Options{})
	tn := env.Tenant(t, "mcp-node")
	sb := sandboxtest.Record(t, env.DB, tn.ID, "fixture")
	token := env.Token(t, tn, tenants.RoleDeveloper)

	dir := t.TempDir()
	if err := os.Symlink(mods, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "client.mjs")
	if err := os.WriteFile(script, []byte(nodeClient), 0o644); err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(map[string]string{"url": env.URL + web.MCPPath, "token": token, "sandboxId": sb.ID})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir, cmd.Stdin = dir, bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, stderr.String())
	}
	var got struct {
		Server struct {
			Name string `json:"name"`
		} `json:"server"`
		Tools      []string `json:"tools"`
		ExecSchema struct {
			Type     string   `json:"type"`
			Required []string `json:"required"`
		} `json:"execSchema"`
		List struct {
			Sandboxes []struct {
				ID string `json:"id"`
			} `json:"sandboxes"`
		} `json:"list"`
		ListIsError bool `json:"listIsError"`
		Missing     struct {
			IsError bool   `json:"isError"`
			Text    string `json:"text"`
		} `json:"missing"`
	}
	t.Logf("node client: %s", out)
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node client printed %s: %v", out, err)
	}
	if got.Server.Name != "stockade" {
		t.Errorf("Got(server name after initialize) = %q; want stockade", got.Server.Name)
	}
	for _, want := range []string{"list_sandboxes", "create_sandbox", "destroy_sandbox", "exec", "read_file", "write_file"} {
		if !slices.Contains(got.Tools, want) {
			t.Errorf("Got(tools/list) = %v; want %s", got.Tools, want)
		}
	}
	if got.ExecSchema.Type != "object" || !slices.Contains(got.ExecSchema.Required, "cmd") {
		t.Errorf("Got(exec input schema) = %+v; want an object requiring cmd", got.ExecSchema)
	}
	if got.ListIsError || len(got.List.Sandboxes) != 1 || got.List.Sandboxes[0].ID != sb.ID {
		t.Errorf("Got(list_sandboxes) = %+v (error %v); want the tenant's sandbox %s", got.List, got.ListIsError, sb.ID)
	}
	if !got.Missing.IsError || !strings.Contains(got.Missing.Text, "path") {
		t.Errorf("Got(read_file without path) = %+v; want a tool error naming path", got.Missing)
	}
	var tools []string
	for _, e := range toolCalls(t, env, tn.ID) {
		tools = append(tools, e.Details["tool"].(string)+"/"+e.Outcome)
	}
	if !slices.Contains(tools, "list_sandboxes/"+audit.OutcomeSuccess) || !slices.Contains(tools, "read_file/"+audit.OutcomeFailure) {
		t.Errorf("Got(mcp.tool_call events) = %v; want list_sandboxes/success and read_file/failure", tools)
	}
}
