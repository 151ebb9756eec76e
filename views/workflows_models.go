package views

import (
	"fmt"
	"strconv"
	"time"
)

// Navigation keys of the workflow pages.
const (
	NavWorkflows = "workflows"
	NavRuns      = "runs"
)

// WorkflowsView is the workflow list with the GitHub webhook settings.
type WorkflowsView struct {
	Rows    []WorkflowRow
	CanEdit bool
	// Unavailable says why this server cannot show workflows.
	Unavailable string
	Hook        WorkflowHookView
}

// WorkflowRow is one workflow with its newest run.
type WorkflowRow struct {
	Name        string
	Description string
	Version     int
	Author      string
	SavedAt     time.Time
	Triggers    string // "manual, pull_request"
	LastRun     *RunRow
}

// WorkflowHookView is where GitHub sends the tenant's events and which
// tenant secret holds the webhook's signing secret.
type WorkflowHookView struct {
	URL        string
	SecretName string
	// Secrets are the tenant's secret names, offered as suggestions.
	Secrets   []string
	UpdatedBy string
	UpdatedAt time.Time
	CanEdit   bool
}

// WorkflowEditorView is the YAML editor of one workflow (or of a new one).
type WorkflowEditorView struct {
	// Name is the workflow edited; empty for a new one.
	Name string
	// Source is the text in the editor: what was posted back when a save
	// failed, so nothing typed is lost.
	Source string
	// BaseVersion is the version the edit started from (0: new).
	BaseVersion int
	Errors      []WorkflowError
	CanEdit     bool
	CanRun      bool
	// Manual: the saved workflow has a manual trigger (Run now works).
	Manual bool
	// Viewing is an older version shown read-only (0: the current one).
	Viewing int
	History []WorkflowVersionRow
	Runs    []RunRow
}

// WorkflowError is one schema or YAML error of the document.
type WorkflowError struct {
	Line   int // 0: not tied to a line
	Field  string
	Detail string
}

// Where says where the error is, for people: "line 7, /steps/0/run".
func (e WorkflowError) Where() string {
	switch {
	case e.Line > 0 && e.Field != "" && e.Field != "/":
		return fmt.Sprintf("line %d, %s", e.Line, e.Field)
	case e.Line > 0:
		return fmt.Sprintf("line %d", e.Line)
	case e.Field != "":
		return e.Field
	}
	return "document"
}

// WorkflowVersionRow is one saved version.
type WorkflowVersionRow struct {
	Version int
	Author  string
	SavedAt time.Time
	Current bool
	Deleted bool
}

// RunRow is one run in a list.
type RunRow struct {
	ID              string
	Number          int
	Workflow        string
	WorkflowVersion int
	State           string
	Reason          string
	Trigger         string
	Repository      string
	Ref             string
	SHA             string
	PRNumber        int
	Sender          string
	// Trust is trusted, untrusted or skipped ("" for runs older than
	// the distinction); TrustReason says who the code came from.
	Trust       string
	TrustReason string
	CreatedAt   time.Time
	StartedAt   time.Time
	EndedAt     time.Time
	Duration    time.Duration
	Cost        float64
}

// RunsView is the run history with its filters.
type RunsView struct {
	Rows      []RunRow
	Workflow  string
	State     string
	Workflows []string
	States    []string
	// Next is the URL of the next (older) page; empty on the last.
	Next        string
	Unavailable string
}

// RunView is one run: its summary, steps, artifacts and log.
type RunView struct {
	Run       RunRow
	SandboxID string
	Steps     []RunStepRow
	Artifacts []RunArtifactRow
	CanWrite  bool
	Ended     bool
	// Log is the stored log of a run not executing here; a live run's log
	// comes from EventsURL.
	Log       string
	EventsURL string
	// SummaryURL answers the summary fragment, fetched when the run ends.
	SummaryURL string
}

// RunStepRow is one step of a run.
type RunStepRow struct {
	Index     int
	Name      string
	State     string
	ExitCode  string // "" when it has none (yet)
	Duration  time.Duration
	Truncated bool
}

// RunArtifactRow is one artifact of a run.
type RunArtifactRow struct {
	Path   string
	Size   int64
	SHA256 string
	Error  string
	URL    string // download link; empty when it was not collected
}

// runTrustNote is what the run page says about the run's trigger: the
// flash class and the sentence; "" for none.
func runTrustNote(r RunRow) (string, string) {
	switch r.Trust {
	case "untrusted":
		return "flash run-trust-warn", "Untrusted trigger: " + r.TrustReason + ": no secrets and no checkout token."
	case "skipped":
		return "flash run-trust-warn", "Skipped: " + r.TrustReason + ". Nothing ran."
	case "trusted":
		if r.TrustReason != "" {
			return "flash flash-info", "Trusted trigger: " + r.TrustReason + ": the secrets the policy grants and the checkout token."
		}
	}
	return "", ""
}

func runTrustClass(r RunRow) string { c, _ := runTrustNote(r); return c }

func runTrustText(r RunRow) string { _, t := runTrustNote(r); return t }

// runStatePill maps run and step states onto the pill colours.
func runStatePill(state string) string {
	switch state {
	case "succeeded":
		return "pill pill-good"
	case "failed", "timed_out":
		return "pill pill-bad"
	case "running", "queued", "pending":
		return "pill pill-warn"
	}
	return "pill"
}

func runLabel(r RunRow) string { return r.Workflow + " #" + strconv.Itoa(r.Number) }

func runURL(id string) string { return "/runs/" + id }

func workflowURL(name string) string { return "/workflows/" + name }

// runDuration is a run's or step's duration, to the tenth of a second
// below a minute.
func runDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	}
	return d.Round(time.Second).String()
}

func runCost(c float64) string {
	if c == 0 {
		return "—"
	}
	return "$" + strconv.FormatFloat(c, 'f', 4, 64)
}

func runWhere(r RunRow) string {
	s := r.Repository
	if r.Ref != "" {
		if s != "" {
			s += " @ "
		}
		s += r.Ref
	}
	if r.SHA != "" {
		sha := r.SHA
		if len(sha) > 7 {
			sha = sha[:7]
		}
		s += " (" + sha + ")"
	}
	if r.PRNumber > 0 {
		s += " PR #" + strconv.Itoa(r.PRNumber)
	}
	return s
}

func byteSize(n int64) string {
	switch {
	case n < 1<<10:
		return strconv.FormatInt(n, 10) + " B"
	case n < 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
}

// runNoSandbox is what stands for a run's sandbox before it has one.
func runNoSandbox(ended bool) string {
	if ended {
		return "none"
	}
	return "none yet"
}
