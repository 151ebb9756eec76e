package notify

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/tenants/workflow"
)

// EventRunEnded is the webhook event type of a finished workflow run.
const EventRunEnded = "run.ended"

// RunResult is what is said about a finished run.
type RunResult struct {
	TenantID string `json:"-"`
	RunID    string `json:"run_id"`
	Workflow string `json:"workflow"`
	Number   int    `json:"number"`
	// State is succeeded, failed, cancelled or timed_out.
	State      string  `json:"state"`
	Reason     string  `json:"reason,omitempty"`
	Trigger    string  `json:"trigger"`
	Repository string  `json:"repository,omitempty"`
	Ref        string  `json:"ref,omitempty"`
	SHA        string  `json:"sha,omitempty"`
	PRNumber   int     `json:"pr_number,omitempty"`
	Title      string  `json:"title,omitempty"` // the pull request's title, if known
	URL        string  `json:"url,omitempty"`   // the run's page
	DurationMS int64   `json:"duration_ms"`
	Cost       float64 `json:"cost"`
	Steps      []Step  `json:"steps"`
}

// Step is one step of a RunResult.
type Step struct {
	Name       string `json:"name"`
	State      string `json:"state"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	DurationMS int64  `json:"duration_ms"`
}

// outcome maps a run state to the notify.on words.
func (r RunResult) outcome() string {
	if r.State == "succeeded" {
		return "success"
	}
	if r.State == "failed" {
		return "failure"
	}
	return r.State
}

// Summary is one line saying how the run went.
func (r RunResult) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s #%d %s", r.Workflow, r.Number, strings.ReplaceAll(r.State, "_", " "))
	if r.Repository != "" {
		fmt.Fprintf(&b, " on %s", r.Repository)
		if r.PRNumber > 0 {
			fmt.Fprintf(&b, "#%d", r.PRNumber)
		} else if r.Ref != "" {
			fmt.Fprintf(&b, " (%s)", strings.TrimPrefix(r.Ref, "refs/heads/"))
		}
	}
	fmt.Fprintf(&b, " in %s", (time.Duration(r.DurationMS) * time.Millisecond).Round(time.Second))
	if r.Reason != "" {
		fmt.Fprintf(&b, ": %s", r.Reason)
	}
	return b.String()
}

// RunEnded sends the run's result everywhere n says, if n.On includes its
// outcome (an empty On means every outcome); a GitHub commit status is set
// in any case. Each destination is tried independently; the error joins
// those that failed.
func (s *Sender) RunEnded(ctx context.Context, n workflow.Notify, r RunResult) error {
	var errs []error
	on := len(n.On) == 0 || slices.Contains(n.On, r.outcome())
	if n.GitHub != nil {
		// The commit status is set whatever On says: a pending status must
		// not stay pending.
		if err := s.githubRun(ctx, *n.GitHub, r, on); err != nil {
			errs = append(errs, err)
		}
	}
	if !on {
		return errors.Join(errs...)
	}
	if n.Slack != nil {
		if _, err := s.Slack(ctx, r.TenantID, *n.Slack, EventRunEnded, slackRun(r)); err != nil {
			errs = append(errs, err)
		}
	}
	if n.Jira != nil {
		if err := s.jiraRun(ctx, *n.Jira, r); err != nil {
			errs = append(errs, err)
		}
	}
	for _, w := range n.Webhooks {
		if _, err := s.Webhook(ctx, r.TenantID, Endpoint{URL: w.URL, SecretName: w.Secret}, EventRunEnded, r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

var issueKeyRE = regexp.MustCompile(`\b([A-Z][A-Z0-9_]{0,19})-([1-9][0-9]{0,8})\b`)

// IssueKeys returns the Jira issue keys of project found in texts (a
// branch name, a title), in order, once each.
func IssueKeys(project string, texts ...string) []string {
	var out []string
	for _, t := range texts {
		// Branches say feature/eng-42-thing as often as ENG-42.
		for _, m := range issueKeyRE.FindAllStringSubmatch(strings.ToUpper(t), -1) {
			if m[1] == project && !slices.Contains(out, m[0]) {
				out = append(out, m[0])
			}
		}
	}
	return out
}

// jiraRun comments on the issues the run's branch or title names; with
// none and a failed run, it opens an issue when CreateOnFailure says so.
func (s *Sender) jiraRun(ctx context.Context, j workflow.Jira, r RunResult) error {
	keys := IssueKeys(j.Project, strings.TrimPrefix(r.Ref, "refs/heads/"), r.Title)
	doc := adfRun(r)
	var errs []error
	for _, k := range keys {
		if _, err := s.JiraComment(ctx, r.TenantID, j, k, doc); err != nil {
			errs = append(errs, err)
		}
	}
	if len(keys) == 0 && j.CreateOnFailure && r.outcome() != "success" {
		if _, err := s.JiraCreateIssue(ctx, r.TenantID, j, truncate(r.Summary(), 250), doc); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func stateEmoji(state string) string {
	switch state {
	case "succeeded":
		return ":white_check_mark:"
	case "failed":
		return ":x:"
	case "timed_out":
		return ":hourglass:"
	}
	return ":no_entry_sign:"
}

// slackRun is the Slack message of a run: text for notifications and
// clients without blocks, blocks with the steps and a link.
func slackRun(r RunResult) SlackMessage {
	text := stateEmoji(r.State) + " " + r.Summary()
	var steps strings.Builder
	for _, st := range r.Steps {
		code := ""
		if st.ExitCode != nil {
			code = fmt.Sprintf(" (exit %d)", *st.ExitCode)
		}
		fmt.Fprintf(&steps, "• %s: %s%s\n", slackEscape(st.Name), st.State, code)
	}
	main := "*" + slackEscape(text) + "*"
	if r.URL != "" {
		main += "\n<" + r.URL + "|View run>"
	}
	blocks := []map[string]any{{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": main}}}
	if steps.Len() > 0 {
		blocks = append(blocks, map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": truncate(steps.String(), 2900)}})
	}
	return SlackMessage{Text: text, Blocks: blocks}
}

// slackEscape escapes the characters Slack's mrkdwn treats as control.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// adfRun is the run as an Atlassian Document Format document.
func adfRun(r RunResult) map[string]any {
	para := []map[string]any{{"type": "text", "text": r.Summary()}}
	if r.URL != "" {
		para = append(para, map[string]any{"type": "text", "text": " "},
			map[string]any{"type": "text", "text": "View run", "marks": []map[string]any{{"type": "link", "attrs": map[string]any{"href": r.URL}}}})
	}
	content := []map[string]any{{"type": "paragraph", "content": para}}
	if len(r.Steps) > 0 {
		var items []map[string]any
		for _, st := range r.Steps {
			line := st.Name + ": " + st.State
			if st.ExitCode != nil {
				line += fmt.Sprintf(" (exit %d)", *st.ExitCode)
			}
			items = append(items, map[string]any{"type": "listItem", "content": []map[string]any{
				{"type": "paragraph", "content": []map[string]any{{"type": "text", "text": line}}}}})
		}
		content = append(content, map[string]any{"type": "bulletList", "content": items})
	}
	return map[string]any{"type": "doc", "version": 1, "content": content}
}
