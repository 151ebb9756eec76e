package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// The control plane (E2B.md B.2), served under /e2b. Errors are E2B's
// {"code": <http status>, "message": "..."}: the SDK reads code 404 in the
// body to answer false from kill and the like.

// apiCall is one authenticated control-plane request.
type apiCall struct {
	w     http.ResponseWriter
	r     *http.Request
	cl    *handlers.Caller
	actor audit.Actor
}

type apiHandler func(s *Server, c apiCall) error

type apiRoute struct {
	perm tenants.Permission
	h    apiHandler
}

func (s *Server) apiMux() *http.ServeMux {
	m := http.NewServeMux()
	routes := map[string]apiRoute{
		"POST /sandboxes":                 {tenants.PermSandboxesWrite, (*Server).create},
		"POST /v2/sandboxes":              {tenants.PermSandboxesWrite, (*Server).create},
		"GET /v2/sandboxes":               {tenants.PermSandboxesRead, (*Server).list},
		"GET /sandboxes":                  {tenants.PermSandboxesRead, (*Server).list},
		"GET /sandboxes/{id}":             {tenants.PermSandboxesRead, (*Server).get},
		"DELETE /sandboxes/{id}":          {tenants.PermSandboxesWrite, (*Server).kill},
		"POST /sandboxes/{id}/timeout":    {tenants.PermSandboxesWrite, (*Server).timeout},
		"POST /sandboxes/{id}/connect":    {tenants.PermSandboxesWrite, (*Server).connect},
		"POST /v2/sandboxes/{id}/connect": {tenants.PermSandboxesWrite, (*Server).connect},
		"POST /sandboxes/{id}/pause":      {tenants.PermSandboxesWrite, (*Server).pause},
		"GET /sandboxes/{id}/metrics":     {tenants.PermSandboxesRead, (*Server).metrics},
	}
	for pattern, rt := range routes {
		m.Handle(pattern, apiEndpoint{s: s, rt: rt})
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such E2B API route: "+r.Method+" "+r.URL.Path)
	})
	return m
}

type apiEndpoint struct {
	s  *Server
	rt apiRoute
}

type callerKey struct{}

// ServeHTTP runs the route for the caller ServeAPI put on the request.
func (e apiEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(callerKey{}).(apiCall)
	c.w, c.r = w, r
	if !tenants.Can(c.cl.Role, e.rt.perm) {
		writeError(w, http.StatusForbidden, fmt.Sprintf("this API token's role (%s) may not do this (needs %s)", c.cl.Role, e.rt.perm))
		return
	}
	if err := e.rt.h(e.s, c); err != nil {
		writeErr(w, err)
	}
}

// ServeAPI serves one control-plane request of an authenticated caller; r's
// path is below the /e2b prefix ("/v2/sandboxes").
func (s *Server) ServeAPI(w http.ResponseWriter, r *http.Request, cl *handlers.Caller, actor audit.Actor) {
	ctx := contextWith(r.Context(), callerKey{}, apiCall{cl: cl, actor: actor})
	s.api.ServeHTTP(w, r.WithContext(ctx))
}

// APIKeyToken maps an X-API-KEY to the Stockade API token it stands for:
// the token itself, or its E2B-shaped alias "e2b_" + the token's bytes in
// lower-case hex (so the Python SDK's \Ae2b_[0-9a-f]+\Z check passes with
// no new secret stored).
func APIKeyToken(key string) string {
	key = strings.TrimSpace(key)
	if h, ok := strings.CutPrefix(key, "e2b_"); ok {
		if b, err := hexDecode(h); err == nil {
			return string(b)
		}
	}
	return key
}

// WriteError writes E2B's error body.
func WriteError(w http.ResponseWriter, status int, msg string) { writeError(w, status, msg) }

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": status, "message": msg})
}

func writeErr(w http.ResponseWriter, err error) {
	p := errdefs.ToProblem(err)
	status, msg := p.Status, p.Detail
	if msg == "" {
		msg = p.Title
	}
	if status == http.StatusUnprocessableEntity {
		status = http.StatusBadRequest // E2B's status for bad input
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "5")
	}
	writeError(w, status, msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func decodeBody(r *http.Request) (map[string]json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return fields, nil
	}
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, &errdefs.MalformedError{Detail: "the body is not a JSON object: " + err.Error()}
	}
	return fields, nil
}

// unset says a raw JSON value is absent or its zero (null, false, 0, "",
// [], {}).
func unset(v json.RawMessage) bool {
	switch strings.TrimSpace(string(v)) {
	case "", "null", "false", "0", `""`, "[]", "{}":
		return true
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) == nil {
		for _, x := range m {
			if !unset(x) {
				return false
			}
		}
		return true
	}
	return false
}

// createSupported are the create fields this server honours; any other
// set to something but its zero is a 400 naming it.
var createSupported = []string{"templateID", "timeout", "envVars", "metadata", "secure", "allow_internet_access"}

// Templates E2B names that map to ours.
var templateAliases = map[string]string{"base": "debian", "": "debian"}

func (s *Server) create(c apiCall) error {
	f, err := decodeBody(c.r)
	if err != nil {
		return err
	}
	var bad []string
	for k, v := range f {
		if !slices.Contains(createSupported, k) && !unset(v) {
			bad = append(bad, k)
		}
	}
	if v, ok := f["allow_internet_access"]; ok && strings.TrimSpace(string(v)) == "false" {
		bad = append(bad, "allow_internet_access")
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		writeError(c.w, http.StatusBadRequest, "not supported by this server: "+strings.Join(bad, ", "))
		return nil
	}
	var req struct {
		TemplateID string            `json:"templateID"`
		Timeout    int               `json:"timeout"`
		EnvVars    map[string]string `json:"envVars"`
		Metadata   map[string]string `json:"metadata"`
	}
	raw, _ := json.Marshal(f)
	if err := json.Unmarshal(raw, &req); err != nil {
		return &errdefs.MalformedError{Detail: err.Error()}
	}
	tpl := req.TemplateID
	if t, ok := templateAliases[tpl]; ok {
		tpl = t
	}
	spec := sandbox.Spec{Template: tpl, TimeoutSeconds: req.Timeout, Env: req.EnvVars, Metadata: req.Metadata}
	sb, err := s.sbx.Create(c.r.Context(), c.actor, c.cl.TenantID(), spec)
	if err != nil {
		return err
	}
	return s.answerSandbox(c, http.StatusCreated, sb, req.TemplateID)
}

// answerSandbox issues an access token and answers E2B's Sandbox.
func (s *Server) answerSandbox(c apiCall, status int, sb sandbox.Sandbox, templateID string) error {
	tok, err := s.issueToken(c.r.Context(), c.actor, sb.TenantID, sb.ID)
	if err != nil {
		return err
	}
	if templateID == "" {
		templateID = sb.Template
	}
	writeJSON(c.w, status, map[string]any{
		"sandboxID": sb.ID, "templateID": templateID, "clientID": "", "envdVersion": EnvdVersion,
		"envdAccessToken": tok, "domain": nil, "trafficAccessToken": nil,
	})
	return nil
}

func listed(sb sandbox.Sandbox) map[string]any {
	started := sb.CreatedAt
	if sb.StartedAt != nil {
		started = *sb.StartedAt
	}
	md := map[string]string{}
	_ = json.Unmarshal([]byte(sb.MetadataJSON), &md)
	return map[string]any{
		"sandboxID": sb.ID, "templateID": sb.Template, "clientID": "", "startedAt": started.UTC().Format(time.RFC3339Nano),
		"endAt": sb.ExpiresAt.UTC().Format(time.RFC3339Nano), "state": e2bState(sb), "cpuCount": sb.VCPUs,
		"memoryMB": sb.MemoryMiB, "diskSizeMB": 0, "envdVersion": EnvdVersion, "metadata": md,
	}
}

// e2bState is an active sandbox's E2B state: "paused" or "running".
func e2bState(sb sandbox.Sandbox) string {
	if sb.Paused() {
		return "paused"
	}
	return "running"
}

const maxListLimit = 100

func (s *Server) list(c apiCall) error {
	q := c.r.URL.Query()
	limit := maxListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			writeError(c.w, http.StatusBadRequest, fmt.Sprintf("limit: must be a whole number from 1 to %d", maxListLimit))
			return nil
		}
		limit = n
	}
	var want url.Values
	if v := q.Get("metadata"); v != "" {
		var err error
		if want, err = url.ParseQuery(v); err != nil {
			writeError(c.w, http.StatusBadRequest, "metadata: must be key=value pairs joined by &, URL-encoded")
			return nil
		}
	}
	states := []string{"running", "paused"}
	if v := q.Get("state"); v != "" {
		states = strings.Split(v, ",")
		for _, st := range states {
			if st != "running" && st != "paused" {
				writeError(c.w, http.StatusBadRequest, fmt.Sprintf("state: unknown state %q (running, paused)", st))
				return nil
			}
		}
	}
	all, err := s.sbx.List(c.r.Context(), c.cl.TenantID())
	if err != nil {
		return err
	}
	var out []sandbox.Sandbox
	for _, sb := range all {
		if !sb.State.Active() || !slices.Contains(states, e2bState(sb)) || (q.Get("template") != "" && q.Get("template") != sb.Template) {
			continue
		}
		md := map[string]string{}
		_ = json.Unmarshal([]byte(sb.MetadataJSON), &md)
		match := true
		for k := range want {
			if md[k] != want.Get(k) {
				match = false
			}
		}
		if match {
			out = append(out, sb)
		}
	}
	// Newest first, then by id: the paging token is the offset into this
	// order (E2B's tokens are opaque).
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	start := 0
	if v := q.Get("nextToken"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(c.w, http.StatusBadRequest, "nextToken: not a token this server gave")
			return nil
		}
		start = min(n, len(out))
	}
	end := min(start+limit, len(out))
	if end < len(out) {
		c.w.Header().Set("X-Next-Token", strconv.Itoa(end))
	}
	items := make([]map[string]any, 0, end-start)
	for _, sb := range out[start:end] {
		items = append(items, listed(sb))
	}
	writeJSON(c.w, http.StatusOK, items)
	return nil
}

// active returns the tenant's sandbox while it is active (a paused one is:
// it runs, frozen); an ended one is not found, as in E2B.
func (s *Server) active(c apiCall) (sandbox.Sandbox, error) {
	id := c.r.PathValue("id")
	sb, err := s.sbx.Store().Sandbox(c.r.Context(), c.cl.TenantID(), id)
	if err == nil && !sb.State.Active() {
		err = errdefs.ErrNotFound
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		writeError(c.w, http.StatusNotFound, fmt.Sprintf("sandbox %q not found", id))
		return sb, errHandled
	}
	return sb, err
}

// errHandled: the answer is written.
var errHandled = errors.New("handled")

func (s *Server) withActive(c apiCall, fn func(sandbox.Sandbox) error) error {
	sb, err := s.active(c)
	if errors.Is(err, errHandled) {
		return nil
	}
	if err != nil {
		return err
	}
	return fn(sb)
}

func (s *Server) get(c apiCall) error {
	return s.withActive(c, func(sb sandbox.Sandbox) error {
		out := listed(sb)
		out["domain"] = nil
		writeJSON(c.w, http.StatusOK, out)
		return nil
	})
}

func (s *Server) kill(c apiCall) error {
	return s.withActive(c, func(sb sandbox.Sandbox) error {
		if _, err := s.sbx.Destroy(c.r.Context(), c.actor, sb.TenantID, sb.ID); err != nil {
			return err
		}
		c.w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func readTimeout(c apiCall, def int) (int, error) {
	f, err := decodeBody(c.r)
	if err != nil {
		return 0, err
	}
	v, ok := f["timeout"]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(v)))
	if err != nil || n < 0 {
		return 0, errdefs.Invalid("timeout", "range", "must be a whole number of seconds")
	}
	return n, nil
}

func (s *Server) timeout(c apiCall) error {
	return s.withActive(c, func(sb sandbox.Sandbox) error {
		n, err := readTimeout(c, -1)
		if err != nil {
			return err
		}
		if n < 0 {
			return errdefs.Invalid("timeout", "required", "is required")
		}
		if _, err := s.sbx.SetTimeout(c.r.Context(), c.actor, sb.TenantID, sb.ID, n); err != nil {
			return err
		}
		c.w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// connect answers a running sandbox with a new access token, extending
// its lifetime to timeout seconds from now when that is later than it
// had (never shortening it): 200, or 201 when it was paused and connect
// resumed it (the SDK has no resume call).
func (s *Server) connect(c apiCall) error {
	return s.withActive(c, func(sb sandbox.Sandbox) error {
		n, err := readTimeout(c, 300)
		if err != nil {
			return err
		}
		status := http.StatusOK
		if sb.Paused() {
			if sb, err = s.sbx.Resume(c.r.Context(), c.actor, sb.TenantID, sb.ID); err != nil {
				return err
			}
			status = http.StatusCreated
		}
		if s.now().Add(time.Duration(n) * time.Second).After(sb.ExpiresAt) {
			if sb, err = s.sbx.SetTimeout(c.r.Context(), c.actor, sb.TenantID, sb.ID, n); err != nil {
				return err
			}
		}
		return s.answerSandbox(c, status, sb, "")
	})
}

// pause freezes the sandbox (sandbox.Service.Pause): 204, or 409 with
// {code:409} when it is paused already (the SDK answers false). The body's
// memory flag is accepted and ignored: a paused sandbox always keeps its
// memory.
func (s *Server) pause(c apiCall) error {
	return s.withActive(c, func(sb sandbox.Sandbox) error {
		if _, err := s.sbx.Pause(c.r.Context(), c.actor, sb.TenantID, sb.ID); err != nil {
			return err
		}
		c.w.WriteHeader(http.StatusNoContent)
		return nil
	})
}
