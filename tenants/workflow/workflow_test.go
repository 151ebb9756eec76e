package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

var admin = audit.Actor{Kind: audit.ActorUser, ID: "u1", Name: "Ada Admin"}

const full = `name: tests
description: run the tests of every pull request
triggers:
  - event: pull_request
    actions: [opened, synchronize, labeled]
    branches: [main, "release/*"]
    labels: [run-agent]
  - event: push
    branches: [main]
  - event: issue_comment
    command: /stockade run
  - event: manual
repositories: [acme/app, "tools/*"]
sandbox:
  template: debian
  vcpus: 1
  memory_mib: 1024
timeout_seconds: 1800
steps:
  - name: clone
    run: git clone "$REPO_URL" .
    env: [GITHUB_TOKEN]
  - name: test
    run: |
      go test ./...
    timeout_seconds: 600
    continue_on_error: true
artifacts: [coverage.out, report/junit.xml]
notify:
  on: [failure]
  slack:
    webhook_url_secret: SLACK_WEBHOOK
  jira:
    site: https://acme.atlassian.net
    email: bot@acme.test
    token_secret: JIRA_TOKEN
    project: ENG
    create_on_failure: true
  webhooks:
    - url: https://hooks.acme.test/stockade
      secret: HOOK_SECRET
`

func parser(t *testing.T) *workflow.Parser {
	t.Helper()
	p, err := workflow.NewParser()
	if err != nil {
		t.Fatalf("NewParser() = %v", err)
	}
	return p
}

func TestParseFull(t *testing.T) {
	d, err := parser(t).Parse([]byte(full))
	if err != nil {
		t.Fatalf("Parse(full) = %v; want nil", err)
	}
	want := workflow.Definition{
		Name: "tests", Description: "run the tests of every pull request",
		Triggers: []workflow.Trigger{
			{Event: "pull_request", Actions: []string{"opened", "synchronize", "labeled"}, Branches: []string{"main", "release/*"}, Labels: []string{"run-agent"}},
			{Event: "push", Branches: []string{"main"}},
			{Event: "issue_comment", Command: "/stockade run"},
			{Event: "manual"},
		},
		Repositories:   []string{"acme/app", "tools/*"},
		Sandbox:        workflow.Sandbox{Template: "debian", VCPUs: 1, MemoryMiB: 1024},
		TimeoutSeconds: 1800,
		Steps: []workflow.Step{
			{Name: "clone", Run: `git clone "$REPO_URL" .`, Env: []string{"GITHUB_TOKEN"}},
			{Name: "test", Run: "go test ./...\n", TimeoutSeconds: 600, ContinueOnError: true},
		},
		Artifacts: []string{"coverage.out", "report/junit.xml"},
		Notify: workflow.Notify{
			On:       []string{"failure"},
			Slack:    &workflow.Slack{WebhookURLSecret: "SLACK_WEBHOOK"},
			Jira:     &workflow.Jira{Site: "https://acme.atlassian.net", Email: "bot@acme.test", TokenSecret: "JIRA_TOKEN", Project: "ENG", CreateOnFailure: true},
			Webhooks: []workflow.Webhook{{URL: "https://hooks.acme.test/stockade", Secret: "HOOK_SECRET"}},
		},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("Parse(full) = %+v; want %+v", d, want)
	}
	if got, want := d.SecretNames(), []string{"GITHUB_TOKEN", "SLACK_WEBHOOK", "JIRA_TOKEN", "HOOK_SECRET"}; !reflect.DeepEqual(got, want) {
		t.Errorf("SecretNames() = %v; want %v", got, want)
	}
}

// fieldLines returns "field@line" for each error, in order.
func fieldLines(t *testing.T, err error) []string {
	t.Helper()
	var errs workflow.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v (%T) is not workflow.Errors", err, err)
	}
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalid) = false; want true", err)
	}
	var out []string
	for _, fe := range errs {
		line := "?"
		if rest, ok := strings.CutPrefix(fe.Detail, "line "); ok {
			line, _, _ = strings.Cut(rest, ":")
		}
		out = append(out, fe.Field+"@"+line)
	}
	return out
}

func TestParseErrorsNameFieldAndLine(t *testing.T) {
	p := parser(t)
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"missing steps", "name: a\ntriggers:\n  - event: manual\n", []string{"/steps@1"}},
		{"bad name and unknown key", "name: Bad Name\ntriggers:\n  - event: manual\nsteps:\n  - name: s\n    run: x\ncolour: blue\n",
			[]string{"/name@1", "/colour@7"}},
		{"unknown event", "name: a\ntriggers:\n  - event: pull\nsteps:\n  - {name: s, run: x}\n", []string{"/triggers/0/event@3"}},
		{"issue_comment without command", "name: a\ntriggers:\n  - event: issue_comment\nsteps:\n  - {name: s, run: x}\n",
			[]string{"/triggers/0/command@3"}},
		{"step missing run, bad secret", "name: a\ntriggers:\n  - event: manual\nsteps:\n  - name: s\n    env: [lower]\n",
			[]string{"/steps/0/run@5", "/steps/0/env/0@6"}},
		{"wrong type", "name: a\ntriggers:\n  - event: manual\ntimeout_seconds: soon\nsteps:\n  - {name: s, run: x}\n",
			[]string{"/timeout_seconds@4"}},
		{"labels on push", "name: a\ntriggers:\n  - event: push\n    labels: [x]\nsteps:\n  - {name: s, run: x}\n",
			[]string{"/triggers/0/labels@4", "/triggers/0/labels@4"}},
		{"duplicate step names", "name: a\ntriggers:\n  - event: manual\nsteps:\n  - {name: s, run: x}\n  - {name: s, run: y}\n",
			[]string{"/steps/1/name@6"}},
		{"artifact climbs out", "name: a\ntriggers:\n  - event: manual\nsteps:\n  - {name: s, run: x}\nartifacts: [../etc/passwd]\n",
			[]string{"/artifacts/0@6"}},
		{"slack without a secret", "name: a\ntriggers:\n  - event: manual\nsteps:\n  - {name: s, run: x}\nnotify:\n  slack: {channel: builds}\n",
			[]string{"/notify/slack@7"}},
		{"duplicate key", "name: a\nname: b\n", []string{"/name@2"}},
		{"alias", "name: &n a\ntriggers:\n  - event: manual\nsteps:\n  - {name: *n, run: x}\n", []string{"/steps/0/name@5"}},
		{"not YAML", "name: [a\n", []string{"/@?"}},
		{"empty", "", []string{"/@1"}},
		{"a list, not a mapping", "- a\n", []string{"/@1"}},
		{"unknown association", trustBase + "comment_authors: [OWNER, MEMBERS]\n", []string{"/comment_authors/1@8"}},
		{"not a login", trustBase + "comment_authors: [\"bad login!\"]\n", []string{"/comment_authors/0@8"}},
		{"empty list", trustBase + "comment_authors: []\n", []string{"/comment_authors@8"}},
		{"allow_forks not a boolean", trustBase + "allow_forks: sometimes\n", []string{"/allow_forks@8"}},
		{"allow_forks without pull_request", "name: a\ntriggers:\n  - event: push\nsteps:\n  - {name: s, run: x}\nallow_forks: true\n",
			[]string{"/allow_forks@6"}},
		{"comment_authors without issue_comment", "name: a\ntriggers:\n  - event: push\nsteps:\n  - {name: s, run: x}\ncomment_authors: [OWNER]\n",
			[]string{"/comment_authors@6"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.Parse([]byte(tt.src))
			if err == nil {
				t.Fatalf("Parse(%q) = nil; want errors %v", tt.src, tt.want)
			}
			if got := fieldLines(t, err); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse(%q) fields = %v; want %v (%v)", tt.src, got, tt.want, err)
			}
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	src := "name: a\n#" + strings.Repeat("x", workflow.MaxSourceBytes) + "\n"
	_, err := parser(t).Parse([]byte(src))
	if got := fieldLines(t, err); !reflect.DeepEqual(got, []string{"/@?"}) {
		t.Errorf("Parse(huge) fields = %v; want [/@?]", got)
	}
}

func TestMatches(t *testing.T) {
	d, err := parser(t).Parse([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	onlyPR, err := parser(t).Parse([]byte("name: pr\ntriggers:\n  - event: pull_request\nsteps:\n  - {name: s, run: x}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		def  workflow.Definition
		e    workflow.Event
		want bool
	}{
		{"pr opened on main", d, workflow.Event{Name: "pull_request", Action: "opened", Repository: "acme/app", Branch: "main"}, true},
		{"pr repository case", d, workflow.Event{Name: "pull_request", Action: "opened", Repository: "ACME/App", Branch: "main"}, true},
		{"pr on release glob", d, workflow.Event{Name: "pull_request", Action: "synchronize", Repository: "tools/x", Branch: "release/1.2"}, true},
		{"pr other branch", d, workflow.Event{Name: "pull_request", Action: "opened", Repository: "acme/app", Branch: "dev"}, false},
		{"pr other repository", d, workflow.Event{Name: "pull_request", Action: "opened", Repository: "acme/other", Branch: "main"}, false},
		{"pr closed", d, workflow.Event{Name: "pull_request", Action: "closed", Repository: "acme/app", Branch: "main"}, false},
		{"pr labeled right label", d, workflow.Event{Name: "pull_request", Action: "labeled", Label: "run-agent", Repository: "acme/app", Branch: "main"}, true},
		{"pr labeled other label", d, workflow.Event{Name: "pull_request", Action: "labeled", Label: "bug", Repository: "acme/app", Branch: "main"}, false},
		{"default actions: opened", onlyPR, workflow.Event{Name: "pull_request", Action: "opened", Repository: "x/y"}, true},
		{"default actions: not labeled", onlyPR, workflow.Event{Name: "pull_request", Action: "labeled", Repository: "x/y"}, false},
		{"push main", d, workflow.Event{Name: "push", Repository: "acme/app", Branch: "main"}, true},
		{"push dev", d, workflow.Event{Name: "push", Repository: "acme/app", Branch: "dev"}, false},
		{"comment command", d, workflow.Event{Name: "issue_comment", Action: "created", Repository: "acme/app", Comment: "  /Stockade   run --fast\nplease"}, true},
		{"comment other command", d, workflow.Event{Name: "issue_comment", Action: "created", Repository: "acme/app", Comment: "/stockade stop"}, false},
		{"comment not first line", d, workflow.Event{Name: "issue_comment", Action: "created", Repository: "acme/app", Comment: "hi\n/stockade run"}, false},
		{"comment edited", d, workflow.Event{Name: "issue_comment", Action: "edited", Repository: "acme/app", Comment: "/stockade run"}, false},
		{"manual", d, workflow.Event{Name: "manual"}, true},
		{"manual not a trigger", onlyPR, workflow.Event{Name: "manual"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.def.Matches(tt.e); got != tt.want {
				t.Errorf("Matches(%+v) = %v; want %v", tt.e, got, tt.want)
			}
		})
	}
}

type env struct {
	name  string
	s     *workflow.Store
	ts    *tenants.Store
	a, b  tenants.Tenant
	db    *gorm.DB
	audit func(t *testing.T, tenantID, typ string) int
}

func envs(t *testing.T) []env {
	t.Helper()
	var out []env
	for _, d := range dbtest.Databases(t) {
		ctx := context.Background()
		ts := tenants.NewStore(d.DB, nil)
		a, err := ts.CreateTenant(ctx, admin, "wf-a", "A")
		if err != nil {
			t.Fatal(err)
		}
		b, err := ts.CreateTenant(ctx, admin, "wf-b", "B")
		if err != nil {
			t.Fatal(err)
		}
		s, err := workflow.NewStore(d.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		db := d.DB
		out = append(out, env{name: d.Name, s: s, ts: ts, a: a, b: b, db: db, audit: func(t *testing.T, tenantID, typ string) int {
			var n int64
			if err := db.Table("audit_events").Where("tenant_id = ? AND type = ?", tenantID, typ).Count(&n).Error; err != nil {
				t.Fatal(err)
			}
			return int(n)
		}})
	}
	return out
}

func TestStore(t *testing.T) {
	ctx := context.Background()
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			v1, err := e.s.Save(ctx, admin, e.a.ID, []byte(full), nil)
			if err != nil {
				t.Fatalf("Save(full) = %v", err)
			}
			if v1.Version != 1 || v1.Name != "tests" || v1.Source != full || v1.AuthorName != admin.Name {
				t.Errorf("Save(full) = %+v; want version 1 of tests by %s", v1, admin.Name)
			}
			// Unchanged source is refused; a stale base conflicts.
			if _, err := e.s.Save(ctx, admin, e.a.ID, []byte(full), nil); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Save(same) = %v; want ErrInvalid", err)
			}
			zero := 0
			changed := strings.Replace(full, "timeout_seconds: 1800", "timeout_seconds: 1700", 1)
			if _, err := e.s.Save(ctx, admin, e.a.ID, []byte(changed), &zero); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("Save(base 0) = %v; want ErrConflict", err)
			}
			one := 1
			v2, err := e.s.Save(ctx, admin, e.a.ID, []byte(changed), &one)
			if err != nil || v2.Version != 2 || v2.Def.TimeoutSeconds != 1700 {
				t.Fatalf("Save(base 1) = %+v, %v; want version 2 with timeout 1700", v2, err)
			}
			// An invalid document writes nothing.
			before := dbtest.Count(t, e.db)
			if _, err := e.s.Save(ctx, admin, e.a.ID, []byte("name: tests\n"), nil); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Save(invalid) = %v; want ErrInvalid", err)
			}
			if ok, diff := dbtest.Equal(before, dbtest.Count(t, e.db)); !ok {
				t.Errorf("Save(invalid) wrote %s; want nothing", diff)
			}

			cur, err := e.s.Current(ctx, e.a.ID, "tests")
			if err != nil || cur.Version != 2 {
				t.Errorf("Current() = %+v, %v; want version 2", cur, err)
			}
			old, err := e.s.Get(ctx, e.a.ID, "tests", 1)
			if err != nil || old.Def.TimeoutSeconds != 1800 {
				t.Errorf("Get(1) = %+v, %v; want timeout 1800", old, err)
			}
			list, err := e.s.List(ctx, e.a.ID)
			if err != nil || len(list) != 1 || list[0].Version != 2 {
				t.Errorf("List() = %+v, %v; want [tests v2]", list, err)
			}
			if got := e.audit(t, e.a.ID, audit.TypeWorkflowSaved); got != 2 {
				t.Errorf("workflow.saved events = %d; want 2", got)
			}

			// Tenant isolation: B sees nothing of A's, and cannot delete it.
			if _, err := e.s.Current(ctx, e.b.ID, "tests"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Current(B, tests) = %v; want ErrNotFound", err)
			}
			if _, err := e.s.Get(ctx, e.b.ID, "tests", 1); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Get(B, tests, 1) = %v; want ErrNotFound", err)
			}
			if _, err := e.s.History(ctx, e.b.ID, "tests"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("History(B, tests) = %v; want ErrNotFound", err)
			}
			if l, err := e.s.List(ctx, e.b.ID); err != nil || len(l) != 0 {
				t.Errorf("List(B) = %v, %v; want none", l, err)
			}
			if err := e.s.Delete(ctx, admin, e.b.ID, "tests"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Delete(B, tests) = %v; want ErrNotFound", err)
			}
			// B may have its own workflow of the same name.
			if v, err := e.s.Save(ctx, admin, e.b.ID, []byte(full), nil); err != nil || v.Version != 1 {
				t.Errorf("Save(B, full) = %+v, %v; want version 1", v, err)
			}
			if _, err := e.s.Save(ctx, admin, "no-such-tenant", []byte(full), nil); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Save(unknown tenant) = %v; want ErrNotFound", err)
			}

			// Delete keeps the history; the name can be saved again.
			if err := e.s.Delete(ctx, admin, e.a.ID, "tests"); err != nil {
				t.Fatalf("Delete() = %v", err)
			}
			if _, err := e.s.Current(ctx, e.a.ID, "tests"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Current(deleted) = %v; want ErrNotFound", err)
			}
			if l, _ := e.s.List(ctx, e.a.ID); len(l) != 0 {
				t.Errorf("List() after delete = %v; want none", l)
			}
			if err := e.s.Delete(ctx, admin, e.a.ID, "tests"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Delete(deleted) = %v; want ErrNotFound", err)
			}
			h, err := e.s.History(ctx, e.a.ID, "tests")
			if err != nil || len(h) != 3 || !h[0].Deleted || h[2].Version != 1 {
				t.Errorf("History() = %+v, %v; want 3 versions, newest the deletion", h, err)
			}
			v4, err := e.s.Save(ctx, admin, e.a.ID, []byte(full), nil)
			if err != nil || v4.Version != 4 {
				t.Errorf("Save(after delete) = %+v, %v; want version 4", v4, err)
			}
			if got := e.audit(t, e.a.ID, audit.TypeWorkflowDeleted); got != 1 {
				t.Errorf("workflow.deleted events = %d; want 1", got)
			}
		})
	}
}

func TestSettings(t *testing.T) {
	ctx := context.Background()
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			if s, err := e.s.Settings(ctx, e.a.ID); err != nil || s.GitHubSecretName != "" {
				t.Errorf("Settings(new) = %+v, %v; want zero", s, err)
			}
			if _, err := e.s.SetGitHubSecret(ctx, admin, e.a.ID, "not a name"); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("SetGitHubSecret(bad) = %v; want ErrInvalid", err)
			}
			for i, name := range []string{"GITHUB_HOOK", "GITHUB_HOOK_2"} {
				if _, err := e.s.SetGitHubSecret(ctx, admin, e.a.ID, name); err != nil {
					t.Fatalf("SetGitHubSecret(%s) = %v", name, err)
				}
				s, err := e.s.Settings(ctx, e.a.ID)
				if err != nil || s.GitHubSecretName != name {
					t.Errorf("Settings() after set %d = %+v, %v; want %s", i, s, err, name)
				}
			}
			if s, _ := e.s.Settings(ctx, e.b.ID); s.GitHubSecretName != "" {
				t.Errorf("Settings(B) = %+v; want zero (A's settings are A's)", s)
			}
			if _, err := e.s.SetGitHubSecret(ctx, admin, "no-such-tenant", "X"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("SetGitHubSecret(unknown tenant) = %v; want ErrNotFound", err)
			}
			if got := e.audit(t, e.a.ID, audit.TypeWorkflowSettingsUpdated); got != 2 {
				t.Errorf("workflow.settings_updated events = %d; want 2", got)
			}
		})
	}
}

func TestListManyVersions(t *testing.T) {
	ctx := context.Background()
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			for i := 0; i < 3; i++ {
				for _, name := range []string{"b-flow", "a-flow"} {
					src := fmt.Sprintf("name: %s\ntriggers:\n  - event: manual\nsteps:\n  - {name: s, run: echo %d}\n", name, i)
					if _, err := e.s.Save(ctx, admin, e.a.ID, []byte(src), nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			l, err := e.s.List(ctx, e.a.ID)
			if err != nil || len(l) != 2 || l[0].Name != "a-flow" || l[0].Version != 3 || l[1].Version != 3 {
				t.Errorf("List() = %+v, %v; want a-flow v3, b-flow v3", l, err)
			}
		})
	}
}

// trustBase is a workflow with pull_request and issue_comment triggers.
const trustBase = "name: a\ntriggers:\n  - event: pull_request\n  - event: issue_comment\n    command: /stockade run\nsteps:\n  - {name: s, run: x}\n"

func TestParseTrustSettings(t *testing.T) {
	d, err := parser(t).Parse([]byte(trustBase + "allow_forks: true\ncomment_authors: [OWNER, MEMBER, octo-cat, \"dependabot[bot]\"]\n"))
	if err != nil {
		t.Fatalf("Parse(allow_forks, comment_authors) = %v; want nil", err)
	}
	if !d.AllowForks || !reflect.DeepEqual(d.CommentAuthors, []string{"OWNER", "MEMBER", "octo-cat", "dependabot[bot]"}) {
		t.Errorf("Parse() = allow_forks %v, comment_authors %v; want true, [OWNER MEMBER octo-cat dependabot[bot]]", d.AllowForks, d.CommentAuthors)
	}
}

func TestTrust(t *testing.T) {
	p := parser(t)
	const base = "name: a\ntriggers:\n  - event: pull_request\n  - event: issue_comment\n    command: /stockade run\n  - event: push\n  - event: manual\nsteps:\n  - {name: s, run: x}\n"
	strict, err := p.Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	open, err := p.Parse([]byte(base + "allow_forks: true\ncomment_authors: [CONTRIBUTOR, Octocat]\n"))
	if err != nil {
		t.Fatal(err)
	}
	pr := workflow.Event{Name: "pull_request", Action: "opened", Repository: "acme/app"}
	fork := pr
	fork.Fork, fork.HeadRepository = true, "mallory/app"
	gone := pr
	gone.Fork = true
	comment := func(login, assoc string) workflow.Event {
		return workflow.Event{Name: "issue_comment", Action: "created", Repository: "acme/app", Comment: "/stockade run", Author: login, Association: assoc}
	}
	tests := []struct {
		name   string
		def    workflow.Definition
		e      workflow.Event
		level  string
		reason string
	}{
		{"branch pull request", strict, pr, workflow.TrustTrusted, "pull request from a branch of acme/app"},
		{"fork, default", strict, fork, workflow.TrustSkipped, "fork pull request from mallory/app (allow_forks not set)"},
		{"fork, allow_forks", open, fork, workflow.TrustUntrusted, "fork pull request from mallory/app (allow_forks)"},
		{"deleted fork", strict, gone, workflow.TrustSkipped, "fork pull request from a deleted repository (allow_forks not set)"},
		{"push", strict, workflow.Event{Name: "push", Repository: "acme/app"}, workflow.TrustTrusted, "push to acme/app"},
		{"manual", strict, workflow.Event{Name: "manual"}, workflow.TrustTrusted, ""},
		{"OWNER by default", strict, comment("ada", "OWNER"), workflow.TrustTrusted, "comment by ada (OWNER)"},
		{"MEMBER by default", strict, comment("ada", "MEMBER"), workflow.TrustTrusted, "comment by ada (MEMBER)"},
		{"COLLABORATOR by default", strict, comment("ada", "COLLABORATOR"), workflow.TrustTrusted, "comment by ada (COLLABORATOR)"},
		{"CONTRIBUTOR by default", strict, comment("bob", "CONTRIBUTOR"), workflow.TrustSkipped, "comment by bob (CONTRIBUTOR): not in comment_authors"},
		{"FIRST_TIME_CONTRIBUTOR by default", strict, comment("bob", "FIRST_TIME_CONTRIBUTOR"), workflow.TrustSkipped, "comment by bob (FIRST_TIME_CONTRIBUTOR): not in comment_authors"},
		{"NONE by default", strict, comment("bob", "NONE"), workflow.TrustSkipped, "comment by bob (NONE): not in comment_authors"},
		{"no association", strict, comment("", ""), workflow.TrustSkipped, "comment by an unknown author (NONE): not in comment_authors"},
		{"listed association", open, comment("bob", "CONTRIBUTOR"), workflow.TrustTrusted, "comment by bob (CONTRIBUTOR)"},
		{"listed login, any case", open, comment("octocat", "NONE"), workflow.TrustTrusted, "comment by octocat (NONE)"},
		{"OWNER not listed", open, comment("ada", "OWNER"), workflow.TrustSkipped, "comment by ada (OWNER): not in comment_authors"},
		{"a login named like an association", open, comment("contributor", "NONE"), workflow.TrustSkipped, "comment by contributor (NONE): not in comment_authors"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.def.Trust(tt.e); got.Level != tt.level || got.Reason != tt.reason {
				t.Errorf("Trust(%+v) = %+v; want {%s %s}", tt.e, got, tt.level, tt.reason)
			}
		})
	}
}
