package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/workflow"
	"github.com/stockade-dev/stockade/views"
)

// The workflow pages: the list with the GitHub webhook settings, the YAML
// editor with its versions and "Run now", the run history, and a run's
// page whose log streams live (Server-Sent Events from the engine's log).

// newWorkflowSource is what the editor of a new workflow starts with.
const newWorkflowSource = `name: my-workflow
description: what it is for
triggers:
  - event: manual
sandbox:
  template: busybox
timeout_seconds: 600
steps:
  - name: hello
    run: echo "hello from $STOCKADE_WORKFLOW"
`

func runRow(r runs.Run, now time.Time) views.RunRow {
	row := views.RunRow{ID: r.ID, Number: r.Number, Workflow: r.Workflow, WorkflowVersion: r.WorkflowVersion, State: string(r.State),
		Reason: r.StateReason, Trigger: r.TriggerKind, Repository: r.Repository, Ref: r.Ref, SHA: r.SHA, PRNumber: r.PRNumber,
		Sender: r.Sender, Trust: r.Trust, TrustReason: r.TrustReason, CreatedAt: r.CreatedAt, Duration: r.Duration(now), Cost: r.Cost}
	if r.StartedAt != nil {
		row.StartedAt = *r.StartedAt
	}
	if r.EndedAt != nil {
		row.EndedAt = *r.EndedAt
	}
	return row
}

func triggerSummary(d workflow.Definition) string {
	var evs []string
	for _, t := range d.Triggers {
		if !slices.Contains(evs, t.Event) {
			evs = append(evs, t.Event)
		}
	}
	return strings.Join(evs, ", ")
}

// githubHookURL is the address to paste into GitHub for the caller's tenant.
func (h *Handlers) githubHookURL(c echo.Context) string {
	base := strings.TrimRight(h.cfg.PublicURL, "/")
	if base == "" {
		scheme := "http"
		if c.Request().TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + c.Request().Host
	}
	return base + "/hooks/github/" + url.PathEscape(CallerOf(c).Tenant.Slug)
}

// WorkflowsPage lists the tenant's workflows with their last run and the
// GitHub webhook settings: GET /workflows.
func (h *Handlers) WorkflowsPage(c echo.Context) error {
	ctx, cl := c.Request().Context(), CallerOf(c)
	canEdit := tenants.Can(cl.Role, tenants.PermWorkflowsWrite)
	v := views.WorkflowsView{CanEdit: canEdit, Hook: views.WorkflowHookView{URL: h.githubHookURL(c), CanEdit: canEdit}}
	ws, err := h.workflowStore()
	if err != nil {
		v.Unavailable = err.Error()
		return render(c, http.StatusOK, views.Workflows(h.page(c, "Workflows", views.NavWorkflows), v))
	}
	list, err := ws.List(ctx, cl.Tenant.ID)
	if err != nil {
		return err
	}
	for _, wv := range list {
		row := views.WorkflowRow{Name: wv.Name, Description: wv.Def.Description, Version: wv.Version, Author: authorOf(wv),
			SavedAt: wv.CreatedAt, Triggers: triggerSummary(wv.Def)}
		if h.runs != nil {
			last, err := h.runs.Store().List(ctx, cl.Tenant.ID, runs.Filter{Workflow: wv.Name, Limit: 1})
			if err != nil {
				return err
			}
			if len(last) == 1 {
				r := runRow(last[0], h.clock())
				row.LastRun = &r
			}
		}
		v.Rows = append(v.Rows, row)
	}
	s, err := ws.Settings(ctx, cl.Tenant.ID)
	if err != nil {
		return err
	}
	v.Hook.SecretName, v.Hook.UpdatedBy, v.Hook.UpdatedAt = s.GitHubSecretName, s.UpdatedBy, s.UpdatedAt
	if canEdit && h.secrets != nil {
		secs, err := h.secrets.List(ctx, cl.Tenant.ID)
		if err != nil {
			return err
		}
		for _, sec := range secs {
			v.Hook.Secrets = append(v.Hook.Secrets, sec.Name)
		}
	}
	return render(c, http.StatusOK, views.Workflows(h.page(c, "Workflows", views.NavWorkflows), v))
}

func authorOf(v workflow.Version) string {
	if v.AuthorName != "" {
		return v.AuthorName
	}
	return v.AuthorID
}

// SaveWorkflowSettings sets the tenant secret holding the GitHub webhook
// secret: POST /workflows/settings.
func (h *Handlers) SaveWorkflowSettings(c echo.Context) error {
	ws, err := h.workflowStore()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	name := strings.TrimSpace(c.FormValue("github_secret_name"))
	if _, err := ws.SetGitHubSecret(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, name); err != nil {
		var fe *errdefs.FieldError
		if !errors.As(err, &fe) {
			return err
		}
		h.flash(c, views.FlashError, "Not saved: "+fe.Detail)
		return redirect(c, "/workflows#github-webhook")
	}
	if name == "" {
		h.flash(c, views.FlashSuccess, "The GitHub webhook secret is unset: deliveries are refused.")
	} else {
		h.flash(c, views.FlashSuccess, "GitHub deliveries are now checked with the tenant secret "+name+".")
	}
	return redirect(c, "/workflows#github-webhook")
}

// NewWorkflowPage is the editor of a new workflow: GET /workflows/new.
func (h *Handlers) NewWorkflowPage(c echo.Context) error {
	if _, err := h.workflowStore(); err != nil {
		return err
	}
	cl := CallerOf(c)
	v := views.WorkflowEditorView{Source: newWorkflowSource, CanEdit: tenants.Can(cl.Role, tenants.PermWorkflowsWrite)}
	return render(c, http.StatusOK, views.WorkflowEditor(h.page(c, "New workflow", views.NavWorkflows), v))
}

// WorkflowPage is workflow :name's editor, versions and recent runs;
// ?version=N shows an older version read-only: GET /workflows/:name.
func (h *Handlers) WorkflowPage(c echo.Context) error {
	ws, err := h.workflowStore()
	if err != nil {
		return err
	}
	ctx, cl := c.Request().Context(), CallerOf(c)
	cur, err := ws.Current(ctx, cl.Tenant.ID, c.Param("name"))
	if err != nil {
		return err
	}
	v, err := h.editorView(c, cur)
	if err != nil {
		return err
	}
	if s := c.QueryParam("version"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return errdefs.Invalid("version", "integer", "must be a version number")
		}
		if n != cur.Version {
			old, err := ws.Get(ctx, cl.Tenant.ID, cur.Name, n)
			if err != nil {
				return err
			}
			v.Source, v.Viewing = old.Source, n
		}
	}
	return render(c, http.StatusOK, views.WorkflowEditor(h.page(c, "Workflow "+cur.Name, views.NavWorkflows), v))
}

// editorView is the editor of the saved version cur.
func (h *Handlers) editorView(c echo.Context, cur workflow.Version) (views.WorkflowEditorView, error) {
	ctx, cl := c.Request().Context(), CallerOf(c)
	v := views.WorkflowEditorView{Name: cur.Name, Source: cur.Source, BaseVersion: cur.Version, Manual: cur.Def.HasManual(),
		CanEdit: tenants.Can(cl.Role, tenants.PermWorkflowsWrite), CanRun: tenants.Can(cl.Role, tenants.PermRunsWrite) && h.runs != nil}
	hist, err := h.workflows.History(ctx, cl.Tenant.ID, cur.Name)
	if err != nil {
		return v, err
	}
	for _, hv := range hist {
		v.History = append(v.History, views.WorkflowVersionRow{Version: hv.Version, Author: authorOf(hv), SavedAt: hv.CreatedAt,
			Current: hv.Version == cur.Version, Deleted: hv.Deleted})
	}
	if h.runs != nil {
		list, err := h.runs.Store().List(ctx, cl.Tenant.ID, runs.Filter{Workflow: cur.Name, Limit: 10})
		if err != nil {
			return v, err
		}
		for _, r := range list {
			v.Runs = append(v.Runs, runRow(r, h.clock()))
		}
	}
	return v, nil
}

// lineRE finds the YAML line an error names.
var lineRE = regexp.MustCompile(`\bline (\d+):\s*`)

// workflowErrors are the errors of a failed save, each with its line and
// field, or false when err is not about the document.
func workflowErrors(err error) ([]views.WorkflowError, bool) {
	var list []*errdefs.FieldError
	var we workflow.Errors
	switch {
	case errors.As(err, &we):
		list = we
	case len(errdefs.FieldErrors(err)) > 0:
		list = errdefs.FieldErrors(err) // every one, not the first
	case errors.Is(err, errdefs.ErrConflict), errors.Is(err, errdefs.ErrQuota):
		return []views.WorkflowError{{Detail: err.Error()}}, true
	default:
		return nil, false
	}
	out := make([]views.WorkflowError, 0, len(list))
	for _, fe := range list {
		e := views.WorkflowError{Field: fe.Field, Detail: fe.Detail}
		if m := lineRE.FindStringSubmatchIndex(fe.Detail); m != nil {
			e.Line, _ = strconv.Atoi(fe.Detail[m[2]:m[3]])
			e.Detail = fe.Detail[:m[0]] + fe.Detail[m[1]:]
		}
		out = append(out, e)
	}
	return out, true
}

// SaveWorkflow saves the editor's YAML as a new version: POST /workflows
// with source, name (the workflow edited; empty for a new one) and
// base_version. A document that does not pass comes back in the editor,
// as typed, with its errors (422).
func (h *Handlers) SaveWorkflow(c echo.Context) error {
	ws, err := h.workflowStore()
	if err != nil {
		return err
	}
	ctx, cl := c.Request().Context(), CallerOf(c)
	name, src := c.FormValue("name"), strings.ReplaceAll(c.FormValue("source"), "\r\n", "\n")
	base, err := strconv.Atoi(c.FormValue("base_version"))
	if err != nil || base < 0 {
		return errdefs.Invalid("base_version", "integer", "must be a version number")
	}
	saved, err := func() (workflow.Version, error) {
		def, err := ws.Parser().Parse([]byte(src))
		if err != nil {
			return workflow.Version{}, err
		}
		if name != "" && def.Name != name {
			return workflow.Version{}, errdefs.Invalid("/name", "mismatch",
				fmt.Sprintf("line 1: this editor saves workflow %q; to make workflow %q, use New workflow", name, def.Name))
		}
		return ws.Save(ctx, cl.Actor(c), cl.Tenant.ID, []byte(src), &base)
	}()
	if err == nil {
		h.flash(c, views.FlashSuccess, fmt.Sprintf("Saved workflow %s as version %d.", saved.Name, saved.Version))
		return redirect(c, "/workflows/"+url.PathEscape(saved.Name))
	}
	errs, ok := workflowErrors(err)
	if !ok {
		return err
	}
	status := errdefs.HTTPStatus(err)
	v := views.WorkflowEditorView{CanEdit: true}
	title := "New workflow"
	if name != "" {
		cur, err := ws.Current(ctx, cl.Tenant.ID, name)
		if err != nil {
			return err
		}
		if v, err = h.editorView(c, cur); err != nil {
			return err
		}
		title = "Workflow " + name
	}
	// What was typed stays, and so does the version it started from: a
	// conflict is not silently overwritten by the next click.
	v.Source, v.BaseVersion, v.Errors = src, base, errs
	return render(c, status, views.WorkflowEditor(h.page(c, title, views.NavWorkflows), v))
}

// StartWorkflowRun runs workflow :name by hand at the optional ref and
// opens the run: POST /workflows/:name/runs. What the engine refuses (a bad
// ref, no manual trigger) comes back as a message on the workflow's page.
func (h *Handlers) StartWorkflowRun(c echo.Context) error {
	eng, err := h.runEngine()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	r, err := eng.StartManual(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("name"), runs.Manual{Ref: c.FormValue("ref")})
	var fe *errdefs.FieldError
	switch {
	case errors.As(err, &fe):
		detail := fe.Detail
		if fe.Field != "name" {
			detail = "the " + fe.Field + " " + detail
		}
		h.flash(c, views.FlashError, "Not started: "+detail+".")
		return redirect(c, "/workflows/"+url.PathEscape(c.Param("name")))
	case err != nil:
		return err
	}
	return redirect(c, "/runs/"+r.ID)
}

var runStates = []string{string(runs.StateQueued), string(runs.StateRunning), string(runs.StateSucceeded), string(runs.StateFailed),
	string(runs.StateCancelled), string(runs.StateTimedOut), string(runs.StateSkipped)}

// runsPage is how many runs one page of the history shows.
const runsPage = 50

// RunsPage is the run history: GET /runs[?workflow=&state=&before=].
func (h *Handlers) RunsPage(c echo.Context) error {
	ctx, cl := c.Request().Context(), CallerOf(c)
	v := views.RunsView{Workflow: c.QueryParam("workflow"), State: c.QueryParam("state"), States: runStates}
	eng, err := h.runEngine()
	if err != nil {
		v.Unavailable = err.Error()
		return render(c, http.StatusOK, views.Runs(h.page(c, "Runs", views.NavRuns), v))
	}
	if h.workflows != nil {
		list, err := h.workflows.List(ctx, cl.Tenant.ID)
		if err != nil {
			return err
		}
		for _, wv := range list {
			v.Workflows = append(v.Workflows, wv.Name)
		}
	}
	if v.Workflow != "" && !slices.Contains(v.Workflows, v.Workflow) {
		// A deleted workflow's runs stay listed: keep it choosable.
		v.Workflows = append(v.Workflows, v.Workflow)
	}
	list, err := eng.Store().List(ctx, cl.Tenant.ID, runs.Filter{Workflow: v.Workflow, State: runs.State(v.State),
		Before: c.QueryParam("before"), Limit: runsPage + 1})
	if err != nil {
		return err
	}
	if len(list) > runsPage {
		list = list[:runsPage]
		q := url.Values{"before": {list[len(list)-1].ID}}
		if v.Workflow != "" {
			q.Set("workflow", v.Workflow)
		}
		if v.State != "" {
			q.Set("state", v.State)
		}
		v.Next = "/runs?" + q.Encode()
	}
	for _, r := range list {
		v.Rows = append(v.Rows, runRow(r, h.clock()))
	}
	return render(c, http.StatusOK, views.Runs(h.page(c, "Runs", views.NavRuns), v))
}

// runView is the run page's model.
func (h *Handlers) runView(c echo.Context, eng *runs.Engine, r runs.Run, steps []runs.Step) views.RunView {
	cl := CallerOf(c)
	v := views.RunView{Run: runRow(r, h.clock()), SandboxID: r.SandboxID, CanWrite: tenants.Can(cl.Role, tenants.PermRunsWrite),
		Ended: r.State.Ended(), EventsURL: "/runs/" + r.ID + "/events", SummaryURL: "/runs/" + r.ID + "/summary"}
	for _, st := range steps {
		row := views.RunStepRow{Index: st.Index, Name: st.Name, State: st.State, Duration: time.Duration(st.DurationMS) * time.Millisecond,
			Truncated: st.Truncated}
		if st.ExitCode != nil {
			row.ExitCode = strconv.Itoa(*st.ExitCode)
		}
		v.Steps = append(v.Steps, row)
	}
	for i, a := range r.Artifacts() {
		row := views.RunArtifactRow{Path: a.Path, Size: a.Size, SHA256: a.SHA256, Error: a.Error}
		if a.Error == "" {
			row.URL = fmt.Sprintf("/runs/%s/artifacts/%d", r.ID, i)
		}
		v.Artifacts = append(v.Artifacts, row)
	}
	if _, live := eng.Log(cl.Tenant.ID, r.ID); !live {
		v.Ended, v.Log = true, storedLog(r, steps)
	}
	return v
}

// RunPage is one run: GET /runs/:id.
func (h *Handlers) RunPage(c echo.Context) error {
	eng, r, steps, err := h.callerRun(c)
	if err != nil {
		return err
	}
	v := h.runView(c, eng, r, steps)
	return render(c, http.StatusOK, views.Run(h.page(c, "Run "+r.Workflow+" #"+strconv.Itoa(r.Number), views.NavRuns), v))
}

// RunSummary is the run page's summary alone (state, facts, steps,
// artifacts), fetched by the page when the run ends: GET /runs/:id/summary.
func (h *Handlers) RunSummary(c echo.Context) error {
	eng, r, steps, err := h.callerRun(c)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.RunSummary(h.page(c, "", views.NavRuns), h.runView(c, eng, r, steps)))
}

// keepAlive is how often an idle event stream says it is still there.
const keepAlive = 15 * time.Second

// RunEvents streams run :id's log as Server-Sent Events: "snapshot" (the
// whole log so far, replacing what the page shows), "log" (output to
// append), then "end" with {state, reason} once the run has ended and is
// recorded. A subscriber that falls behind is disconnected; the browser
// reconnects and gets a fresh snapshot. GET /runs/:id/events.
func (h *Handlers) RunEvents(c echo.Context) error {
	eng, err := h.runEngine()
	if err != nil {
		return err
	}
	ctx, tenantID := c.Request().Context(), CallerOf(c).Tenant.ID
	r, steps, err := eng.Store().Get(ctx, tenantID, c.Param("id"))
	if err != nil {
		return err
	}
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, "text/event-stream; charset=utf-8")
	w.Header().Set(echo.HeaderCacheControl, "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // a buffering proxy would hold the stream
	w.WriteHeader(http.StatusOK)
	send := func(event string, data any) bool {
		b, _ := json.Marshal(data) // strings and a struct of strings
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		w.Flush()
		return true
	}
	end := func(r runs.Run) {
		send("end", map[string]string{"state": string(r.State), "reason": r.StateReason})
	}
	l, live := eng.Log(tenantID, r.ID)
	if !live {
		if send("snapshot", storedLog(r, steps)) {
			end(r)
		}
		return nil
	}
	past, _, sub := l.Subscribe()
	defer sub.Close()
	io.WriteString(w, "retry: 1000\n\n")
	text, carry := utf8Prefix(nil, past)
	if !send("snapshot", string(text)) {
		return nil
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case chunk, open := <-sub.C:
			if !open {
				if sub.Dropped() {
					return nil // the browser reconnects for a fresh snapshot
				}
				// The log closes after the run's end is recorded.
				if len(carry) > 0 && !send("log", string(carry)) {
					return nil
				}
				r, _, err := eng.Store().Get(ctx, tenantID, r.ID)
				if err != nil {
					h.log.Warn("run events: read the ended run", "run", r.ID, "err", err)
					return nil
				}
				end(r)
				return nil
			}
			text, carry = utf8Prefix(carry, chunk)
			if len(text) > 0 && !send("log", string(text)) {
				return nil
			}
		case <-tick.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return nil
			}
			w.Flush()
		case <-ctx.Done():
			return nil
		}
	}
}

// utf8Prefix joins carry and chunk and splits off an incomplete UTF-8
// sequence at the end, which waits for the next chunk: output arrives in
// pieces that may cut a character in two, and JSON would mangle the halves.
func utf8Prefix(carry, chunk []byte) (text, rest []byte) {
	b := append(carry, chunk...)
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i], append([]byte(nil), b[i:]...)
			}
			break
		}
	}
	return b, nil
}

// CancelRun cancels run :id from its page: POST /runs/:id/cancel.
func (h *Handlers) CancelRun(c echo.Context) error {
	eng, err := h.runEngine()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	r, err := eng.Cancel(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	switch {
	case errors.Is(err, errdefs.ErrConflict):
		h.flash(c, views.FlashError, "The run has already ended.")
		return redirect(c, "/runs/"+c.Param("id"))
	case err != nil:
		return err
	}
	h.flash(c, views.FlashSuccess, fmt.Sprintf("Run %s #%d cancelled; its sandbox is destroyed.", r.Workflow, r.Number))
	return redirect(c, "/runs/"+r.ID)
}

// RerunRun starts a new run like run :id and opens it:
// POST /runs/:id/rerun.
func (h *Handlers) RerunRun(c echo.Context) error {
	eng, err := h.runEngine()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	r, err := eng.Rerun(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	if errors.Is(err, errdefs.ErrConflict) {
		// A skipped run, or a deleted workflow: the run page says why.
		h.flash(c, views.FlashError, "Not re-run: "+strings.TrimPrefix(err.Error(), errdefs.ErrConflict.Error()+": "))
		return redirect(c, "/runs/"+c.Param("id"))
	}
	if err != nil {
		return err
	}
	return redirect(c, "/runs/"+r.ID)
}

// RunArtifact downloads artifact :index of run :run:
// GET /runs/:run/artifacts/:index.
func (h *Handlers) RunArtifact(c echo.Context) error {
	eng, err := h.runEngine()
	if err != nil {
		return err
	}
	r, _, err := eng.Store().Get(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("run"))
	if err != nil {
		return err
	}
	arts := r.Artifacts()
	i, err := strconv.Atoi(c.Param("index"))
	if err != nil || i < 0 || i >= len(arts) || arts[i].Error != "" {
		return fmt.Errorf("artifact %s of run %s: %w", c.Param("index"), r.ID, errdefs.ErrNotFound)
	}
	f, err := os.Open(eng.ArtifactPath(r, i, arts[i].Path))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("artifact %s of run %s is no longer kept: %w", arts[i].Path, r.ID, errdefs.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("open artifact %d of run %s: %w", i, r.ID, err)
	}
	defer f.Close()
	name := path.Base(arts[i].Path)
	hdr := c.Response().Header()
	hdr.Set(echo.HeaderContentType, "application/octet-stream")
	hdr.Set(echo.HeaderContentDisposition, mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	at := time.Time{}
	if r.EndedAt != nil {
		at = *r.EndedAt
	}
	http.ServeContent(c.Response(), c.Request(), name, at, f)
	return nil
}
