package github_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/handlers/github"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/notify"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

var admin = audit.Actor{Kind: audit.ActorUser, ID: "u1", Name: "Ada Admin"}

const hookSecret = "It's a Secret to Everybody"

const prWorkflow = `name: pr-tests
triggers:
  - event: pull_request
    actions: [opened, synchronize]
  - event: issue_comment
    command: /stockade run
repositories: [octo-org/*]
steps:
  - name: test
    run: make test
`

const pushWorkflow = `name: main-push
triggers:
  - event: push
    branches: [main]
steps:
  - name: build
    run: make
`

// helloWorld is the repository of the deliveries, as GitHub describes it.
var helloWorld = map[string]any{"id": 1296269, "name": "hello-world", "full_name": "octo-org/hello-world", "private": false, "fork": false}

// prPayload is a pull_request delivery in GitHub's documented shape
// (trimmed to a realistic subset of its fields), from a branch of the
// repository itself.
func prPayload(action string, number int) []byte {
	return prPayloadFrom(action, number, helloWorld)
}

// prPayloadFrom is prPayload with head.repo set to head (nil: null, a
// deleted fork).
func prPayloadFrom(action string, number int, head map[string]any) []byte {
	var headRepo any
	if head != nil {
		headRepo = head
	}
	b, _ := json.Marshal(map[string]any{
		"action": action,
		"number": number,
		"pull_request": map[string]any{
			"url": "https://api.github.com/repos/octo-org/hello-world/pulls/1", "id": 1, "number": number, "state": "open",
			"title": "ENG-42 Amazing new feature", "user": map[string]any{"login": "octocat", "id": 1},
			"head": map[string]any{"label": "octocat:new-topic", "ref": "new-topic", "sha": "6dcb09b5b57875f334f61aebed695e2e4193db5e", "repo": headRepo},
			"base": map[string]any{"label": "octo-org:main", "ref": "main", "sha": "9049f1265b7d61be4a8904a9a27120d2064dab3b", "repo": helloWorld},
		},
		"repository": helloWorld,
		"sender":     map[string]any{"login": "octocat", "id": 1, "type": "User"},
	})
	return b
}

type env struct {
	name    string
	db      *gorm.DB
	srv     *httptest.Server
	rs      *runs.Store
	wf      *workflow.Store
	started *starter
	a, b    tenants.Tenant
}

// starter records the runs the hook starts (the engine's Start).
type starter struct {
	mu  sync.Mutex
	ids []string
}

func (s *starter) Start(r runs.Run) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = append(s.ids, r.ID)
	return nil
}

func (s *starter) started(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.ids, id)
}

func envs(t *testing.T) []env {
	t.Helper()
	ctx := context.Background()
	var out []env
	for _, d := range dbtest.Databases(t) {
		ts := tenants.NewStore(d.DB, nil)
		a, err := ts.CreateTenant(ctx, admin, "hooks-a", "A")
		if err != nil {
			t.Fatal(err)
		}
		b, err := ts.CreateTenant(ctx, admin, "hooks-b", "B")
		if err != nil {
			t.Fatal(err)
		}
		root := make([]byte, 32)
		rand.Read(root)
		ss, err := secrets.New(d.DB, root, secrets.Config{})
		if err != nil {
			t.Fatal(err)
		}
		wf, err := workflow.NewStore(d.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		// A: configured, with two workflows. B: a workflow but no secret.
		if _, err := ss.Create(ctx, admin, a.ID, secrets.NewSecret{Name: "GITHUB_HOOK", Value: hookSecret, Hosts: []string{github.SecretHost}}); err != nil {
			t.Fatal(err)
		}
		if _, err := wf.SetGitHubSecret(ctx, admin, a.ID, "GITHUB_HOOK"); err != nil {
			t.Fatal(err)
		}
		for _, src := range []string{prWorkflow, pushWorkflow} {
			if _, err := wf.Save(ctx, admin, a.ID, []byte(src), nil); err != nil {
				t.Fatal(err)
			}
			if _, err := wf.Save(ctx, admin, b.ID, []byte(src), nil); err != nil {
				t.Fatal(err)
			}
		}
		rs := runs.NewStore(d.DB, nil)
		st := &starter{}
		g := &github.Receiver{Tenants: ts, Workflows: wf, Secrets: notify.HostScoped(ss), Runs: rs, Starter: st, MaxBody: 64 << 10}
		srv := httptest.NewServer(g.Handler())
		t.Cleanup(srv.Close)
		out = append(out, env{name: d.Name, db: d.DB, srv: srv, rs: rs, wf: wf, started: st, a: a, b: b})
	}
	return out
}

func post(t *testing.T, url, event, delivery, sig string, body []byte) (int, github.Answer) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/abc")
	if event != "" {
		req.Header.Set("X-GitHub-Event", event)
	}
	if delivery != "" {
		req.Header.Set("X-GitHub-Delivery", delivery)
	}
	if sig != "" {
		req.Header.Set("X-Hub-Signature-256", sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a github.Answer
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("answer %q is not JSON: %v", raw, err)
	}
	return resp.StatusCode, a
}

func TestGitHubDeliveries(t *testing.T) {
	ctx := context.Background()
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			urlA, urlB := e.srv.URL+"/hooks/github/hooks-a", e.srv.URL+"/hooks/github/hooks-b"
			opened := prPayload("opened", 7)
			good := github.Sign([]byte(hookSecret), opened)
			wrongKey := github.Sign([]byte("another secret"), opened)
			flipped := []byte(good)
			if flipped[len(flipped)-1] == '0' {
				flipped[len(flipped)-1] = '1'
			} else {
				flipped[len(flipped)-1] = '0'
			}
			before := dbtest.Count(t, e.db)
			refused := []struct {
				name   string
				url    string
				sig    string
				body   []byte
				status int
			}{
				{"no signature", urlA, "", opened, 401},
				{"wrong key", urlA, wrongKey, opened, 401},
				{"flipped digit", urlA, string(flipped), opened, 401},
				{"sha1 style", urlA, "sha1=" + strings.TrimPrefix(good, "sha256="), opened, 401},
				{"signature of another body", urlA, good, prPayload("opened", 8), 401},
				// No slug enumeration: an unknown tenant is refused like a bad signature.
				{"unknown tenant", e.srv.URL + "/hooks/github/nobody", good, opened, 401},
				{"tenant without a secret", urlB, good, opened, 401},
				{"too large", urlA, good, bytes.Repeat([]byte("x"), 70<<10), 413},
				{"too large, unknown tenant", e.srv.URL + "/hooks/github/nobody", good, bytes.Repeat([]byte("x"), 70<<10), 413},
			}
			for _, tt := range refused {
				t.Run(tt.name, func(t *testing.T) {
					if code, a := post(t, tt.url, "pull_request", "d-refused", tt.sig, tt.body); code != tt.status {
						t.Errorf("POST = %d %+v; want %d", code, a, tt.status)
					}
				})
			}
			if ok, diff := dbtest.Equal(before, dbtest.Count(t, e.db)); !ok {
				t.Errorf("refused deliveries wrote %s; want nothing", diff)
			}

			// Ping: answered, nothing recorded.
			ping := []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)
			if code, a := post(t, urlA, "ping", "d-ping", github.Sign([]byte(hookSecret), ping), ping); code != 200 || a.Status != "pong" {
				t.Errorf("ping = %d %+v; want 200 pong", code, a)
			}

			// A good delivery starts the matching workflow only; a repeat starts nothing.
			code, a := post(t, urlA, "pull_request", "d-1", good, opened)
			if code != http.StatusAccepted || a.Status != "accepted" || len(a.Runs) != 1 {
				t.Fatalf("delivery = %d %+v; want 202 with one run", code, a)
			}
			r, steps, err := e.rs.Get(ctx, e.a.ID, a.Runs[0])
			if err != nil || r.Workflow != "pr-tests" || r.State != runs.StateQueued || r.Repository != "octo-org/hello-world" ||
				r.SHA != "6dcb09b5b57875f334f61aebed695e2e4193db5e" || r.PRNumber != 7 || r.Ref != "new-topic" || r.Sender != "octocat" ||
				r.DeliveryID != "d-1" || len(steps) != 1 {
				t.Errorf("run = %+v, steps %d, %v; want a queued pr-tests run of the pull request", r, len(steps), err)
			}
			for range 2 {
				if code, a := post(t, urlA, "pull_request", "d-1", good, opened); code != 200 || a.Status != "duplicate" {
					t.Errorf("repeat = %d %+v; want 200 duplicate", code, a)
				}
			}
			if l, _ := e.rs.List(ctx, e.a.ID, runs.Filter{}); len(l) != 1 {
				t.Errorf("runs after repeats = %d; want 1", len(l))
			}
			// B's hook url with A's secret is still refused, and B has no runs.
			if l, _ := e.rs.List(ctx, e.b.ID, runs.Filter{}); len(l) != 0 {
				t.Errorf("runs of B = %d; want 0", len(l))
			}

			more := []struct {
				name, event, delivery string
				body                  []byte
				status                int
				workflow              string
			}{
				{"closed: no workflow", "pull_request", "d-2", prPayload("closed", 7), 200, ""},
				{"push to main", "push", "d-3", mustJSON(map[string]any{"ref": "refs/heads/main", "after": "abc123",
					"repository": map[string]any{"full_name": "octo-org/hello-world"}, "sender": map[string]any{"login": "octocat"}}), 202, "main-push"},
				{"push to a tag", "push", "d-4", mustJSON(map[string]any{"ref": "refs/tags/v1", "after": "abc123",
					"repository": map[string]any{"full_name": "octo-org/hello-world"}}), 200, ""},
				{"comment with the command on a PR", "issue_comment", "d-5", mustJSON(map[string]any{"action": "created",
					"issue":      map[string]any{"number": 7, "pull_request": map[string]any{"url": "https://api.github.com/repos/octo-org/hello-world/pulls/7"}},
					"comment":    map[string]any{"body": "/stockade run please", "user": map[string]any{"login": "hubot"}, "author_association": "MEMBER"},
					"repository": map[string]any{"full_name": "octo-org/hello-world"}, "sender": map[string]any{"login": "hubot"}}), 202, "pr-tests"},
				{"repository outside the filter", "pull_request", "d-6", bytes.Replace(opened, []byte(`"full_name":"octo-org/hello-world"`), []byte(`"full_name":"other/x"`), 1), 200, ""},
				{"an event no workflow uses", "star", "d-7", []byte(`{"action":"created"}`), 200, ""},
				{"not JSON", "pull_request", "d-8", []byte(`{"action":`), 400, ""},
			}
			for _, tt := range more {
				t.Run(tt.name, func(t *testing.T) {
					code, a := post(t, urlA, tt.event, tt.delivery, github.Sign([]byte(hookSecret), tt.body), tt.body)
					if code != tt.status {
						t.Fatalf("POST = %d %+v; want %d", code, a, tt.status)
					}
					if tt.workflow == "" {
						if len(a.Runs) != 0 {
							t.Errorf("runs = %v; want none", a.Runs)
						}
						return
					}
					if len(a.Runs) != 1 {
						t.Fatalf("runs = %v; want one", a.Runs)
					}
					r, _, err := e.rs.Get(ctx, e.a.ID, a.Runs[0])
					if err != nil || r.Workflow != tt.workflow {
						t.Errorf("run = %+v, %v; want workflow %s", r, err, tt.workflow)
					}
					if tt.event == "issue_comment" && (r.PRNumber != 7 || r.Ref != "refs/pull/7/head") {
						t.Errorf("comment run = %+v; want PR 7 at refs/pull/7/head", r)
					}
				})
			}
			var n int64
			e.db.Table("github_deliveries").Where("tenant_id = ?", e.a.ID).Count(&n)
			if n != 7 { // d-1..d-7; the malformed one is not recorded
				t.Errorf("recorded deliveries = %d; want 7", n)
			}
		})
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestVerify(t *testing.T) {
	// GitHub's documented example: secret "It's a Secret to Everybody",
	// payload "Hello, World!".
	want := "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if got := github.Sign([]byte(hookSecret), []byte("Hello, World!")); got != want {
		t.Errorf("Sign(example) = %s; want %s", got, want)
	}
	tests := []struct {
		header string
		want   bool
	}{
		{want, true},
		{strings.ToUpper(want[:7]) + want[7:], false},
		{want[:len(want)-2], false},
		{"sha256=zz", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := github.Verify([]byte(hookSecret), tt.header, []byte("Hello, World!")); got != tt.want {
			t.Errorf("Verify(%q) = %v; want %v", tt.header, got, tt.want)
		}
	}
}

// forkWorkflow runs fork pull requests (untrusted) and takes comments from
// members and one login.
const forkWorkflow = `name: fork-tests
triggers:
  - event: pull_request
  - event: issue_comment
    command: /stockade test
allow_forks: true
comment_authors: [MEMBER, Hubot]
repositories: [octo-org/hello-world]
steps:
  - name: test
    run: make test
notify:
  github: {token_secret: GITHUB_TOKEN}
`

// commentPayload is an issue_comment "created" delivery on pull request 7.
func commentPayload(body, login, association string, id int) []byte {
	return mustJSON(map[string]any{"action": "created",
		"issue":      map[string]any{"number": 7, "pull_request": map[string]any{"url": "https://api.github.com/repos/octo-org/hello-world/pulls/7"}},
		"comment":    map[string]any{"id": id, "body": body, "user": map[string]any{"login": login, "id": id}, "author_association": association},
		"repository": helloWorld, "sender": map[string]any{"login": login}})
}

// TestGitHubUntrustedTriggers is the attack: a pull request from a fork, or
// a "/stockade run" comment by a stranger, must not run the workflow with
// the tenant's secrets and checkout token. By default they run nothing (a
// skipped run says why); a workflow with allow_forks runs a fork's pull
// request untrusted; comment_authors names who may comment.
func TestGitHubUntrustedTriggers(t *testing.T) {
	ctx := context.Background()
	fork := map[string]any{"id": 99, "name": "hello-world", "full_name": "mallory/hello-world", "private": false, "fork": true}
	forkNamedAlike := map[string]any{"id": 1296269, "name": "hello-world", "full_name": "octo-org/hello-world", "fork": true}
	otherRepo := map[string]any{"id": 98, "name": "hello-world", "full_name": "mallory/hello-world", "fork": false}
	type want struct {
		workflow, state, trust, reason string
	}
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			if _, err := e.wf.Save(ctx, admin, e.a.ID, []byte(forkWorkflow), nil); err != nil {
				t.Fatal(err)
			}
			url := e.srv.URL + "/hooks/github/hooks-a"
			tests := []struct {
				name   string
				event  string
				body   []byte
				status int
				answer string
				want   []want
			}{
				{"fork pull request", "pull_request", prPayloadFrom("opened", 8, fork), 202, "accepted", []want{
					{"fork-tests", "queued", "untrusted", "fork pull request from mallory/hello-world (allow_forks)"},
					{"pr-tests", "skipped", "skipped", "fork pull request from mallory/hello-world (allow_forks not set)"}}},
				{"head repository is a fork of the same name", "pull_request", prPayloadFrom("opened", 9, forkNamedAlike), 202, "accepted", []want{
					{"fork-tests", "queued", "untrusted", "fork pull request from octo-org/hello-world (allow_forks)"},
					{"pr-tests", "skipped", "skipped", "fork pull request from octo-org/hello-world (allow_forks not set)"}}},
				{"head repository is another repository", "pull_request", prPayloadFrom("synchronize", 10, otherRepo), 202, "accepted", []want{
					{"fork-tests", "queued", "untrusted", "fork pull request from mallory/hello-world (allow_forks)"},
					{"pr-tests", "skipped", "skipped", "fork pull request from mallory/hello-world (allow_forks not set)"}}},
				{"head repository deleted", "pull_request", prPayloadFrom("opened", 11, nil), 202, "accepted", []want{
					{"fork-tests", "queued", "untrusted", "fork pull request from a deleted repository (allow_forks)"},
					{"pr-tests", "skipped", "skipped", "fork pull request from a deleted repository (allow_forks not set)"}}},
				{"branch of the repository", "pull_request", prPayload("opened", 12), 202, "accepted", []want{
					{"fork-tests", "queued", "trusted", "pull request from a branch of octo-org/hello-world"},
					{"pr-tests", "queued", "trusted", "pull request from a branch of octo-org/hello-world"}}},
				{"comment by NONE", "issue_comment", commentPayload("/stockade run", "mallory", "NONE", 1), 200, "skipped", []want{
					{"pr-tests", "skipped", "skipped", "comment by mallory (NONE): not in comment_authors"}}},
				{"comment by CONTRIBUTOR", "issue_comment", commentPayload("/stockade run", "mallory", "CONTRIBUTOR", 2), 200, "skipped", []want{
					{"pr-tests", "skipped", "skipped", "comment by mallory (CONTRIBUTOR): not in comment_authors"}}},
				{"comment by FIRST_TIME_CONTRIBUTOR", "issue_comment", commentPayload("/stockade run", "mallory", "FIRST_TIME_CONTRIBUTOR", 3), 200, "skipped", []want{
					{"pr-tests", "skipped", "skipped", "comment by mallory (FIRST_TIME_CONTRIBUTOR): not in comment_authors"}}},
				{"comment without an association", "issue_comment", commentPayload("/stockade run", "mallory", "", 4), 200, "skipped", []want{
					{"pr-tests", "skipped", "skipped", "comment by mallory (NONE): not in comment_authors"}}},
				{"comment by COLLABORATOR (default authors)", "issue_comment", commentPayload("/stockade run", "octocat", "COLLABORATOR", 5), 202, "accepted", []want{
					{"pr-tests", "queued", "trusted", "comment by octocat (COLLABORATOR)"}}},
				{"comment by OWNER, not in comment_authors", "issue_comment", commentPayload("/stockade test", "octocat", "OWNER", 6), 200, "skipped", []want{
					{"fork-tests", "skipped", "skipped", "comment by octocat (OWNER): not in comment_authors"}}},
				{"comment by a listed login", "issue_comment", commentPayload("/stockade test", "hubot", "NONE", 7), 202, "accepted", []want{
					{"fork-tests", "queued", "trusted", "comment by hubot (NONE)"}}},
			}
			for i, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					code, a := post(t, url, tt.event, fmt.Sprintf("trust-%d", i), github.Sign([]byte(hookSecret), tt.body), tt.body)
					if code != tt.status || a.Status != tt.answer {
						t.Fatalf("Got(POST) = %d %+v; want %d %s", code, a, tt.status, tt.answer)
					}
					var got []want
					for _, id := range append(append([]string(nil), a.Runs...), a.Skipped...) {
						r, steps, err := e.rs.Get(ctx, e.a.ID, id)
						if err != nil {
							t.Fatal(err)
						}
						got = append(got, want{r.Workflow, string(r.State), r.Trust, r.TrustReason})
						if r.State == runs.StateSkipped {
							if e.started.started(id) || r.EndedAt == nil || r.StateReason != r.TrustReason {
								t.Errorf("Got(skipped run %s) started=%v ended=%v reason %q; want never started, ended, saying why", id, e.started.started(id), r.EndedAt, r.StateReason)
							}
							for _, st := range steps {
								if st.State != runs.StepSkipped {
									t.Errorf("Got(step %q of a skipped run) = %s; want skipped", st.Name, st.State)
								}
							}
						} else if !e.started.started(id) {
							t.Errorf("Got(run %s started) = false; want true", id)
						}
					}
					slices.SortFunc(got, func(x, y want) int { return strings.Compare(x.workflow, y.workflow) })
					if !slices.Equal(got, tt.want) {
						t.Errorf("Got(runs) = %+v; want %+v", got, tt.want)
					}
				})
			}
		})
	}
}

// TestGitHubReplayedBody: a captured delivery, validly signed, sent again
// under a new X-GitHub-Delivery id starts nothing.
func TestGitHubReplayedBody(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			url := e.srv.URL + "/hooks/github/hooks-a"
			body := prPayload("opened", 21)
			sig := github.Sign([]byte(hookSecret), body)
			if code, a := post(t, url, "pull_request", "first", sig, body); code != http.StatusAccepted || len(a.Runs) != 1 {
				t.Fatalf("Got(POST) = %d %+v; want 202 with one run", code, a)
			}
			before := dbtest.Count(t, e.db)
			for _, id := range []string{"second", "third"} {
				code, a := post(t, url, "pull_request", id, sig, body)
				if code != http.StatusOK || a.Status != "duplicate" || len(a.Runs) != 0 {
					t.Errorf("Got(POST the same body as delivery %s) = %d %+v; want 200 duplicate, no run", id, code, a)
				}
			}
			if ok, diff := dbtest.Equal(before, dbtest.Count(t, e.db)); !ok {
				t.Errorf("replayed bodies wrote %s; want nothing", diff)
			}
			// Another body is another delivery.
			other := prPayload("opened", 22)
			if code, a := post(t, url, "pull_request", "fourth", github.Sign([]byte(hookSecret), other), other); code != http.StatusAccepted {
				t.Errorf("Got(POST another body) = %d %+v; want 202", code, a)
			}
		})
	}
}
