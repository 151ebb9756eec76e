package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// GitHub commit status states.
const (
	StatusPending = "pending"
	StatusSuccess = "success"
	StatusFailure = "failure"
	StatusError   = "error"
)

var (
	repoRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$`)
	shaRE  = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)
)

// CommitStatus is a GitHub commit status.
type CommitStatus struct {
	State       string `json:"state"`
	TargetURL   string `json:"target_url,omitempty"`
	Description string `json:"description,omitempty"`
	Context     string `json:"context"`
}

// githubRequest builds a GitHub REST call with the token from the secret
// (scoped to the API host).
func (s *Sender) githubRequest(ctx context.Context, tenantID string, g workflow.GitHub, event, path string, body any) (request, error) {
	api, err := s.checkURL(s.cfg.GitHubAPI)
	if err != nil {
		return request{}, fmt.Errorf("github api: %w", err)
	}
	u := api.JoinPath(path)
	token, err := s.secrets.Value(ctx, tenantID, g.TokenSecret, api.Hostname())
	if err != nil {
		return request{}, fmt.Errorf("github: secret %s: %w", g.TokenSecret, err)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return request{}, fmt.Errorf("encode github request: %w", err)
	}
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/vnd.github+json"},
		"X-Github-Api-Version": {"2022-11-28"}}
	h.Set("Authorization", "Bearer "+token)
	return request{tenantID: tenantID, messageID: newMessageID(), kind: KindGitHub, event: event, target: logTarget(u),
		method: http.MethodPost, url: u.String(), header: h, body: raw}, nil
}

// GitHubStatus sets a commit status on repo's commit sha.
func (s *Sender) GitHubStatus(ctx context.Context, tenantID string, g workflow.GitHub, repo, sha string, st CommitStatus) (Result, error) {
	if !repoRE.MatchString(repo) {
		return Result{}, errdefs.Invalid("repository", "repository", fmt.Sprintf("%q is not owner/name", repo))
	}
	if !shaRE.MatchString(sha) {
		return Result{}, errdefs.Invalid("sha", "sha", fmt.Sprintf("%q is not a full commit id", sha))
	}
	st.Description = truncate(st.Description, 139)
	q, err := s.githubRequest(ctx, tenantID, g, "run.status", "/repos/"+repo+"/statuses/"+url.PathEscape(sha), st)
	if err != nil {
		return Result{}, err
	}
	return s.send(ctx, q)
}

// GitHubComment comments body (Markdown) on repo's issue or pull request
// number.
func (s *Sender) GitHubComment(ctx context.Context, tenantID string, g workflow.GitHub, repo string, number int, body string) (Result, error) {
	if !repoRE.MatchString(repo) || number <= 0 {
		return Result{}, errdefs.Invalid("repository", "repository", fmt.Sprintf("%q #%d is not a pull request", repo, number))
	}
	q, err := s.githubRequest(ctx, tenantID, g, EventRunEnded, fmt.Sprintf("/repos/%s/issues/%d/comments", repo, number),
		map[string]string{"body": truncate(body, 60000)})
	if err != nil {
		return Result{}, err
	}
	return s.send(ctx, q)
}

// statusOf maps a run state to a commit status state.
func statusOf(state string) string {
	switch state {
	case "succeeded":
		return StatusSuccess
	case "failed":
		return StatusFailure
	case "queued", "running":
		return StatusPending
	}
	return StatusError // cancelled, timed out
}

// statusContext names the check on GitHub: one per workflow.
func statusContext(r RunResult) string { return "stockade/" + r.Workflow }

// RunStarted reports a run that started: a pending commit status when the
// workflow reports to GitHub and the run names a commit.
func (s *Sender) RunStarted(ctx context.Context, n workflow.Notify, r RunResult) error {
	g := n.GitHub
	if g == nil || !g.Statuses() || r.Repository == "" || r.SHA == "" {
		return nil
	}
	_, err := s.GitHubStatus(ctx, r.TenantID, *g, r.Repository, r.SHA, CommitStatus{State: StatusPending, TargetURL: r.URL,
		Description: fmt.Sprintf("run #%d is running", r.Number), Context: statusContext(r)})
	return err
}

// githubRun reports an ended run to GitHub: its status always (a pending
// status must not stay pending), a pull request comment when allowed.
func (s *Sender) githubRun(ctx context.Context, g workflow.GitHub, r RunResult, comment bool) error {
	var errs []error
	if g.Statuses() && r.Repository != "" && r.SHA != "" {
		if _, err := s.GitHubStatus(ctx, r.TenantID, g, r.Repository, r.SHA, CommitStatus{State: statusOf(r.State), TargetURL: r.URL,
			Description: r.Summary(), Context: statusContext(r)}); err != nil {
			errs = append(errs, err)
		}
	}
	if comment && g.Comments() && r.Repository != "" && r.PRNumber > 0 {
		if _, err := s.GitHubComment(ctx, r.TenantID, g, r.Repository, r.PRNumber, markdownRun(r)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// markdownRun is the run as a GitHub comment.
func markdownRun(r RunResult) string {
	var b strings.Builder
	icon := map[string]string{"succeeded": "✅", "failed": "❌", "timed_out": "⌛"}[r.State]
	if icon == "" {
		icon = "🚫"
	}
	fmt.Fprintf(&b, "%s **%s**", icon, mdEscape(r.Summary()))
	if r.URL != "" {
		fmt.Fprintf(&b, " ([run](%s))", r.URL)
	}
	b.WriteString("\n\n| step | state | exit |\n|---|---|---|\n")
	for _, st := range r.Steps {
		code := ""
		if st.ExitCode != nil {
			code = fmt.Sprint(*st.ExitCode)
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", mdEscape(st.Name), st.State, code)
	}
	return b.String()
}

// mdEscape keeps text from closing a table cell or starting markup.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;", "@", "@\u200b").Replace(s)
}
