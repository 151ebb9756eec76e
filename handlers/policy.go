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

// policyForm is the form editor: one form per section of the document,
// its fields described once in tenants/policy (labels, units, help). The
// document's vm_pool section gets no form: the VM pool runs by the VMs
// page's settings, which the policy page links to.
func policyForm() []policy.Section {
	all := policy.Sections()
	out := make([]policy.Section, 0, len(all))
	for _, s := range all {
		if s.Key != policy.VMPoolSection {
			out = append(out, s)
		}
	}
	return out
}

// viewKind is the input a field kind gets.
func viewKind(k policy.Kind) string {
	switch k {
	case policy.KindBool:
		return views.FieldBool
	case policy.KindEnum:
		return views.FieldEnum
	case policy.KindLines, policy.KindRules:
		return views.FieldLines
	case policy.KindText:
		return views.FieldText
	}
	return views.FieldInt
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

// fieldText is a setting's value as its input shows it.
func fieldText(f policy.Field, v any) string {
	switch f.Kind {
	case policy.KindLines, policy.KindRules:
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
	case policy.KindBool:
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
func formValue(f policy.Field, text string, present bool) (v any, lineOf []int) {
	switch f.Kind {
	case policy.KindBool:
		return present && (text == "true" || text == "on"), nil
	case policy.KindEnum:
		return text, nil
	case policy.KindText:
		return strings.TrimSpace(text), nil
	case policy.KindInt:
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
		if f.Kind != policy.KindRules {
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
	for _, s := range policyForm() {
		for _, f := range s.Fields {
			if path == f.Path {
				return f.Path, detail
			}
			if rest, ok := strings.CutPrefix(path, f.Path+"/"); ok {
				idx, _, _ := strings.Cut(rest, "/")
				if i, err := strconv.Atoi(idx); err == nil {
					if ls := lines[f.Path]; i < len(ls) {
						return f.Path, fmt.Sprintf("line %d: %s", ls[i], detail)
					}
				}
				return f.Path, detail
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

// changesView is a diff as the pages show it: labels and values in words
// (tenants/policy.Describe), never pointers and raw JSON.
func changesView(cs []policy.Change) []views.PolicyChange {
	rs := policy.Describe(cs)
	out := make([]views.PolicyChange, 0, len(rs))
	for _, r := range rs {
		out = append(out, views.PolicyChange{Path: r.Path, Label: r.Label, List: r.List, Old: r.Old, New: r.New,
			Added: r.Added, Removed: r.Removed})
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
	v := views.PolicyView{CanEdit: tenants.Can(cl.Role, tenants.PermPolicyWrite), CanReadVMs: tenants.Can(cl.Role, tenants.PermVMsRead),
		Current: versionRow(cur, cur.Version), Raw: string(raw)}
	if tok, ok := c.Get(CSRFContextKey).(string); ok {
		v.CSRF = tok
	}
	for _, x := range list {
		v.Versions = append(v.Versions, versionRow(x, cur.Version))
	}
	tree := docTree(cur.Doc)
	for _, s := range policyForm() {
		sec := views.PolicySection{Key: s.Key, Title: s.Title, Help: s.Help}
		for _, f := range s.Fields {
			text := fieldText(f, treeGet(tree, f.Path))
			sec.Fields = append(sec.Fields, views.PolicyField{Name: f.Path, ID: "p" + strings.ReplaceAll(f.Path, "/", "-"), Label: f.FormLabel(),
				Help: f.Help, Kind: viewKind(f.Kind), Value: text, Checked: text == "true", Options: f.Options})
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
	form := policyForm()
	si := -1
	for i, s := range form {
		if s.Key == key {
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
	params, err := c.FormParams()
	if err != nil {
		return err
	}
	lines := map[string][]int{}
	inputs := map[string]string{}
	for _, f := range form[si].Fields {
		text, present := params.Get(f.Path), params.Has(f.Path)
		inputs[f.Path] = text
		val, lineOf := formValue(f, text, present)
		lines[f.Path] = lineOf
		treeSet(tree, f.Path, val)
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
			f.Checked = params.Has(f.Name)
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
			if name == "reason" {
				sec.ReasonError = joinMsg(sec.ReasonError, detail)
				continue
			}
			placed := false
			for i := range sec.Fields {
				if sec.Fields[i].Name == name {
					sec.Fields[i].Error = joinMsg(sec.Fields[i].Error, detail)
					placed = true
				}
			}
			if !placed {
				sec.Error = joinMsg(sec.Error, fieldName(name)+": "+detail)
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
	sec.Focus = sectionFocus(sec)
	return render(c, status, views.Policy(h.page(c, "Policy", "policy"), v))
}

// sectionFocus is the element a refused section lands on: its error, the
// first field in error, or the reason. The page's URL then has no
// fragment naming an element (the form's #…-preview exists only after a
// preview that passed), so the browser scrolls to the autofocused element.
func sectionFocus(sec *views.PolicySection) string {
	if sec.Error != "" {
		return sec.Key + "-error"
	}
	for _, f := range sec.Fields {
		if f.Error != "" {
			return f.ID
		}
	}
	if sec.ReasonError != "" {
		return sec.Key + "-reason"
	}
	return ""
}

// fieldName is a path for people: the field's label when one describes it.
func fieldName(path string) string {
	if f, ok := policy.FieldAt(path); ok {
		return f.Label
	}
	return path
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
	v.Raw, v.RawReason = raw, strings.TrimSpace(c.FormValue("reason"))
	base, _ := strconv.Atoi(c.FormValue("base_version"))
	status := http.StatusOK
	p, perr := ps.Propose(ctx, cl.Tenant.ID, policy.Edit{Raw: []byte(raw), Reason: v.RawReason, Base: &base})
	proposed := perr == nil
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
		// A document that only lacks a reason keeps its preview and Save,
		// the reason marked; any other failure lists its paths.
		if fe, ok := onlyReason(fes); ok && proposed {
			v.RawReasonError, v.RawFocus = fe.Detail, "raw-reason"
			if v.RawPreview, err = h.preview(c, cl.Tenant.ID, p); err != nil {
				return err
			}
		} else {
			for _, fe := range fes {
				v.RawErrors = append(v.RawErrors, views.PolicyPathError{Path: fe.Field, Detail: fe.Detail})
			}
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

// RollbackPolicy is a rollback from the page in two steps. op=confirm
// (the version page's button) shows what copying the version's document
// changes against the version in force, and asks for the reason; nothing
// is saved. op=rollback saves it with that reason, on the version the
// diff was shown against (base_version): a missing reason shows the same
// page again with the field marked, a version saved since is a conflict
// shown with the new diff.
func (h *Handlers) RollbackPolicy(c echo.Context) error {
	ps, err := h.policies()
	if err != nil {
		return err
	}
	ctx, cl := c.Request().Context(), CallerOf(c)
	n, err := strconv.Atoi(c.FormValue("version"))
	if err != nil {
		return errdefs.Invalid("version", "required", "names the version to roll back to")
	}
	target, err := ps.Get(ctx, cl.Tenant.ID, n)
	if err != nil {
		return err
	}
	cur, err := ps.Current(ctx, cl.Tenant.ID)
	if err != nil {
		return err
	}
	run, err := h.running(c, cl.Tenant.ID)
	if err != nil {
		return err
	}
	v := views.PolicyRollbackView{Target: versionRow(target, cur.Version), Current: versionRow(cur, cur.Version),
		Changes: changesView(policy.Diff(cur.Doc, target.Doc)), Notes: policy.Preview(cur.Doc, target.Doc, run),
		Reason: strings.TrimSpace(c.FormValue("reason"))}
	page := h.page(c, fmt.Sprintf("Roll back to policy version %d", n), "policy")
	if c.FormValue("op") != "rollback" {
		return render(c, http.StatusOK, views.PolicyRollback(page, v))
	}
	base, err := strconv.Atoi(c.FormValue("base_version"))
	if err != nil {
		return errdefs.Invalid("base_version", "required", "the form lost the version it was shown against; start the roll back again")
	}
	saved, err := ps.RollbackOn(ctx, cl.Actor(c), cl.Tenant.ID, n, v.Reason, &base)
	var fe *errdefs.FieldError
	switch {
	case err == nil:
		return redirect(c, fmt.Sprintf("/policy?saved=%d", saved.Version))
	case errors.Is(err, errdefs.ErrConflict):
		v.Error = err.Error()
	case errors.As(err, &fe) && fe.Field == "reason":
		v.ReasonError = fe.Detail
	default:
		return err
	}
	return render(c, errdefs.HTTPStatus(err), views.PolicyRollback(page, v))
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
