package api

import "encoding/json"

// Workflow is one version of a workflow.
type Workflow struct {
	Name       string          `json:"name"`
	Version    int             `json:"version" doc:"1 and up"`
	Source     string          `json:"source" doc:"the YAML as saved"`
	Definition json.RawMessage `json:"definition" doc:"the validated definition: triggers, repositories, sandbox, timeout_seconds, steps, artifacts, notify"`
	Author     string          `json:"author"`
	CreatedAt  string          `json:"created_at" format:"date-time"`
}

// WorkflowList answers GET /api/v1/workflows.
type WorkflowList struct {
	Workflows []Workflow `json:"workflows" nonnull:"true"`
}

// WorkflowParams names a workflow in the path.
type WorkflowParams struct {
	Name string `path:"name" doc:"the workflow's name"`
}

// PutWorkflowParams names a workflow and the version edited.
type PutWorkflowParams struct {
	Name        string `path:"name" doc:"the workflow's name"`
	BaseVersion int    `query:"base_version" doc:"the version edited; a newer one saved meanwhile is a 409"`
}

// WorkflowSettings are the tenant's workflow settings.
type WorkflowSettings struct {
	GitHubSecretName string  `json:"github_secret_name" doc:"the tenant secret that signs GitHub deliveries; empty: refused"`
	UpdatedBy        string  `json:"updated_by,omitempty"`
	UpdatedAt        *string `json:"updated_at,omitempty" format:"date-time"`
}

// SetWorkflowSettings is the body of PUT /api/v1/workflow-settings.
type SetWorkflowSettings struct {
	GitHubSecretName string `json:"github_secret_name" doc:"a tenant secret name (scoped to github.com), or empty"`
}

// Run is a workflow run with its steps and artifacts.
type Run struct {
	ID              string        `json:"id"`
	Workflow        string        `json:"workflow"`
	WorkflowVersion int           `json:"workflow_version" doc:"the version it runs"`
	Number          int           `json:"number" doc:"1 and up, per workflow"`
	State           string        `json:"state" enum:"queued,running,succeeded,failed,cancelled,timed_out,skipped"`
	StateReason     string        `json:"state_reason,omitempty" doc:"why it ended so"`
	Trigger         string        `json:"trigger" doc:"manual, rerun, push, pull_request or issue_comment"`
	DeliveryID      string        `json:"delivery_id,omitempty" doc:"the GitHub delivery"`
	Repository      string        `json:"repository,omitempty" doc:"owner/name"`
	Ref             string        `json:"ref,omitempty"`
	SHA             string        `json:"sha,omitempty"`
	PRNumber        int           `json:"pr_number,omitempty"`
	Sender          string        `json:"sender,omitempty" doc:"who caused it on GitHub"`
	Trust           string        `json:"trust,omitempty" enum:"trusted,untrusted,skipped" doc:"untrusted: ran without secrets and checkout token (a fork's pull request); skipped: nothing ran"`
	TrustReason     string        `json:"trust_reason,omitempty" doc:"who or what the run's code came from"`
	CreatedBy       string        `json:"created_by,omitempty"`
	RerunOf         string        `json:"rerun_of,omitempty" doc:"the run it repeats"`
	SandboxID       string        `json:"sandbox_id,omitempty" doc:"destroyed when the run ends"`
	Cost            float64       `json:"cost" doc:"from the usage ledger"`
	CreatedAt       string        `json:"created_at" format:"date-time"`
	StartedAt       *string       `json:"started_at,omitempty" format:"date-time"`
	EndedAt         *string       `json:"ended_at,omitempty" format:"date-time"`
	DurationMS      int64         `json:"duration_ms"`
	Artifacts       []RunArtifact `json:"artifacts" nonnull:"true"`
	Steps           []RunStep     `json:"steps,omitempty"`
}

// RunArtifact is a file a run collected.
type RunArtifact struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	Error  string `json:"error,omitempty" doc:"why it was not collected"`
}

// RunStep is one step of a run.
type RunStep struct {
	Index      int     `json:"index"`
	Name       string  `json:"name"`
	State      string  `json:"state" enum:"pending,running,succeeded,failed,skipped"`
	ExitCode   *int    `json:"exit_code,omitempty"`
	DurationMS int64   `json:"duration_ms"`
	Output     string  `json:"output" doc:"bounded"`
	Truncated  bool    `json:"truncated,omitempty"`
	StartedAt  *string `json:"started_at,omitempty" format:"date-time"`
	EndedAt    *string `json:"ended_at,omitempty" format:"date-time"`
}

// RunList answers GET /api/v1/runs.
type RunList struct {
	Runs []Run `json:"runs" nonnull:"true"`
}

// RunQuery filters the runs.
type RunQuery struct {
	Workflow string `query:"workflow" doc:"only this workflow's"`
	State    string `query:"state" enum:"queued,running,succeeded,failed,cancelled,timed_out,skipped" doc:"only runs in this state"`
	Before   string `query:"before" doc:"page: runs created before this run id"`
	Limit    int    `query:"limit" minimum:"1" maximum:"200" doc:"at most this many (default 200)"`
}

// RunLogQuery follows a live log.
type RunLogQuery struct {
	Follow string `query:"follow" enum:"1,true" doc:"1: stream the live log until the run ends"`
}

// StartRun is the optional body of POST /api/v1/workflows/{name}/runs.
type StartRun struct {
	Ref string `json:"ref,omitempty" doc:"git ref to run at"`
	SHA string `json:"sha,omitempty" doc:"commit id"`
}
