package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/views"
)

// policyField describes one input of the policy forms; path is the
// setting's JSON pointer, which is also the input's name, so schema errors
// land next to their input.
type policyField struct {
	path, label, kind, help string
	options                 []string
}

type policySection struct {
	key, title, help string
	fields           []policyField
}

// policyForm is the form editor: one form per section of the document.
var policyForm = []policySection{
	{"resources", "Resources", "What one sandbox may ask for. Applies to sandboxes created from now on.", []policyField{
		{path: "/resources/max_vcpus", label: "Max vCPUs", kind: views.FieldInt},
		{path: "/resources/max_memory_mib", label: "Max memory (MiB)", kind: views.FieldInt},
		{path: "/resources/default_memory_mib", label: "Default memory (MiB)", kind: views.FieldInt, help: "for a sandbox that asks for none"},
		{path: "/resources/max_pids", label: "Max processes", kind: views.FieldInt},
		{path: "/resources/max_disk_mib", label: "Max disk (MiB)", kind: views.FieldInt},
	}},
	{"lifetime", "Lifetime", "How long one sandbox lives.", []policyField{
		{path: "/lifetime/max_timeout_seconds", label: "Max lifetime (s)", kind: views.FieldInt},
		{path: "/lifetime/default_timeout_seconds", label: "Default lifetime (s)", kind: views.FieldInt},
		{path: "/lifetime/max_idle_timeout_seconds", label: "Max idle timeout (s)", kind: views.FieldInt, help: "0: up to the lifetime"},
	}},
	{"network", "Network egress", "Decided by the host gateway for every connection: changes reach running sandboxes within seconds.", []policyField{
		{path: "/network/egress/default", label: "Hosts no rule names", kind: views.FieldEnum, options: []string{policy.EgressDeny, policy.EgressAllow}},
		{path: "/network/egress/allow", label: "Allow", kind: views.FieldLines,
			help: "one rule a line: a host (api.github.com) or a wildcard (*.example.com), then ports (443,8443) or none for all"},
		{path: "/network/egress/deny", label: "Deny", kind: views.FieldLines, help: "same form; deny wins over allow"},
	}},
	{"filesystem", "Filesystem", "", []policyField{
		{path: "/filesystem/read_only_root", label: "Read-only template root", kind: views.FieldBool},
		{path: "/filesystem/workspace_mib", label: "Workspace (MiB)", kind: views.FieldInt},
		{path: "/filesystem/max_file_bytes", label: "Max file size through the API (bytes)", kind: views.FieldInt},
	}},
	{"credentials", "Credentials", "Secrets given to every sandbox as a placeholder in the variable of the same name.", []policyField{
		{path: "/credentials/secrets", label: "Secrets", kind: views.FieldLines, help: "one secret name a line"},
	}},
	{"process", "Processes", "", []policyField{
		{path: "/process/allow_root", label: "Allow root inside the sandbox", kind: views.FieldBool},
		{path: "/process/no_new_privileges", label: "No new privileges", kind: views.FieldBool},
		{path: "/process/seccomp", label: "Seccomp profile", kind: views.FieldEnum, options: []string{"default", "strict"}},
	}},
	{"cleanup", "Cleanup", "", []policyField{
		{path: "/cleanup/destroy_stopped_after_seconds", label: "Destroy stopped sandboxes after (s)", kind: views.FieldInt},
		{path: "/cleanup/recording_retention_days", label: "Keep recordings (days)", kind: views.FieldInt},
	}},
	{"audit", "Audit", "", []policyField{
		{path: "/audit/record_commands", label: "Record commands and their output", kind: views.FieldBool},
		{path: "/audit/record_terminal_input", label: "Record terminal keystrokes", kind: views.FieldBool},
		{path: "/audit/retention_days", label: "Keep audit events (days)", kind: views.FieldInt},
	}},
	{"incident_response", "Incident response", "", []policyField{
		{path: "/incident_response/on_egress_denied", label: "On a denied connection", kind: views.FieldEnum, options: []string{"log", "stop_sandbox"}},
		{path: "/incident_response/notify_emails", label: "Notify", kind: views.FieldLines, help: "one email address a line"},
		{path: "/incident_response/runbook_url", label: "Runbook", kind: views.FieldText, help: "the runbook for a compromised agent (http or https URL); shown on the compliance page"},
	}},
	{"vm_pool", "VM pool", "", []policyField{
		{path: "/vm_pool/sandboxes_per_vm", label: "Sandboxes per VM", kind: views.FieldInt},
		{path: "/vm_pool/warm_vms", label: "Warm VMs", kind: views.FieldInt},
		{path: "/vm_pool/recycle_after_sandboxes", label: "Recycle a VM after (sandboxes)", kind: views.FieldInt, help: "0: never"},
		{path: "/vm_pool/recycle_after_hours", label: "Recycle a VM after (hours)", kind: views.FieldInt, help: "0: never"},
	}},
}

func (h *Handlers) policies() (*policy.Store, error) {
	if h.pol == nil {
		return nil, fmt.Errorf("policy: %w: this server runs without policies", errdefs.ErrNotFound)
	}
	return h.pol, nil
}

// docTree is d as a JSON tree, numbers kept exact.
func docTree(d policy.Doc) map[string]any {
	raw, _ := json.Marshal(d) // a Doc always encodes
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	_ = dec.Decode(&m)
	return m
}

func treeGet(m map[string]any, path string) any {
	var cur any = m
	for _, k := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

func treeSet(m map[string]any, path string, v any) {
	keys := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
}

func isRules(path string) bool {
	return strings.HasPrefix(path, "/network/egress/") && path != "/network/egress/default"
}

// fieldText is a setting's value as its input shows it.
func fieldText(f policyField, v any) string {
	switch f.kind {
	case views.FieldLines:
		list, _ := v.([]any)
		lines := make([]string, 0, len(list))
		for _, x := range list {
			if r, ok := x.(map[string]any); ok {
				line := fmt.Sprint(r["domain"])
				if ports, _ := r["ports"].([]any); len(ports) > 0 {
					ps := make([]string, 0, len(ports))
					for _, p := range ports {
						ps = append(ps, fmt.Sprint(p))
					}
					line += " " + strings.Join(ps, ",")
				}
				lines = append(lines, line)
				continue
			}
			lines = append(lines, fmt.Sprint(x))
		}
		return strings.Join(lines, "\n")
	case views.FieldBool:
		if b, _ := v.(bool); b {
			return "true"
		}
		return "false"
	}
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// formValue reads one input into the JSON value the schema checks: text
// that is no number stays text, so the schema names it. lineOf maps list
// indexes back to the textarea's lines.
func formValue(f policyField, text string, present bool) (v any, lineOf []int) {
	switch f.kind {
	case views.FieldBool:
		return present && (text == "true" || text == "on"), nil
	case views.FieldEnum:
		return text, nil
	case views.FieldText:
		return strings.TrimSpace(text), nil
	case views.FieldInt:
		if n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64); err == nil {
			return n, nil
		}
		return strings.TrimSpace(text), nil
	}
	list := []any{}
	for i, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		lineOf = append(lineOf, i+1)
		if !isRules(f.path) {
			list = append(list, line)
			continue
		}
		domain, ports := ruleLine(line)
		list = append(list, map[string]any{"domain": domain, "ports": ports})
	}
	return list, lineOf
}

// ruleLine reads "host", "host 443,8443" or "host:443". Only a trailing
// list of digits is taken for ports: anything else stays in the domain, so
// the schema names it as a malformed domain.
func ruleLine(line string) (string, []any) {
	ports := []any{}
	domain, list := line, ""
	if i := strings.LastIndexAny(line, " :"); i > 0 && strings.Trim(line[i+1:], "0123456789,") == "" {
		domain, list = strings.TrimSpace(line[:i]), line[i+1:]
	}
	for _, p := range strings.Split(list, ",") {
		if n, err := strconv.Atoi(p); err == nil {
			ports = append(ports, n)
		}
	}
	return domain, ports
}

// fieldFor maps a failing path to the input that shows it, and the
// message to show there.
func fieldFor(path, detail string, lines map[string][]int) (string, string) {
	for _, s := range policyForm {
		for _, f := range s.fields {
			if path == f.path {
				return f.path, detail
			}
			if rest, ok := strings.CutPrefix(path, f.path+"/"); ok {
				idx, _, _ := strings.Cut(rest, "/")
				if i, err := strconv.Atoi(idx); err == nil {
					if ls := lines[f.path]; i < len(ls) {
						return f.path, fmt.Sprintf("line %d: %s", ls[i], detail)
					}
				}
				return f.path, detail
			}
		}
	}
	return path, detail
}

func policyErrors(err error) ([]*errdefs.FieldError, error) {
	var errs policy.Errors
	var fe *errdefs.FieldError
	switch {
	case errors.As(err, &errs):
		return errs, nil
	case errors.As(err, &fe):
		return []*errdefs.FieldError{fe}, nil
	}
	return nil, err
}

func versionRow(v policy.Version, current int) views.PolicyVersionRow {
	author := v.AuthorName
	if author == "" {
		author = v.AuthorID
	}
	row := views.PolicyVersionRow{Version: v.Version, Author: author, Reason: v.Reason, RolledBackFrom: -1,
		CreatedAt: v.CreatedAt, Current: v.Version == current}
	if v.RolledBackFrom != nil {
		row.RolledBackFrom = *v.RolledBackFrom
	}
	return row
}

func changesView(cs []policy.Change) []views.PolicyChange {
	out := make([]views.PolicyChange, 0, len(cs))
	for _, c := range cs {
		out = append(out, views.PolicyChange{Path: c.Path, Old: string(c.Old), New: string(c.New)})
	}
	return out
}

// running lists the tenant's running sandboxes for a preview.
func (h *Handlers) running(c echo.Context, tenantID string) ([]policy.Running, error) {
	if h.sbx == nil {
		return nil, nil
	}
	sbs, err := h.sbx.List(c.Request().Context(), tenantID)
	if err != nil {
		return nil, err
	}
	var out []policy.Running
	for _, sb := range sbs {
		if sb.State != sandbox.StateRunning {
			continue
		}
		out = append(out, policy.Running{ID: sb.ID, VCPUs: sb.VCPUs, MemoryMiB: sb.MemoryMiB, TimeoutSeconds: sb.TimeoutSeconds,
			IdleTimeoutSeconds: sb.IdleTimeoutSeconds, PolicyVersion: sb.PolicyVersion})
	}
	return out, nil
}

// preview shows what saving p would change.
func (h *Handlers) preview(c echo.Context, tenantID string, p policy.Proposal) (*views.PolicyPreview, error) {
	run, err := h.running(c, tenantID)
	if err != nil {
		return nil, err
	}
	return &views.PolicyPreview{Changes: changesView(p.Changes), Notes: p.Notes(run)}, nil
}

// policyView builds the page around the current version; form, when set,
// holds a section's submitted inputs.
func (h *Handlers) policyView(c echo.Context, cur policy.Version) (views.PolicyView, error) {
	ps, err := h.policies()
	if err != nil {
		return views.PolicyView{}, err
	}
	cl := CallerOf(c)
	list, err := ps.List(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		return views.PolicyView{}, err
	}
	raw, _ := json.MarshalIndent(cur.Doc, "", "  ")
	v := views.PolicyView{CanEdit: tenants.Can(cl.Role, tenants.PermPolicyWrite), Current: versionRow(cur, cur.Version), Raw: string(raw)}
	if tok, ok := c.Get(CSRFContextKey).(string); ok {
		v.CSRF = tok
	}
	for _, x := range list {
		v.Versions = append(v.Versions, versionRow(x, cur.Version))
	}
	tree := docTree(cur.Doc)
	for _, s := range policyForm {
		sec := views.PolicySection{Key: s.key, Title: s.title, Help: s.help}
		for _, f := range s.fields {
			text := fieldText(f, treeGet(tree, f.path))
			sec.Fields = append(sec.Fields, views.PolicyField{Name: f.path, ID: "p" + strings.ReplaceAll(f.path, "/", "-"), Label: f.label,
				Help: f.help, Kind: f.kind, Value: text, Checked: text == "true", Options: f.options})
		}
		v.Sections = append(v.Sections, sec)
	}
	return v, nil
}

// PolicyPage shows the tenant policy: forms and the JSON editor for
// admins, the same read-only for everyone else, and the versions.
func (h *Handlers) PolicyPage(c echo.Context) error {
	ps, err := h.policies()
	if err != nil {
		return err
	}
	cur, err := ps.Current(c.Request().Context(), CallerOf(c).Tenant.ID)
	if err != nil {
		return err
	}
	v, err := h.policyView(c, cur)
	if err != nil {
		return err
	}
	p := h.page(c, "Policy", "policy")
	if n, err := strconv.Atoi(c.QueryParam("saved")); err == nil {
		v.Saved = n
		p.Flash = append(p.Flash, views.Flash{Kind: views.FlashSuccess, Text: "Saved as version " + strconv.Itoa(n) + ".", ID: "policy-saved"})
	}
	return render(c, http.StatusOK, views.Policy(p, v))
}

// SavePolicySection previews (op=preview) or saves (op=save) one section's
// form. The rest of the document stays as the version the form was
// loaded from (base_version): a version saved meanwhile is a conflict
// shown on the form, never silently undone.
func (h *Handlers) SavePolicySection(c echo.Context) error {
	ps, err := h.policies()
	if err != nil {
		return err
	}
	ctx, cl := c.Request().Context(), CallerOf(c)
	key := c.FormValue("section")
	si := -1
	for i, s := range policyForm {
		if s.key == key {
			si = i
		}
	}
	if si < 0 {
		return errdefs.Invalid("section", "unknown", "no such policy section")
	}
	cur, err := ps.Current(ctx, cl.Tenant.ID)
	if err != nil {
		return err
	}
	base, err := strconv.Atoi(c.FormValue("base_version"))
	if err != nil {
		return errdefs.Invalid("base_version", "required", "the form lost its version; reload the page")
	}
	tree := docTree(cur.Doc)
	form, err := c.FormParams()
	if err != nil {
		return err
	}
	lines := map[string][]int{}
	inputs := map[string]string{}
	for _, f := range policyForm[si].fields {
		text, present := form.Get(f.path), form.Has(f.path)
		inputs[f.path] = text
		val, lineOf := formValue(f, text, present)
		lines[f.path] = lineOf
		treeSet(tree, f.path, val)
	}
	raw, _ := json.Marshal(tree)
	reason := strings.TrimSpace(c.FormValue("reason"))

	v, err := h.policyView(c, cur)
	if err != nil {
		return err
	}
	sec := &v.Sections[si]
	sec.Reason = reason
	for i := range sec.Fields {
		f := &sec.Fields[i]
		f.Value = inputs[f.Name]
		if f.Kind == views.FieldBool {
			f.Checked = form.Has(f.Name)
		}
	}
	status := http.StatusOK
	// The store checks the document once and says what it changes; a
	// stale base_version is its conflict.
	p, perr := ps.Propose(ctx, cl.Tenant.ID, policy.Edit{Raw: raw, Reason: reason, Base: &base})
	proposed := perr == nil
	if perr == nil && c.FormValue("op") == "save" {
		saved, err := ps.Commit(ctx, cl.Actor(c), cl.Tenant.ID, p)
		if err == nil {
			return redirect(c, fmt.Sprintf("/policy?saved=%d#%s", saved.Version, key))
		}
		perr = err
	}
	switch {
	case perr == nil:
		if sec.Preview, err = h.preview(c, cl.Tenant.ID, p); err != nil {
			return err
		}
	case errors.Is(perr, errdefs.ErrConflict):
		sec.Error, status = perr.Error(), errdefs.HTTPStatus(perr)
	default:
		fes, err := policyErrors(perr)
		if err != nil {
			return err
		}
		status = errdefs.HTTPStatus(perr)
		for _, fe := range fes {
			name, detail := fieldFor(fe.Field, fe.Detail, lines)
			placed := false
			for i := range sec.Fields {
				if sec.Fields[i].Name == name {
					sec.Fields[i].Error = joinMsg(sec.Fields[i].Error, detail)
					placed = true
				}
			}
			if !placed {
				sec.Error = joinMsg(sec.Error, name+": "+detail)
			}
		}
		// A document that fails gets no preview: its errors say what to fix
		// first. One that only lacks a reason keeps its preview and Save.
		if _, ok := onlyReason(fes); ok && proposed {
			if sec.Preview, err = h.preview(c, cl.Tenant.ID, p); err != nil {
				return err
			}
		}
	}
	return render(c, status, views.Policy(h.page(c, "Policy", "policy"), v))
}

func onlyReason(fes []*errdefs.FieldError) (*errdefs.FieldError, bool) {
	if len(fes) == 1 && fes[0].Field == "reason" {
		return fes[0], true
	}
	return nil, false
}

func joinMsg(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// SavePolicyRaw previews or saves the whole document from the JSON editor.
func (h *Handlers) SavePolicyRaw(c echo.Context) error {
	ps, err := h.policies()
	if err != nil {
		return err
	}
	ctx, cl := c.Request().Context(), CallerOf(c)
	cur, err := ps.Current(ctx, cl.Tenant.ID)
	if err != nil {
		return err
	}
	v, err := h.policyView(c, cur)
	if err != nil {
		return err
	}
	raw := c.FormValue("doc")
	v.Raw = raw
	base, _ := strconv.Atoi(c.FormValue("base_version"))
	status := http.StatusOK
	p, perr := ps.Propose(ctx, cl.Tenant.ID, policy.Edit{Raw: []byte(raw), Reason: c.FormValue("reason"), Base: &base})
	if perr == nil && c.FormValue("op") == "save" {
		saved, err := ps.Commit(ctx, cl.Actor(c), cl.Tenant.ID, p)
		if err == nil {
			return redirect(c, fmt.Sprintf("/policy?saved=%d#raw", saved.Version))
		}
		perr = err
	}
	if perr == nil {
		if v.RawPreview, err = h.preview(c, cl.Tenant.ID, p); err != nil {
			return err
		}
	} else if errors.Is(perr, errdefs.ErrConflict) {
		status = errdefs.HTTPStatus(perr)
		v.RawErrors = []views.PolicyPathError{{Path: "/", Detail: perr.Error()}}
	} else {
		fes, err := policyErrors(perr)
		if err != nil {
			return err
		}
		status = errdefs.HTTPStatus(perr)
		for _, fe := range fes {
			v.RawErrors = append(v.RawErrors, views.PolicyPathError{Path: fe.Field, Detail: fe.Detail})
		}
	}
	return render(c, status, views.Policy(h.page(c, "Policy", "policy"), v))
}

// PolicyVersionPage shows one version and what it changed.
func (h *Handlers) PolicyVersionPage(c echo.Context) error {
	ps, err := h.policies()
	if err != nil {
		return err
	}
	ctx, cl := c.Request().Context(), CallerOf(c)
	n, err := strconv.Atoi(c.Param("version"))
	if err != nil || n < 0 {
		return fmt.Errorf("policy version %q: %w", c.Param("version"), errdefs.ErrNotFound)
	}
	ver, err := ps.Get(ctx, cl.Tenant.ID, n)
	if err != nil {
		return err
	}
	cur, err := ps.Current(ctx, cl.Tenant.ID)
	if err != nil {
		return err
	}
	doc, _ := json.MarshalIndent(ver.Doc, "", "  ")
	v := views.PolicyVersionView{CanEdit: tenants.Can(cl.Role, tenants.PermPolicyWrite), Version: versionRow(ver, cur.Version), Previous: -1, Doc: string(doc)}
	if tok, ok := c.Get(CSRFContextKey).(string); ok {
		v.CSRF = tok
	}
	if n > 0 {
		prev, err := ps.Get(ctx, cl.Tenant.ID, n-1)
		if err != nil {
			return err
		}
		v.Previous, v.Changes = n-1, changesView(policy.Diff(prev.Doc, ver.Doc))
	}
	return render(c, http.StatusOK, views.PolicyVersion(h.page(c, fmt.Sprintf("Policy version %d", n), "policy"), v))
}

// RollbackPolicy saves an older version's document as the newest version.
func (h *Handlers) RollbackPolicy(c echo.Context) error {
	ps, err := h.policies()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	n, err := strconv.Atoi(c.FormValue("version"))
	if err != nil {
		return errdefs.Invalid("version", "required", "names the version to roll back to")
	}
	saved, err := ps.Rollback(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, n, c.FormValue("reason"))
	if err != nil {
		return err
	}
	return redirect(c, fmt.Sprintf("/policy?saved=%d", saved.Version))
}

// PolicyJSON is a policy version in the API.
type PolicyJSON struct {
	Version        int             `json:"version"`
	Author         PolicyAuthor    `json:"author"`
	Reason         string          `json:"reason"`
	RolledBackFrom *int            `json:"rolled_back_from,omitempty"`
	CreatedAt      *string         `json:"created_at"` // null for version 0, the built-in defaults
	Policy         *policy.Doc     `json:"policy,omitempty"`
	Changes        []policy.Change `json:"changes,omitempty"`
}

// PolicyAuthor is who saved a version.
type PolicyAuthor struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Kind string `json:"kind"`
}

func policyJSON(v policy.Version, withDoc bool) PolicyJSON {
	out := PolicyJSON{Version: v.Version, Author: PolicyAuthor{ID: v.AuthorID, Name: v.AuthorName, Kind: v.AuthorKind},
		Reason: v.Reason, RolledBackFrom: v.RolledBackFrom}
	if !v.CreatedAt.IsZero() {
		s := v.CreatedAt.UTC().Format(timeJSON)
		out.CreatedAt = &s
	}
	if withDoc {
		d := v.Doc
		out.Policy = &d
	}
	return out
}

// APIPolicy answers the tenant's current policy.
func (h *Handlers) APIPolicy(c echo.Context) error {
	ps, err := h.policies()
	if err != nil {
		return err
	}
	v, err := ps.Current(c.Request().Context(), CallerOf(c).Tenant.ID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, policyJSON(v, true))
}

// APIPolicySchema answers the JSON Schema documents are checked against.
func (h *Handlers) APIPolicySchema(c echo.Context) error {
	return c.JSONBlob(http.StatusOK, policy.Schema())
}

// policyIn is the body of PUT /api/v1/policy and POST .../preview. The
// document stays raw so the schema, not the decoder, judges it: every
// failing path is listed.
type policyIn = api.PolicyEdit

// bindPolicy reads the body; the store judges the document.
func bindPolicy(c echo.Context) (policyIn, error) {
	var in policyIn
	if err := decodeJSON(c, &in); err != nil {
		return in, err
	}
	if len(in.Policy) == 0 || string(in.Policy) == "null" {
		return in, errdefs.Invalid("policy", "required", "the whole policy document is required (GET /api/v1/policy gives the current one)")
	}
	return in, nil
}

// APIPutPolicy saves a new version of the tenant's policy: 422 with every
// failing path when it does not match the schema (nothing saved), 409
// when base_version is stale.
func (h *Handlers) APIPutPolicy(c echo.Context) error {
	ps, err := h.policies()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	in, err := bindPolicy(c)
	if err != nil {
		return err
	}
	v, err := ps.Save(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, policy.Edit{Raw: in.Policy, Reason: in.Reason, Base: in.BaseVersion})
	if err != nil {
		return err
	}
	out := policyJSON(v, true)
	out.Changes = v.Changes // against the version it replaced, found in the save's transaction
	return c.JSON(http.StatusOK, out)
}

// PolicyPreviewJSON says what a document would change.
type PolicyPreviewJSON struct {
	BaseVersion int             `json:"base_version"`
	Changes     []policy.Change `json:"changes"`
	Notes       []string        `json:"notes"`
}

// APIPreviewPolicy checks a document and says what saving it would change
// for running and new sandboxes; nothing is saved.
func (h *Handlers) APIPreviewPolicy(c echo.Context) error {
	ps, err := h.policies()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	in, err := bindPolicy(c)
	if err != nil {
		return err
	}
	// base_version is not checked here: a preview says what saving would
	// change against the version in force, whichever it is.
	p, err := ps.Propose(c.Request().Context(), cl.Tenant.ID, policy.Edit{Raw: in.Policy})
	if err != nil {
		return err
	}
	run, err := h.running(c, cl.Tenant.ID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, PolicyPreviewJSON{BaseVersion: p.Current.Version, Changes: p.Changes, Notes: p.Notes(run)})
}

// APIPolicyVersions lists every version, newest first, without documents.
func (h *Handlers) APIPolicyVersions(c echo.Context) error {
	ps, err := h.policies()
	if err != nil {
		return err
	}
	list, err := ps.List(c.Request().Context(), CallerOf(c).Tenant.ID)
	if err != nil {
		return err
	}
	out := make([]PolicyJSON, 0, len(list))
	for _, v := range list {
		out = append(out, policyJSON(v, false))
	}
	return c.JSON(http.StatusOK, map[string]any{"versions": out})
}

func versionParam(name, value string) (int, error) {
	n, err := strconv.Atoi(value)
	if err != nil || n < 0 {
		return 0, errdefs.Invalid(name, "version", "must be a version number (0 is the defaults)")
	}
	return n, nil
}

// APIPolicyVersion answers one version with its document.
func (h *Handlers) APIPolicyVersion(c echo.Context) error {
	ps, err := h.policies()
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(c.Param("version"))
	if err != nil || n < 0 {
		return fmt.Errorf("policy version %q: %w", c.Param("version"), errdefs.ErrNotFound)
	}
	v, err := ps.Get(c.Request().Context(), CallerOf(c).Tenant.ID, n)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, policyJSON(v, true))
}

// PolicyDiffJSON is the difference between two versions.
type PolicyDiffJSON struct {
	From    int             `json:"from"`
	To      int             `json:"to"`
	Changes []policy.Change `json:"changes"`
}

// APIPolicyDiff answers what changed from ?from= to ?to= (default: the
// version before to, and the current one).
func (h *Handlers) APIPolicyDiff(c echo.Context) error {
	ps, err := h.policies()
	if err != nil {
		return err
	}
	ctx, tenantID := c.Request().Context(), CallerOf(c).Tenant.ID
	cur, err := ps.Current(ctx, tenantID)
	if err != nil {
		return err
	}
	to := cur.Version
	if s := c.QueryParam("to"); s != "" {
		if to, err = versionParam("to", s); err != nil {
			return err
		}
	}
	from := max(to-1, 0)
	if s := c.QueryParam("from"); s != "" {
		if from, err = versionParam("from", s); err != nil {
			return err
		}
	}
	a, err := ps.Get(ctx, tenantID, from)
	if err != nil {
		return err
	}
	b, err := ps.Get(ctx, tenantID, to)
	if err != nil {
		return err
	}
	changes := policy.Diff(a.Doc, b.Doc)
	if changes == nil {
		changes = []policy.Change{}
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].Path < changes[j].Path })
	return c.JSON(http.StatusOK, PolicyDiffJSON{From: from, To: to, Changes: changes})
}

// rollbackIn is the body of POST /api/v1/policy/rollback.
type rollbackIn = api.PolicyRollback

// APIRollbackPolicy saves an older version's document as the newest.
func (h *Handlers) APIRollbackPolicy(c echo.Context) error {
	ps, err := h.policies()
	if err != nil {
		return err
	}
	var in rollbackIn
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.Version == nil {
		return errdefs.Invalid("version", "required", "names the version to roll back to")
	}
	cl := CallerOf(c)
	v, err := ps.Rollback(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, *in.Version, in.Reason)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, policyJSON(v, true))
}
