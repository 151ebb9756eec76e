// Package mcp is Stockade's MCP server (Streamable HTTP): tools that
// create, list and destroy sandboxes, run commands and read and write
// files, for coding agents. The web server authenticates each request with
// the tenant's API token, as for the REST API, and hands it here with the
// caller; every tool calls the same sandbox.Service method its REST twin
// calls (so it is metered, bounded and audited alike), needs the
// permission its twin needs, and is itself audited as mcp.tool_call.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Deps are what the MCP server needs; every one is required but Log.
type Deps struct {
	Sandboxes *sandbox.Service
	Audit     *audit.Log
	Log       *slog.Logger
	// Version is the server version it announces (stockade's).
	Version string
	// PublicURL is where people reach the server (get_port_url's base).
	PublicURL string
}

// Server serves MCP over Streamable HTTP.
type Server struct {
	sbx   *sandbox.Service
	audit *audit.Log
	log   *slog.Logger
	tools map[string]Tool
	http  http.Handler
	// publicURL has no trailing slash.
	publicURL string
}

// New builds the server and registers the tool table.
func New(d Deps) (*Server, error) {
	if d.Sandboxes == nil || d.Audit == nil {
		return nil, errors.New("mcp server: the sandbox service and the audit log are required")
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	s := &Server{sbx: d.Sandboxes, audit: d.Audit, log: d.Log, tools: map[string]Tool{}, publicURL: strings.TrimSuffix(d.PublicURL, "/")}
	srv := sdk.NewServer(&sdk.Implementation{Name: "stockade", Title: "Stockade sandboxes", Version: d.Version}, &sdk.ServerOptions{
		Instructions: "Stockade runs untrusted code in isolated sandboxes (containers inside VMs). " +
			"Create a sandbox, run commands in it with exec, read and write its files, and destroy it when done; " +
			"a sandbox is also destroyed when its timeout passes.",
		Logger: d.Log,
	})
	for _, t := range s.table() {
		if _, dup := s.tools[t.Name]; dup {
			return nil, fmt.Errorf("mcp server: tool %s registered twice", t.Name)
		}
		s.tools[t.Name] = t
		t.add(srv)
	}
	srv.AddReceivingMiddleware(s.guard)
	// Stateless: every POST stands alone (no session held in this
	// process), so any replica answers any request and a restart loses
	// nothing; each request carries its token and is authenticated anew.
	// The web server checks the Origin and authenticates before this, and
	// a bearer token is no ambient credential a rebinding page could use,
	// so the SDK's own localhost (DNS rebinding) check is off: it would
	// refuse every request a TLS proxy on this machine forwards.
	// A call ends with its request, as a REST call does (a command of exec
	// is killed when its client goes).
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{
		Stateless: true, JSONResponse: true, Logger: d.Log, DisableLocalhostProtection: true, PropagateRequestCancellation: true,
	})
	// The caller rides in the request's token info, which the SDK hands to
	// every message of that request (RequestExtra.TokenInfo): never a
	// session's first caller.
	s.http = auth.RequireBearerToken(func(ctx context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		c, ok := r.Context().Value(callerKey{}).(*caller)
		if !ok {
			return nil, fmt.Errorf("%w: no authenticated caller", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{UserID: c.actor.ID, Extra: map[string]any{callerExtra: c}}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
	return s, nil
}

// caller is who makes a request: established by the web server from the
// request's API token.
type caller struct {
	tenantID string
	role     tenants.Role
	actor    audit.Actor
}

type callerKey struct{}

const callerExtra = "stockade.caller"

// Serve answers one MCP request of cl, an authenticated caller of a tenant
// (web's token authentication); actor is cl as the audit log names it.
func (s *Server) Serve(w http.ResponseWriter, r *http.Request, cl *handlers.Caller, actor audit.Actor) {
	if cl == nil || cl.Tenant == nil {
		http.Error(w, "no tenant", http.StatusUnauthorized)
		return
	}
	c := &caller{tenantID: cl.Tenant.ID, role: cl.Role, actor: actor}
	s.http.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
}

func callerOf(req sdk.Request) (*caller, bool) {
	ex := req.GetExtra()
	if ex == nil || ex.TokenInfo == nil {
		return nil, false
	}
	c, ok := ex.TokenInfo.Extra[callerExtra].(*caller)
	return c, ok
}

// maxAuditedName bounds a tool name from the client in the audit log.
const maxAuditedName = 64

// guard checks every tools/call against its tool's permission and audits
// it as mcp.tool_call: the tool, the sandbox it names (or made), the
// outcome and the kind of error; never arguments or file contents. The SDK
// validates arguments after this runs, so refused input is audited too.
func (s *Server) guard(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		call, ok := req.(*sdk.CallToolRequest)
		if method != "tools/call" || !ok {
			return next(ctx, method, req)
		}
		c, ok := callerOf(req)
		if !ok {
			return nil, errors.New("unauthenticated tool call")
		}
		name := call.Params.Name
		details := map[string]any{"tool": truncate(name, maxAuditedName)}
		sandboxID := argString(call.Params.Arguments, "sandbox_id")
		outcome := audit.OutcomeSuccess
		var res sdk.Result
		var err error
		if t, known := s.tools[name]; known && !tenants.Can(c.role, t.Perm) {
			outcome, details["error"] = audit.OutcomeDenied, "forbidden"
			r := &sdk.CallToolResult{}
			r.SetError(fmt.Errorf("forbidden: the %s role does not allow %s, which %s needs", c.role, t.Perm, name))
			res = r
		} else {
			res, err = next(ctx, method, req)
		}
		switch r, _ := res.(*sdk.CallToolResult); {
		case err != nil:
			outcome, details["error"] = audit.OutcomeFailure, "protocol"
		case r != nil && r.IsError && outcome == audit.OutcomeSuccess:
			outcome, details["error"] = audit.OutcomeFailure, problemName(r.GetError())
		case r != nil && sandboxID == "":
			sandboxID = argString(r.StructuredContent, "id")
		}
		kind := ""
		if sandboxID != "" {
			kind, sandboxID = "sandbox", truncate(sandboxID, maxAuditedName)
			details["sandbox_id"] = sandboxID
		}
		e := c.actor.Event(c.tenantID, audit.TypeMCPToolCall, kind, sandboxID, details)
		e.Outcome = outcome
		if aerr := s.audit.Record(context.WithoutCancel(ctx), e); aerr != nil {
			s.log.ErrorContext(ctx, "audit mcp tool call", "tool", details["tool"], "err", aerr)
		}
		return res, err
	}
}

// argString is the string field key of a JSON object, "" if none.
func argString(raw any, key string) string {
	var b []byte
	switch v := raw.(type) {
	case json.RawMessage:
		b = v
	case []byte:
		b = v
	default:
		return ""
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	var s string
	if json.Unmarshal(m[key], &s) != nil {
		return ""
	}
	return s
}

// toolError is a tool's error as the agent reads it: the problem's name,
// then its detail and the fields at fault, as the REST API would put them
// (errdefs.ToProblem, the one mapping).
type toolError struct {
	err error
	msg string
}

func (e *toolError) Error() string { return e.msg }
func (e *toolError) Unwrap() error { return e.err }

func (s *Server) toolErr(ctx context.Context, tool string, err error) error {
	p := errdefs.ToProblem(err)
	if p.Status >= http.StatusInternalServerError && !errdefs.IsUnavailable(err) {
		s.log.ErrorContext(ctx, "mcp tool failed", "tool", tool, "err", err)
	}
	msg := p.Detail
	if msg == "" {
		msg = strings.ToLower(p.Title)
	}
	for _, f := range p.Errors {
		if fd := f.Field + ": " + f.Detail; !strings.Contains(msg, fd) {
			msg += "; " + fd
		}
	}
	return &toolError{err: err, msg: p.Name() + ": " + msg}
}

// problemName is the kind of a tool's error for the audit log: its
// problem's name, or "invalid-arguments" for what the SDK refused before
// the tool ran (arguments that fail the input schema).
func problemName(err error) string {
	var te *toolError
	if errors.As(err, &te) {
		return errdefs.ToProblem(te.err).Name()
	}
	return "invalid-arguments"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
