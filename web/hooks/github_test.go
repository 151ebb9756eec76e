package hooks_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/notify"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/tenants/workflow"
	"github.com/stockade-dev/stockade/web/hooks"
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

// prPayload is a pull_request delivery in GitHub's documented shape
// (trimmed to a realistic subset of its fields).
func prPayload(action string, number int) []byte {
	b, _ := json.Marshal(map[string]any{
		"action": action,
		"number": number,
		"pull_request": map[string]any{
			"url": "https://api.github.com/repos/octo-org/hello-world/pulls/1", "id": 1, "number": number, "state": "open",
			"title": "ENG-42 Amazing new feature", "user": map[string]any{"login": "octocat", "id": 1},
			"head": map[string]any{"label": "octocat:new-topic", "ref": "new-topic", "sha": "6dcb09b5b57875f334f61aebed695e2e4193db5e"},
			"base": map[string]any{"label": "octo-org:main", "ref": "main", "sha": "9049f1265b7d61be4a8904a9a27120d2064dab3b"},
		},
		"repository": map[string]any{"id": 1296269, "name": "hello-world", "full_name": "octo-org/hello-world", "private": false},
		"sender":     map[string]any{"login": "octocat", "id": 1, "type": "User"},
	})
	return b
}

type env struct {
	name string
	db   *gorm.DB
	srv  *httptest.Server
	rs   *runs.Store
	a, b tenants.Tenant
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
		if _, err := ss.Create(ctx, admin, a.ID, secrets.NewSecret{Name: "GITHUB_HOOK", Value: hookSecret, Hosts: []string{hooks.SecretHost}}); err != nil {
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
		g := &hooks.GitHub{Tenants: ts, Workflows: wf, Secrets: notify.HostScoped(ss), Runs: rs, MaxBody: 64 << 10}
		srv := httptest.NewServer(g.Handler())
		t.Cleanup(srv.Close)
		out = append(out, env{name: d.Name, db: d.DB, srv: srv, rs: rs, a: a, b: b})
	}
	return out
}

func post(t *testing.T, url, event, delivery, sig string, body []byte) (int, hooks.Answer) {
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
	var a hooks.Answer
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
			good := hooks.Sign([]byte(hookSecret), opened)
			wrongKey := hooks.Sign([]byte("another secret"), opened)
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
				{"unknown tenant", e.srv.URL + "/hooks/github/nobody", good, opened, 404},
				{"tenant without a secret", urlB, good, opened, 401},
				{"too large", urlA, good, bytes.Repeat([]byte("x"), 70<<10), 413},
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
			if code, a := post(t, urlA, "ping", "d-ping", hooks.Sign([]byte(hookSecret), ping), ping); code != 200 || a.Status != "pong" {
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
					"comment":    map[string]any{"body": "/stockade run please"},
					"repository": map[string]any{"full_name": "octo-org/hello-world"}, "sender": map[string]any{"login": "hubot"}}), 202, "pr-tests"},
				{"repository outside the filter", "pull_request", "d-6", bytes.Replace(opened, []byte(`"full_name":"octo-org/hello-world"`), []byte(`"full_name":"other/x"`), 1), 200, ""},
				{"an event no workflow uses", "star", "d-7", []byte(`{"action":"created"}`), 200, ""},
				{"not JSON", "pull_request", "d-8", []byte(`{"action":`), 400, ""},
			}
			for _, tt := range more {
				t.Run(tt.name, func(t *testing.T) {
					code, a := post(t, urlA, tt.event, tt.delivery, hooks.Sign([]byte(hookSecret), tt.body), tt.body)
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
	if got := hooks.Sign([]byte(hookSecret), []byte("Hello, World!")); got != want {
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
		if got := hooks.Verify([]byte(hookSecret), tt.header, []byte("Hello, World!")); got != tt.want {
			t.Errorf("Verify(%q) = %v; want %v", tt.header, got, tt.want)
		}
	}
}
