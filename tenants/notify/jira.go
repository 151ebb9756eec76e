package notify

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// jiraRequest builds a Jira Cloud REST v3 call with basic auth (email and
// the API token from the secret, scoped to the site's host).
func (s *Sender) jiraRequest(ctx context.Context, tenantID string, j workflow.Jira, event, path string, body any) (request, error) {
	site, err := s.checkURL(strings.TrimSuffix(j.Site, "/"))
	if err != nil {
		return request{}, fmt.Errorf("jira: %w", err)
	}
	u := site.JoinPath(path)
	token, err := s.secrets.Value(ctx, tenantID, j.TokenSecret, site.Hostname())
	if err != nil {
		return request{}, fmt.Errorf("jira: secret %s: %w", j.TokenSecret, err)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return request{}, fmt.Errorf("encode jira request: %w", err)
	}
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"}}
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(j.Email+":"+token)))
	return request{tenantID: tenantID, messageID: newMessageID(), kind: KindJira, event: event, target: logTarget(u),
		method: http.MethodPost, url: u.String(), header: h, body: raw}, nil
}

// JiraComment adds doc (an Atlassian Document Format document) as a comment
// on issue key.
func (s *Sender) JiraComment(ctx context.Context, tenantID string, j workflow.Jira, key string, doc map[string]any) (Result, error) {
	if !issueKeyRE.MatchString(key) {
		return Result{}, errdefs.Invalid("key", "issue_key", fmt.Sprintf("%q is not a Jira issue key", key))
	}
	q, err := s.jiraRequest(ctx, tenantID, j, EventRunEnded, "/rest/api/3/issue/"+url.PathEscape(key)+"/comment", map[string]any{"body": doc})
	if err != nil {
		return Result{}, err
	}
	return s.send(ctx, q)
}

// JiraIssueType is the type of issues opened for failed runs.
const JiraIssueType = "Task"

// JiraCreateIssue opens an issue in the project with summary and doc as
// its description, and returns its key.
func (s *Sender) JiraCreateIssue(ctx context.Context, tenantID string, j workflow.Jira, summary string, doc map[string]any) (string, error) {
	q, err := s.jiraRequest(ctx, tenantID, j, EventRunEnded, "/rest/api/3/issue", map[string]any{"fields": map[string]any{
		"project":     map[string]any{"key": j.Project},
		"summary":     summary,
		"issuetype":   map[string]any{"name": JiraIssueType},
		"description": doc,
	}})
	if err != nil {
		return "", err
	}
	res, err := s.send(ctx, q)
	if err != nil {
		return "", err
	}
	var created struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(res.Body, &created); err != nil || created.Key == "" {
		return "", fmt.Errorf("jira: create issue: the answer names no key")
	}
	return created.Key, nil
}
