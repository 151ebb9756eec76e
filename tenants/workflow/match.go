package workflow

import (
	"fmt"
	"path"
	"slices"
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
	// Fork says a pull_request's head is not a branch of Repository: it
	// comes from a fork (or a repository since deleted), HeadRepository.
	Fork           bool
	HeadRepository string
	// Author is an issue comment's author (a GitHub login) and
	// Association their author_association with the repository.
	Author      string
	Association string
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

// Trust levels of a run: what the code it runs is given.
const (
	// TrustTrusted runs get what the workflow names: the secrets the
	// tenant policy grants and the checkout token.
	TrustTrusted = "trusted"
	// TrustUntrusted runs get neither: their code comes from someone the
	// tenant does not vouch for (a fork's pull request).
	TrustUntrusted = "untrusted"
	// TrustSkipped events start nothing: the run is recorded, skipped.
	TrustSkipped = "skipped"
)

// Trust is how a matched event may run, and why.
type Trust struct {
	Level string
	// Reason says who or what the code comes from, e.g. "fork pull
	// request from mallory/app (allow_forks not set)".
	Reason string
}

// Associations are GitHub's author_association values.
var Associations = []string{"OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "MANNEQUIN", "NONE"}

// DefaultCommentAuthors may start a workflow that names no comment_authors:
// the people with write access to the repository (GitHub Actions' own
// line for untrusted triggers).
var DefaultCommentAuthors = []string{"OWNER", "MEMBER", "COLLABORATOR"}

// isAssociationWord: an entry of comment_authors in capitals is an author
// association; anything else is a login.
func isAssociationWord(s string) bool {
	return s != "" && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") == ""
}

// Trust says how e, which the workflow matches, may run. GitHub events
// from people with write access (a push, a pull request from a branch of
// the repository itself, a comment by one of comment_authors) are trusted;
// a fork's pull request runs untrusted when allow_forks says so and is
// skipped otherwise; a comment by anyone else is skipped. Manual runs are
// trusted: the tenant's own members start them.
func (d Definition) Trust(e Event) Trust {
	switch e.Name {
	case EventPullRequest:
		if !e.Fork {
			return Trust{Level: TrustTrusted, Reason: "pull request from a branch of " + e.Repository}
		}
		from := e.HeadRepository
		if from == "" {
			from = "a deleted repository"
		}
		if d.AllowForks {
			return Trust{Level: TrustUntrusted, Reason: fmt.Sprintf("fork pull request from %s (allow_forks)", from)}
		}
		return Trust{Level: TrustSkipped, Reason: fmt.Sprintf("fork pull request from %s (allow_forks not set)", from)}
	case EventIssueComment:
		assoc := e.Association
		if assoc == "" {
			assoc = "NONE"
		}
		who := fmt.Sprintf("%s (%s)", orUnknown(e.Author), assoc)
		if d.commentAuthorAllowed(e.Author, assoc) {
			return Trust{Level: TrustTrusted, Reason: "comment by " + who}
		}
		return Trust{Level: TrustSkipped, Reason: fmt.Sprintf("comment by %s: not in comment_authors", who)}
	case EventPush:
		return Trust{Level: TrustTrusted, Reason: "push to " + e.Repository}
	}
	return Trust{Level: TrustTrusted}
}

func (d Definition) commentAuthorAllowed(login, association string) bool {
	allowed := d.CommentAuthors
	if len(allowed) == 0 {
		allowed = DefaultCommentAuthors
	}
	for _, a := range allowed {
		if isAssociationWord(a) {
			if a == association {
				return true
			}
		} else if login != "" && strings.EqualFold(a, login) {
			// GitHub logins are case-insensitive.
			return true
		}
	}
	return false
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown author"
	}
	return s
}

// hasEvent reports whether one of the triggers is of event.
func (d Definition) hasEvent(event string) bool {
	return slices.ContainsFunc(d.Triggers, func(t Trigger) bool { return t.Event == event })
}
