package handlers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// The workflow API's answers in handlers/api's types. Times keep the
// precision encoding/json gives a time.Time (RFC 3339 with nanoseconds), as
// these answers had before they had types of their own.

func workflowJSON(v workflow.Version) (api.Workflow, error) {
	def, err := json.Marshal(v.Def)
	if err != nil {
		return api.Workflow{}, fmt.Errorf("encode workflow %s v%d: %w", v.Name, v.Version, err)
	}
	author := v.AuthorName
	if author == "" {
		author = v.AuthorID
	}
	return api.Workflow{Name: v.Name, Version: v.Version, Source: v.Source, Definition: def, Author: author, CreatedAt: nanoTime(v.CreatedAt)}, nil
}

// answerWorkflow writes one version.
func answerWorkflow(c echo.Context, v workflow.Version) error {
	out, err := workflowJSON(v)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func settingsJSON(s workflow.Settings) api.WorkflowSettings {
	out := api.WorkflowSettings{GitHubSecretName: s.GitHubSecretName, UpdatedBy: s.UpdatedBy}
	if !s.UpdatedAt.IsZero() {
		out.UpdatedAt = nanoTimePtr(&s.UpdatedAt)
	}
	return out
}

func (h *Handlers) runJSON(r runs.Run, steps []runs.Step) api.Run {
	out := api.Run{ID: r.ID, Workflow: r.Workflow, WorkflowVersion: r.WorkflowVersion, Number: r.Number,
		State: string(r.State), StateReason: r.StateReason, Trigger: r.TriggerKind, DeliveryID: r.DeliveryID,
		Repository: r.Repository, Ref: r.Ref, SHA: r.SHA, PRNumber: r.PRNumber, Sender: r.Sender, Trust: r.Trust,
		TrustReason: r.TrustReason, CreatedBy: r.CreatedBy, RerunOf: r.RerunOf, SandboxID: r.SandboxID, Cost: r.Cost,
		CreatedAt: nanoTime(r.CreatedAt), StartedAt: nanoTimePtr(r.StartedAt), EndedAt: nanoTimePtr(r.EndedAt),
		DurationMS: r.Duration(h.clock()).Milliseconds(), Artifacts: []api.RunArtifact{}}
	for _, a := range r.Artifacts() {
		out.Artifacts = append(out.Artifacts, api.RunArtifact{Path: a.Path, Size: a.Size, SHA256: a.SHA256, Error: a.Error})
	}
	for _, s := range steps {
		out.Steps = append(out.Steps, api.RunStep{Index: s.Index, Name: s.Name, State: s.State, ExitCode: s.ExitCode,
			DurationMS: s.DurationMS, Output: s.Output, Truncated: s.Truncated,
			StartedAt: nanoTimePtr(s.StartedAt), EndedAt: nanoTimePtr(s.EndedAt)})
	}
	return out
}

// callerRun is the caller's run :id with its steps, and the engine.
func (h *Handlers) callerRun(c echo.Context) (*runs.Engine, runs.Run, []runs.Step, error) {
	eng, err := h.runEngine()
	if err != nil {
		return nil, runs.Run{}, nil, err
	}
	r, steps, err := eng.Store().Get(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("id"))
	return eng, r, steps, err
}

func nanoTime(t time.Time) string { return t.Format(time.RFC3339Nano) }

func nanoTimePtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := nanoTime(*t)
	return &s
}
