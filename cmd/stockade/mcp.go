package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

const mcpHelp = `Usage: stockade mcp [--name stockade] [--json] [--inline-token] [--check]

Prints how to add this server's MCP endpoint (STOCKADE_URL/mcp, Streamable
HTTP, the API token of STOCKADE_TOKEN as a bearer token) to a coding agent:
the Claude Code command and an mcpServers JSON document for other clients.
The token is written as ${STOCKADE_TOKEN}, expanded by your shell (Claude
Code's command) or by the client (.mcp.json); --inline-token writes the
secret itself, for clients that expand nothing. --check connects with an
MCP client and lists the tools the token may call.
`

// mcpCmd is `stockade mcp`.
func mcpCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stockade mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, mcpHelp) }
	name := fs.String("name", "stockade", "the server's name in the agent's config")
	jsonOnly := fs.Bool("json", false, "print only the mcpServers JSON document")
	inline := fs.Bool("inline-token", false, "write the token itself instead of ${STOCKADE_TOKEN}")
	check := fs.Bool("check", false, "connect and list the tools first")
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "stockade mcp: unexpected argument %q\n\n%s", fs.Arg(0), mcpHelp)
		return exitError(2)
	}
	if !validMCPName(*name) {
		return fmt.Errorf("--name %q: must be letters, digits, '-' or '_'", *name)
	}
	c, err := newAPIClient(getenv)
	if err != nil {
		return err
	}
	endpoint := c.base + "/mcp"
	if *check {
		tools, err := mcpTools(ctx, c, endpoint)
		if err != nil {
			return fmt.Errorf("check %s: %w", endpoint, err)
		}
		fmt.Fprintf(stderr, "%s answers; the token may call: %s\n", endpoint, strings.Join(tools, ", "))
	}
	token, header := "${STOCKADE_TOKEN}", `"Authorization: Bearer $STOCKADE_TOKEN"`
	if *inline {
		token, header = c.token, `"Authorization: Bearer `+c.token+`"`
	}
	doc, err := json.MarshalIndent(map[string]any{"mcpServers": map[string]any{*name: map[string]any{
		"type": "http", "url": endpoint, "headers": map[string]string{"Authorization": "Bearer " + token},
	}}}, "", "  ")
	if err != nil {
		return err
	}
	if *jsonOnly {
		fmt.Fprintf(stdout, "%s\n", doc)
		return nil
	}
	fmt.Fprintf(stdout, "# Stockade's MCP server: %s (Streamable HTTP; the API token as a bearer token)\n\n", endpoint)
	fmt.Fprintf(stdout, "# Claude Code:\nclaude mcp add --transport http %s %s --header %s\n\n", *name, endpoint, header)
	fmt.Fprintf(stdout, "# Clients that take an mcpServers JSON document (Claude Code's .mcp.json, Cursor's mcp.json, ...):\n%s\n", doc)
	return nil
}

func validMCPName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// bearerTransport sends the API token with every request.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// mcpTools initializes an MCP session at endpoint and lists its tools.
func mcpTools(ctx context.Context, c *apiClient, endpoint string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "stockade-cli", Version: version}, nil)
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: endpoint,
		HTTPClient: &http.Client{Transport: bearerTransport{c.token, c.http.Transport}}, MaxRetries: -1}, nil)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range res.Tools {
		names = append(names, t.Name)
	}
	if len(names) == 0 {
		return nil, errors.New("no tools listed")
	}
	sort.Strings(names)
	return names, nil
}
