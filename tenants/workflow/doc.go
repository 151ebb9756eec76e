// Package workflow keeps each tenant's workflows: YAML documents checked
// against a JSON Schema (errors name the field and its YAML line), stored
// as append-only versions, and matched against GitHub events. Running them
// is sandbox/runs' job; this package only says what a workflow is.
//
// # Trusted and untrusted triggers
//
// A GitHub event says whose code a run would execute, and Trust decides
// what that code gets (GitHub Actions' line, a little stricter):
//
//   - push, and a pull_request from a branch of the repository itself:
//     trusted. Pushing there takes write access. The run's sandbox gets
//     the secrets the tenant policy grants and the checkout its token.
//
//   - a pull_request from a fork (head.repo is another repository, is a
//     fork, or was deleted): by default it runs nothing; the run is
//     recorded as skipped, saying "fork pull request from mallory/app
//     (allow_forks not set)". With
//
//     allow_forks: true
//
//     it runs untrusted: no secret placeholder in the sandbox whatever the
//     policy grants (steps find their env variables unset), an anonymous
//     checkout (enough for a public repository), STOCKADE_TRUST=untrusted.
//     Notifications are still sent: they go from the control plane, not
//     from the sandbox. No setting gives a fork's pull request the
//     secrets by itself; only a comment by a trusted author runs its code
//     trusted (below).
//
//   - an issue_comment command: only from comment_authors, a list of
//     GitHub author associations (OWNER, MEMBER, COLLABORATOR,
//     CONTRIBUTOR, FIRST_TIME_CONTRIBUTOR, FIRST_TIMER, MANNEQUIN, NONE; in
//     capitals) and logins (anything else; compared case-insensitively):
//
//     comment_authors: [OWNER, MEMBER, COLLABORATOR, release-bot]
//
//     The default is [OWNER, MEMBER, COLLABORATOR], the people with write
//     access. Their comment runs trusted, even on a fork's pull request:
//     it is their approval, so read the pull request before you comment
//     (the run fetches its head as it is when the run starts). A comment
//     by anyone else is recorded as a skipped run.
//
//   - manual runs are trusted: the tenant's own members start them.
//
// A re-run keeps the trust of the run it repeats, runs the workflow's
// current version, and is refused for a skipped run and for a deleted
// workflow.
package workflow

import "regexp"

// Events a trigger can name.
const (
	EventPush         = "push"
	EventPullRequest  = "pull_request"
	EventIssueComment = "issue_comment"
	EventManual       = "manual"
)

// Definition is one workflow as written by an admin.
type Definition struct {
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
	Triggers    []Trigger `json:"triggers"`
	// Repositories are "owner/name" or "owner/*" patterns a GitHub event
	// must come from; empty means any repository.
	Repositories []string `json:"repositories,omitempty"`
	Sandbox      Sandbox  `json:"sandbox,omitempty"`
	// Volumes are tenant volumes mounted into the run's sandbox (a
	// dependency cache, say). A run of an untrusted trigger (a fork's pull
	// request) gets each one read-only, whatever it asks: it must not
	// poison what trusted runs read.
	Volumes        []Volume `json:"volumes,omitempty"`
	TimeoutSeconds int      `json:"timeout_seconds,omitempty"`
	// Checkout clones the run's repository (its trigger's, or the one
	// repository named above) into /workspace/<name> before the steps,
	// with notify.github.token_secret as the token; default true.
	Checkout *bool  `json:"checkout,omitempty"`
	Steps    []Step `json:"steps"`
	// Artifacts are paths in the sandbox (relative to /workspace) to keep
	// after the run.
	Artifacts []string `json:"artifacts,omitempty"`
	Notify    Notify   `json:"notify,omitempty"`
	// AllowForks lets pull requests from forks run, untrusted: their
	// sandbox gets no secrets and their checkout no token. Without it a
	// fork pull request is recorded as a skipped run and runs nothing.
	AllowForks bool `json:"allow_forks,omitempty"`
	// CommentAuthors are who may start the workflow with a comment: author
	// associations (OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR, ...) and
	// GitHub logins. Empty means DefaultCommentAuthors. A comment by
	// anyone else is recorded as a skipped run and runs nothing.
	CommentAuthors []string `json:"comment_authors,omitempty"`
}

// Trigger is one event that starts the workflow.
type Trigger struct {
	Event string `json:"event"`
	// Actions of a pull_request event; empty means opened and synchronize.
	Actions []string `json:"actions,omitempty"`
	// Branches of a push (the pushed branch) or pull_request (its base
	// branch); empty means any.
	Branches []string `json:"branches,omitempty"`
	// Labels of a pull_request "labeled" action: the label added must be
	// one of them; empty means any.
	Labels []string `json:"labels,omitempty"`
	// Command starts an issue_comment: the comment's first line must be it
	// (e.g. "/stockade run"), optionally followed by arguments.
	Command string `json:"command,omitempty"`
}

// Sandbox is what the run's sandbox is asked for; zero values take the
// sandbox service's defaults.
type Sandbox struct {
	Template  string `json:"template,omitempty"`
	VCPUs     int    `json:"vcpus,omitempty"`
	MemoryMiB int    `json:"memory_mib,omitempty"`
}

// Volume is a tenant volume the run's sandbox mounts at Path.
type Volume struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Step is one command of the run, run by /bin/sh -c in /workspace.
type Step struct {
	Name string `json:"name"`
	Run  string `json:"run"`
	// Env names tenant secrets the step sees, as placeholders the egress
	// gateway swaps for their values: never the values themselves.
	Env             []string `json:"env,omitempty"`
	TimeoutSeconds  int      `json:"timeout_seconds,omitempty"`
	ContinueOnError bool     `json:"continue_on_error,omitempty"`
}

// Notify says where results go. Every secret is a tenant secret NAME: its
// value is looked up when a message is sent.
type Notify struct {
	// On lists the outcomes that notify: success, failure, cancelled,
	// timed_out. Empty means every outcome.
	On       []string  `json:"on,omitempty"`
	GitHub   *GitHub   `json:"github,omitempty"`
	Slack    *Slack    `json:"slack,omitempty"`
	Jira     *Jira     `json:"jira,omitempty"`
	Webhooks []Webhook `json:"webhooks,omitempty"`
}

// GitHub reports a run back to the repository it came from: a commit
// status on its commit (pending when it starts, then its outcome, whatever
// On says) and a comment on its pull request (when On allows). TokenSecret
// names a tenant secret scoped to the GitHub API host. Status and Comment
// default to true.
type GitHub struct {
	TokenSecret string `json:"token_secret"`
	Status      *bool  `json:"status,omitempty"`
	Comment     *bool  `json:"comment,omitempty"`
}

// Statuses reports whether commit statuses are posted.
func (g GitHub) Statuses() bool { return g.Status == nil || *g.Status }

// Comments reports whether pull request comments are posted.
func (g GitHub) Comments() bool { return g.Comment == nil || *g.Comment }

// Slack is an incoming webhook (the secret holds its URL) or a bot token
// with a channel.
type Slack struct {
	WebhookURLSecret string `json:"webhook_url_secret,omitempty"`
	BotTokenSecret   string `json:"bot_token_secret,omitempty"`
	Channel          string `json:"channel,omitempty"`
}

// Jira is a Jira Cloud site reached with an API token (basic auth as
// Email).
type Jira struct {
	Site            string `json:"site"`
	Email           string `json:"email"`
	TokenSecret     string `json:"token_secret"`
	Project         string `json:"project"`
	CreateOnFailure bool   `json:"create_on_failure,omitempty"`
}

// Webhook is an outgoing Standard Webhooks endpoint; Secret names the
// tenant secret holding its whsec_ signing key.
type Webhook struct {
	URL    string `json:"url"`
	Secret string `json:"secret"`
}

// DefaultTimeoutSeconds bounds a run whose definition names no timeout.
const DefaultTimeoutSeconds = 3600

// Timeout is the run's wall-clock bound in seconds.
func (d Definition) Timeout() int {
	if d.TimeoutSeconds > 0 {
		return d.TimeoutSeconds
	}
	return DefaultTimeoutSeconds
}

// SecretNames lists every tenant secret the definition names, once each,
// in the order they first appear (for checks and the audit: names only).
func (d Definition) SecretNames() []string {
	var out []string
	add := func(n string) {
		if n == "" {
			return
		}
		for _, x := range out {
			if x == n {
				return
			}
		}
		out = append(out, n)
	}
	for _, s := range d.Steps {
		for _, e := range s.Env {
			add(e)
		}
	}
	if g := d.Notify.GitHub; g != nil {
		add(g.TokenSecret)
	}
	if s := d.Notify.Slack; s != nil {
		add(s.WebhookURLSecret)
		add(s.BotTokenSecret)
	}
	if j := d.Notify.Jira; j != nil {
		add(j.TokenSecret)
	}
	for _, w := range d.Notify.Webhooks {
		add(w.Secret)
	}
	return out
}

// Checkouts reports whether runs clone their repository first.
func (d Definition) Checkouts() bool { return d.Checkout == nil || *d.Checkout }

// HasManual reports whether the workflow may be started by hand.
func (d Definition) HasManual() bool {
	for _, t := range d.Triggers {
		if t.Event == EventManual {
			return true
		}
	}
	return false
}

// secretNameRE is a tenant secret name (tenants/secrets.CheckName).
var secretNameRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]{0,63}$`)
