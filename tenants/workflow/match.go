package workflow

import (
	"path"
	"strings"
)

// Event is what a trigger is matched against: a GitHub delivery reduced to
// the fields workflows filter on, or a manual start.
type Event struct {
	Name   string // push, pull_request, issue_comment, manual
	Action string // opened, synchronize, labeled, created, ...
	// Repository is "owner/name".
	Repository string
	// Branch is the pushed branch (push) or the base branch (pull_request).
	Branch string
	// Label is the label a "labeled" action added.
	Label string
	// Comment is an issue comment's body.
	Comment string
	// OnPullRequest says an issue_comment was made on a pull request.
	OnPullRequest bool
}

// Matches reports whether e starts the workflow: one of its triggers
// accepts it and its repository passes the filter.
func (d Definition) Matches(e Event) bool {
	if e.Name != EventManual && !d.repositoryAllowed(e.Repository) {
		return false
	}
	for _, t := range d.Triggers {
		if t.matches(e) {
			return true
		}
	}
	return false
}

func (d Definition) repositoryAllowed(repo string) bool {
	if len(d.Repositories) == 0 {
		return true
	}
	repo = strings.ToLower(repo)
	for _, p := range d.Repositories {
		// GitHub names are case-insensitive.
		if ok, _ := path.Match(strings.ToLower(p), repo); ok {
			return true
		}
	}
	return false
}

// defaultActions are the pull_request actions of a trigger that names none.
var defaultActions = []string{"opened", "synchronize"}

func (t Trigger) matches(e Event) bool {
	if t.Event != e.Name {
		return false
	}
	switch e.Name {
	case EventManual:
		return true
	case EventPush:
		return branchMatches(t.Branches, e.Branch)
	case EventPullRequest:
		actions := t.Actions
		if len(actions) == 0 {
			actions = defaultActions
		}
		if !contains(actions, e.Action) || !branchMatches(t.Branches, e.Branch) {
			return false
		}
		if e.Action == "labeled" && len(t.Labels) > 0 && !contains(t.Labels, e.Label) {
			return false
		}
		return true
	case EventIssueComment:
		// Only new comments: an edit must not start the same work again.
		return e.Action == "created" && CommandMatches(t.Command, e.Comment)
	}
	return false
}

// branchMatches: no patterns means any branch; patterns are path.Match
// globs ("release/*").
func branchMatches(patterns []string, branch string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, _ := path.Match(p, branch); ok {
			return true
		}
	}
	return false
}

// CommandMatches reports whether comment gives command: the comment's
// first line, split in words, starts with the command's words (case and
// spacing aside), so "/stockade run --fast" gives "/stockade run".
func CommandMatches(command, comment string) bool {
	line, _, _ := strings.Cut(strings.TrimSpace(comment), "\n")
	got := strings.Fields(strings.ToLower(line))
	want := strings.Fields(strings.ToLower(command))
	if len(want) == 0 || len(got) < len(want) {
		return false
	}
	for i := range want {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
