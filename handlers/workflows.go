package handlers

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// The workflow API: definitions (YAML), the tenant's workflow settings, and
// runs (start by hand, list, read, cancel, re-run, read the log).

func (h *Handlers) workflowStore() (*workflow.Store, error) {
	if h.workflows == nil {
		return nil, fmt.Errorf("workflows: %w: this server runs without workflows", vmpool.ErrUnavailable)
	}
	return h.workflows, nil
}

func (h *Handlers) runEngine() (*runs.Engine, error) {
	if h.runs == nil {
		return nil, fmt.Errorf("runs: %w: this server runs without the run engine", vmpool.ErrUnavailable)
	}
	return h.runs, nil
}

// APIWorkflows lists the tenant's workflows (newest version of each).
func (h *Handlers) APIWorkflows(c echo.Context) error {
	ws, err := h.workflowStore()
	if err != nil {
		return err
	}
	list, err := ws.List(c.Request().Context(), CallerOf(c).Tenant.ID)
	if err != nil {
		return err
	}
	out := api.WorkflowList{Workflows: make([]api.Workflow, 0, len(list))}
	for _, v := range list {
		w, err := workflowJSON(v)
		if err != nil {
			return err
		}
		out.Workflows = append(out.Workflows, w)
	}
	return c.JSON(http.StatusOK, out)
}

// APIWorkflow returns the current version of the tenant's workflow :name.
func (h *Handlers) APIWorkflow(c echo.Context) error {
	ws, err := h.workflowStore()
	if err != nil {
		return err
	}
	v, err := ws.Current(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("name"))
	if err != nil {
		return err
	}
	return answerWorkflow(c, v)
}

// yamlTypes are the media types a workflow body may come as. JSON is YAML
// too: a client may send the document as JSON.
var yamlTypes = map[string]bool{"application/yaml": true, "application/x-yaml": true, "text/yaml": true, "text/x-yaml": true,
	"text/plain": true, "application/json": true}

// APIPutWorkflow saves a new version of workflow :name from a YAML body
// whose name must be :name. ?base_version=N refuses the save (409) when
// another version was saved since N.
func (h *Handlers) APIPutWorkflow(c echo.Context) error {
	ws, err := h.workflowStore()
	if err != nil {
		return err
	}
	if mt, _, _ := mime.ParseMediaType(c.Request().Header.Get(echo.HeaderContentType)); !yamlTypes[mt] {
		return &errdefs.MalformedError{Field: "Content-Type", Detail: "must be application/yaml (or application/json)"}
	}
	var base *int
	if s := c.QueryParam("base_version"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return errdefs.Invalid("base_version", "integer", "must be a version number")
		}
		base = &n
	}
	src, err := io.ReadAll(io.LimitReader(c.Request().Body, workflow.MaxSourceBytes+1))
	if err != nil {
		return jsonError(err)
	}
	ctx := c.Request().Context()
	cl := CallerOf(c)
	def, err := ws.Parser().Parse(src)
	if err != nil {
		return err
	}
	if def.Name != c.Param("name") {
		return errdefs.Invalid("/name", "mismatch", fmt.Sprintf("the document is workflow %q, not %q", def.Name, c.Param("name")))
	}
	v, err := ws.Save(ctx, cl.Actor(c), cl.Tenant.ID, src, base)
	if err != nil {
		return err
	}
	return answerWorkflow(c, v)
}

// APIDeleteWorkflow deletes workflow :name (its history and runs stay).
func (h *Handlers) APIDeleteWorkflow(c echo.Context) error {
	ws, err := h.workflowStore()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	if err := ws.Delete(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("name")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// APIWorkflowSettings returns the tenant's workflow settings.
func (h *Handlers) APIWorkflowSettings(c echo.Context) error {
	ws, err := h.workflowStore()
	if err != nil {
		return err
	}
	s, err := ws.Settings(c.Request().Context(), CallerOf(c).Tenant.ID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, settingsJSON(s))
}

// APIPutWorkflowSettings sets them: {github_secret_name}.
func (h *Handlers) APIPutWorkflowSettings(c echo.Context) error {
	ws, err := h.workflowStore()
	if err != nil {
		return err
	}
	var in api.SetWorkflowSettings
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl := CallerOf(c)
	s, err := ws.SetGitHubSecret(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, in.GitHubSecretName)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, settingsJSON(s))
}

// APIStartRun starts a run of workflow :name by hand (the workflow must
// have a manual trigger). The optional JSON body gives {ref, sha}.
func (h *Handlers) APIStartRun(c echo.Context) error {
	eng, err := h.runEngine()
	if err != nil {
		return err
	}
	var in api.StartRun
	if c.Request().ContentLength != 0 {
		if err := decodeJSON(c, &in); err != nil {
			return err
		}
	}
	cl := CallerOf(c)
	r, err := eng.StartManual(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("name"), runs.Manual{Ref: in.Ref, SHA: in.SHA})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, h.runJSON(r, nil))
}

// APIRuns lists the tenant's runs, newest first: ?workflow=, ?state=,
// ?before=<run id> (paging), ?limit= (at most 200).
func (h *Handlers) APIRuns(c echo.Context) error {
	eng, err := h.runEngine()
	if err != nil {
		return err
	}
	f := runs.Filter{Workflow: c.QueryParam("workflow"), State: runs.State(c.QueryParam("state")), Before: c.QueryParam("before")}
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > runs.MaxList {
			return errdefs.Invalid("limit", "range", fmt.Sprintf("must be 1-%d", runs.MaxList))
		}
		f.Limit = n
	}
	list, err := eng.Store().List(c.Request().Context(), CallerOf(c).Tenant.ID, f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.RunList{Runs: each(list, func(r runs.Run) api.Run { return h.runJSON(r, nil) })})
}

// APIRun returns the tenant's run :id with its steps (their stored output).
func (h *Handlers) APIRun(c echo.Context) error {
	_, r, steps, err := h.callerRun(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.runJSON(r, steps))
}

// APIRunLog returns the run's log as text: the live log (bounded) while it
// executes here, else the stored output of its steps. With ?follow=1 the
// answer streams: what was written so far, then each new write, until the
// run ends (its last line says how) or the client goes.
func (h *Handlers) APIRunLog(c echo.Context) error {
	eng, err := h.runEngine()
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	tenantID := CallerOf(c).Tenant.ID
	r, steps, err := eng.Store().Get(ctx, tenantID, c.Param("id"))
	if err != nil {
		return err
	}
	l, live := eng.Log(tenantID, r.ID)
	if !live {
		c.Response().Header().Set(LogSourceHeader, "stored")
		return c.Blob(http.StatusOK, "text/plain; charset=utf-8", []byte(storedLog(r, steps)))
	}
	c.Response().Header().Set(LogSourceHeader, "live")
	past, _, sub := l.Subscribe()
	defer sub.Close()
	follow := c.QueryParam("follow") == "1" || c.QueryParam("follow") == "true"
	if !follow {
		return c.Blob(http.StatusOK, "text/plain; charset=utf-8", past)
	}
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(past); err != nil {
		return nil
	}
	w.Flush()
	for {
		select {
		case chunk, open := <-sub.C:
			if !open {
				if sub.Dropped() {
					io.WriteString(w, "\n[the log went faster than this connection: reconnect to catch up]\n")
				}
				w.Flush()
				return nil
			}
			if _, err := w.Write(chunk); err != nil {
				return nil
			}
			w.Flush()
		case <-ctx.Done():
			return nil
		}
	}
}

// LogSourceHeader says whether a run log answer is the live log ("live")
// or the steps' stored output ("stored": the run is not executing on this
// server).
const LogSourceHeader = "X-Stockade-Log"

// storedLog is an ended (or not yet started) run's log from its steps.
func storedLog(r runs.Run, steps []runs.Step) string {
	var b strings.Builder
	for _, st := range steps {
		fmt.Fprintf(&b, "==> step %d: %s (%s)\n%s", st.Index+1, st.Name, st.State, st.Output)
		if st.Truncated {
			b.WriteString("\n[output truncated]\n")
		}
	}
	fmt.Fprintf(&b, "==> %s %s\n", r.State, r.StateReason)
	return b.String()
}

// APICancelRun cancels the tenant's run :id; its sandbox is destroyed.
func (h *Handlers) APICancelRun(c echo.Context) error {
	eng, err := h.runEngine()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	r, err := eng.Cancel(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	if err != nil {
		if errors.Is(err, errdefs.ErrConflict) {
			return fmt.Errorf("%w: the run has already ended", errdefs.ErrConflict)
		}
		return err
	}
	return c.JSON(http.StatusOK, h.runJSON(r, nil))
}

// APIRerun starts a new run of the same workflow version and trigger.
func (h *Handlers) APIRerun(c echo.Context) error {
	eng, err := h.runEngine()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	r, err := eng.Rerun(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, h.runJSON(r, nil))
}
