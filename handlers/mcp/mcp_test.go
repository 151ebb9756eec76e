package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web"
	"github.com/stockade-dev/stockade/web/webtest"
)

// bearer adds the API token to every request of the MCP client.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connect opens an MCP session to env's /mcp with the go-sdk's client over
// Streamable HTTP, authenticated by token.
func connect(t *testing.T, env *webtest.Env, token string) *sdk.ClientSession {
	t.Helper()
	client := sdk.NewClient(&sdk.Implementation{Name: "stockade-test", Version: "1"}, nil)
	tr := &sdk.StreamableClientTransport{Endpoint: env.URL + web.MCPPath,
		HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := client.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", web.MCPPath, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool; a protocol error fails the test, a tool error does not.
func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

// text is a result's text content.
func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// decode reads a successful result's structured content into out.
func decode(t *testing.T, name string, res *sdk.CallToolResult, out any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("Got(%s) = tool error %q; want success", name, text(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("decode %s's answer %s: %v", name, b, err)
	}
}

// wantToolError checks that res is a tool error whose message has every
// one of want.
func wantToolError(t *testing.T, what string, res *sdk.CallToolResult, want ...string) {
	t.Helper()
	msg := text(res)
	t.Logf("%s: %s", what, msg)
	if !res.IsError {
		t.Errorf("Got(%s) = success %s; want a tool error", what, msg)
		return
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("Got(%s) = tool error %q; want it to say %q", what, msg, w)
		}
	}
}

// wantOthersNotFound calls each tool of calls as cs (another tenant's
// session) on sandboxID, with the tool's other arguments, and wants
// not-found naming sandbox_id every time.
func wantOthersNotFound(t *testing.T, cs *sdk.ClientSession, sandboxID string, calls map[string]map[string]any) {
	t.Helper()
	for tool, args := range calls {
		args["sandbox_id"] = sandboxID
		wantToolError(t, "another tenant's "+tool, call(t, cs, tool, args), `not-found: sandbox_id: no sandbox "`+sandboxID+`" in this tenant`)
	}
}

type listOut struct {
	Sandboxes []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"sandboxes"`
}

func listIDs(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	var out listOut
	decode(t, "list_sandboxes", call(t, cs, "list_sandboxes", nil), &out)
	ids := []string{}
	for _, sb := range out.Sandboxes {
		ids = append(ids, sb.ID)
	}
	return ids
}

// toolCalls are the mcp.tool_call events of tenantID: tool -> outcomes.
func toolCalls(t *testing.T, env *webtest.Env, tenantID string) []audit.Event {
	t.Helper()
	var out []audit.Event
	for _, e := range env.Events(t, audit.TypeMCPToolCall) {
		if e.TenantID == tenantID {
			out = append(out, e)
		}
	}
	return out
}

// TestMCPWithoutVMs drives /mcp with the go-sdk client against the whole
// app (no VMs: sandboxes are stored records): initialize, tools/list with
// generated schemas, isolation between tenants, bad input as tool errors
// naming the field, role permissions as the REST twins', the audit of
// every call; and the HTTP refusals: no token, a bad token, a cookie, a
// browser page of another site.
func TestMCPWithoutVMs(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	tnA, tnB := env.Tenant(t, "mcp-a"), env.Tenant(t, "mcp-b")
	sbA := sandboxtest.Record(t, env.DB, tnA.ID, "fixture")
	devA := connect(t, env, env.Token(t, tnA, tenants.RoleDeveloper))
	devB := connect(t, env, env.Token(t, tnB, tenants.RoleDeveloper))
	managerA := connect(t, env, env.Token(t, tnA, tenants.RoleManager))

	if got := devA.InitializeResult(); got == nil || got.ServerInfo == nil || got.ServerInfo.Name != "stockade" {
		t.Fatalf("Got(initialize server info) = %+v; want stockade", got)
	}
	ctx := context.Background()
	tl, err := devA.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	schemas := map[string]map[string]any{}
	for _, tool := range tl.Tools {
		b, _ := json.Marshal(tool.InputSchema)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		schemas[tool.Name] = m
	}
	for _, tc := range []struct {
		tool     string
		required []string
	}{
		{"list_sandboxes", nil}, {"create_sandbox", nil}, {"destroy_sandbox", []string{"sandbox_id"}},
		{"exec", []string{"sandbox_id", "cmd"}}, {"read_file", []string{"sandbox_id", "path"}},
		{"write_file", []string{"sandbox_id", "path", "content"}}, {"get_port_url", []string{"sandbox_id", "port"}},
	} {
		s, ok := schemas[tc.tool]
		if !ok {
			t.Errorf("Got(tools/list) = %v; want %s", slices.Collect(mapKeys(schemas)), tc.tool)
			continue
		}
		var req []string
		reqs, _ := s["required"].([]any)
		for _, r := range reqs {
			req = append(req, r.(string))
		}
		slices.Sort(req)
		want := slices.Clone(tc.required)
		slices.Sort(want)
		if !slices.Equal(req, want) || s["type"] != "object" {
			t.Errorf("Got(%s input schema required) = %v (type %v); want %v (object)", tc.tool, req, s["type"], want)
		}
	}
	// Descriptions come from jsonschema tags, or the wire types' doc tags.
	for _, tc := range []struct{ tool, prop string }{{"exec", "cmd"}, {"exec", "sandbox_id"}, {"create_sandbox", "template"}, {"write_file", "encoding"}} {
		props, _ := schemas[tc.tool]["properties"].(map[string]any)
		if p, _ := props[tc.prop].(map[string]any); p == nil || p["description"] == "" || p["description"] == nil {
			t.Errorf("Got(%s input schema property %s) = %v; want it described", tc.tool, tc.prop, p)
		}
	}

	// Isolation: B sees none of A's, and A's id is not found for B.
	if ids := listIDs(t, devA); !slices.Contains(ids, sbA.ID) {
		t.Errorf("Got(list_sandboxes of A) = %v; want %s", ids, sbA.ID)
	}
	if ids := listIDs(t, devB); len(ids) != 0 {
		t.Errorf("Got(list_sandboxes of B) = %v; want none", ids)
	}
	wantOthersNotFound(t, devB, sbA.ID, map[string]map[string]any{
		"exec":            {"cmd": []string{"echo", "hi"}},
		"read_file":       {"path": "/etc/hostname"},
		"write_file":      {"path": "x", "content": "y"},
		"destroy_sandbox": {},
		"get_port_url":    {"port": 8000},
	})
	if st, err := env.App.Sandboxes.Get(ctx, tnA.ID, sbA.ID); err != nil || st.State != sandbox.StateRunning {
		t.Errorf("Got(A's sandbox after B's calls) = %v, %v; want running", st.State, err)
	}

	// Bad input: a tool error naming the field; nothing is called.
	for _, tc := range []struct {
		name, tool string
		args       map[string]any
		want       []string
	}{
		{"missing sandbox_id", "exec", map[string]any{"cmd": []string{"true"}}, []string{"sandbox_id"}},
		{"missing cmd", "exec", map[string]any{"sandbox_id": sbA.ID}, []string{"cmd"}},
		{"empty cmd", "exec", map[string]any{"sandbox_id": sbA.ID, "cmd": []string{}}, []string{"invalid: cmd: is required"}},
		{"empty sandbox_id", "destroy_sandbox", map[string]any{"sandbox_id": " "}, []string{"invalid: sandbox_id: is required"}},
		{"cmd of the wrong type", "exec", map[string]any{"sandbox_id": sbA.ID, "cmd": "echo hi"}, []string{"cmd"}},
		{"unknown sandbox", "exec", map[string]any{"sandbox_id": "no-such-sandbox", "cmd": []string{"true"}},
			[]string{`not-found: sandbox_id: no sandbox "no-such-sandbox" in this tenant`}},
		{"bad encoding", "write_file", map[string]any{"sandbox_id": sbA.ID, "path": "x", "content": "y", "encoding": "rot13"},
			[]string{`invalid: encoding: must be "utf-8" or "base64"`}},
		{"bad mode", "write_file", map[string]any{"sandbox_id": sbA.ID, "path": "x", "content": "y", "mode": "rwx"},
			[]string{"invalid: mode: must be octal"}},
		{"bad base64", "write_file", map[string]any{"sandbox_id": sbA.ID, "path": "x", "content": "!!", "encoding": "base64"},
			[]string{"invalid: content: is not valid base64"}},
		{"vcpus of the wrong type", "create_sandbox", map[string]any{"vcpus": "two"}, []string{"vcpus"}},
		{"port 0", "get_port_url", map[string]any{"sandbox_id": sbA.ID, "port": 0}, []string{"invalid: port: must be a TCP port, 1 to 65535"}},
		{"port 70000", "get_port_url", map[string]any{"sandbox_id": sbA.ID, "port": 70000}, []string{"invalid: port: must be a TCP port, 1 to 65535"}},
		{"port of an unknown sandbox", "get_port_url", map[string]any{"sandbox_id": "no-such-sandbox", "port": 8000},
			[]string{`not-found: sandbox_id: no sandbox "no-such-sandbox" in this tenant`}},
	} {
		wantToolError(t, tc.name, call(t, devA, tc.tool, tc.args), tc.want...)
	}
	// get_port_url answers what the REST route does.
	var port struct{ URL string }
	decode(t, "get_port_url", call(t, devA, "get_port_url", map[string]any{"sandbox_id": sbA.ID, "port": 8000}), &port)
	var rest struct{ URL string }
	if status, body := env.WithToken(env.Token(t, tnA, tenants.RoleDeveloper)).JSON(t, http.MethodGet, "/api/v1/sandboxes/"+sbA.ID+"/ports/8000", nil, &rest); status != http.StatusOK {
		t.Fatalf("GET /api/v1/sandboxes/%s/ports/8000 = %d %s; want 200", sbA.ID, status, body)
	}
	if want := env.URL + "/api/v1/sandboxes/" + sbA.ID + "/ports/8000/"; port.URL != want || rest.URL != want {
		t.Errorf("Got(get_port_url) = %q (REST %q); want %q", port.URL, rest.URL, want)
	}
	if _, err := devA.CallTool(ctx, &sdk.CallToolParams{Name: "no_such_tool"}); err == nil {
		t.Errorf("Got(call of an unknown tool) = no error; want a protocol error")
	}

	// A manager may list (sandboxes.read) but not exec (sandboxes.write),
	// like the REST routes; the refusal changes nothing.
	if ids := listIDs(t, managerA); !slices.Contains(ids, sbA.ID) {
		t.Errorf("Got(manager's list_sandboxes) = %v; want %s", ids, sbA.ID)
	}
	for tool, args := range map[string]map[string]any{
		"exec": {"sandbox_id": sbA.ID, "cmd": []string{"true"}}, "destroy_sandbox": {"sandbox_id": sbA.ID}, "create_sandbox": {},
		"read_file": {"sandbox_id": sbA.ID, "path": "x"}, "write_file": {"sandbox_id": sbA.ID, "path": "x", "content": "y"},
		"get_port_url": {"sandbox_id": sbA.ID, "port": 8000},
	} {
		wantToolError(t, "manager's "+tool, call(t, managerA, tool, args), "forbidden: the manager role does not allow sandboxes.write")
	}
	if st, err := env.App.Sandboxes.Get(ctx, tnA.ID, sbA.ID); err != nil || st.State != sandbox.StateRunning {
		t.Errorf("Got(A's sandbox after the manager's calls) = %v, %v; want running", st.State, err)
	}

	// Every call is audited in the caller's tenant with the tool, the
	// sandbox and the outcome; never the arguments.
	type row struct{ tool, sandbox, outcome, err string }
	var rowsA, rowsB []row
	for _, e := range toolCalls(t, env, tnA.ID) {
		s, _ := e.Details["sandbox_id"].(string)
		er, _ := e.Details["error"].(string)
		rowsA = append(rowsA, row{e.Details["tool"].(string), s, e.Outcome, er})
		if b, _ := json.Marshal(e.Details); strings.Contains(string(b), "echo") || strings.Contains(string(b), "content") {
			t.Errorf("Got(audit details) = %s; want no arguments", b)
		}
	}
	for _, e := range toolCalls(t, env, tnB.ID) {
		s, _ := e.Details["sandbox_id"].(string)
		er, _ := e.Details["error"].(string)
		rowsB = append(rowsB, row{e.Details["tool"].(string), s, e.Outcome, er})
	}
	for _, want := range []row{
		{"list_sandboxes", "", audit.OutcomeSuccess, ""},
		{"exec", "", audit.OutcomeFailure, "invalid-arguments"},
		{"exec", sbA.ID, audit.OutcomeFailure, "invalid"},
		{"exec", "no-such-sandbox", audit.OutcomeFailure, "not-found"},
		{"exec", sbA.ID, audit.OutcomeDenied, "forbidden"},
		{"destroy_sandbox", sbA.ID, audit.OutcomeDenied, "forbidden"},
		{"no_such_tool", "", audit.OutcomeFailure, "protocol"},
	} {
		if !slices.Contains(rowsA, want) {
			t.Errorf("Got(A's mcp.tool_call events) = %v; want one %v", rowsA, want)
		}
	}
	for _, want := range []row{
		{"list_sandboxes", "", audit.OutcomeSuccess, ""},
		{"exec", sbA.ID, audit.OutcomeFailure, "not-found"},
		{"destroy_sandbox", sbA.ID, audit.OutcomeFailure, "not-found"},
	} {
		if !slices.Contains(rowsB, want) {
			t.Errorf("Got(B's mcp.tool_call events) = %v; want one %v", rowsB, want)
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestMCPRefusals: /mcp takes an API token and nothing else, and refuses
// browser pages of other sites before looking at the token.
func TestMCPRefusals(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	tn := env.Tenant(t, "mcp-refusals")
	token := env.Token(t, tn, tenants.RoleAdmin)
	env.Member(t, tn, "ann@example.com", tenants.RoleAdmin)
	browser := env.Login(t, "ann@example.com")
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, tc := range []struct {
		name   string
		client *http.Client
		hdr    map[string]string
		want   int
	}{
		{"no token", http.DefaultClient, nil, http.StatusUnauthorized},
		{"unknown token", http.DefaultClient, map[string]string{"Authorization": "Bearer stk_nope"}, http.StatusUnauthorized},
		{"not bearer", http.DefaultClient, map[string]string{"Authorization": "Basic " + token}, http.StatusUnauthorized},
		{"session cookie, no token", browser.Client, nil, http.StatusUnauthorized},
		{"session cookie and its CSRF token", browser.Client, map[string]string{"X-CSRF-Token": browser.CSRF(t)}, http.StatusUnauthorized},
		{"another site's page", http.DefaultClient, map[string]string{"Authorization": "Bearer " + token, "Origin": "https://evil.example"}, http.StatusForbidden},
		{"this server's page", http.DefaultClient, map[string]string{"Authorization": "Bearer " + token, "Origin": env.URL}, http.StatusOK},
		{"no Origin (not a browser)", http.DefaultClient, map[string]string{"Authorization": "Bearer " + token}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, env.URL+web.MCPPath, strings.NewReader(initialize))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			resp, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("Got(POST %s) = %d %s; want %d", web.MCPPath, resp.StatusCode, body, tc.want)
			}
			if tc.want == http.StatusOK && !strings.Contains(string(body), `"serverInfo"`) {
				t.Errorf("Got(initialize) = %s; want the server's info", body)
			}
			if tc.want != http.StatusOK && resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("Got(Content-Type of a refusal) = %q; want application/problem+json", resp.Header.Get("Content-Type"))
			}
		})
	}
	if evs := env.Events(t, audit.TypeTokenFailed); len(evs) == 0 {
		t.Errorf("Got(auth.token_failed events) = none; want the unknown token's")
	}
}
