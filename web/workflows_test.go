package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/handlers/github"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/web/webtest"
)

// recordRun saves workflow name in the tenant (by is the author) and
// records a queued manual run of it, returning the run's id.
func recordRun(t *testing.T, env *webtest.Env, tenantID, name, by string) string {
	t.Helper()
	ctx := context.Background()
	actor := audit.Actor{Kind: audit.ActorUser, ID: by, Name: by}
	src := fmt.Sprintf("name: %s\ndescription: by %s\ntriggers:\n  - event: manual\nsteps:\n  - name: test\n    run: make test\n", name, by)
	v, err := env.Workflows.Save(ctx, actor, tenantID, []byte(src), nil)
	if err != nil {
		t.Fatalf("save workflow %s: %v", name, err)
	}
	r, err := env.Runs.Store().Create(ctx, actor, tenantID, runs.NewRun{Version: v, Trigger: runs.Trigger{Kind: runs.TriggerManual}})
	if err != nil {
		t.Fatalf("create run of %s: %v", name, err)
	}
	return r.ID
}

// runSnapshot reads a run and its steps as stored.
func runSnapshot(t *testing.T, env *webtest.Env, id string) any {
	t.Helper()
	row := map[string]any{}
	if err := env.DB.Table("workflow_runs").Where("id = ?", id).Take(&row).Error; err != nil {
		t.Fatalf("read run %s: %v", id, err)
	}
	var steps []map[string]any
	env.DB.Table("workflow_run_steps").Where("run_id = ?", id).Order("idx").Find(&steps)
	return struct {
		Run   map[string]any
		Steps []map[string]any
	}{row, steps}
}

const apiWorkflow = `name: api-tests
triggers:
  - event: manual
  - event: pull_request
steps:
  - name: test
    run: make test
artifacts: [report.xml]
`

func TestWorkflowAPI(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	tn := env.Tenant(t, "wf-api")
	admin := env.WithToken(env.Token(t, tn, tenants.RoleAdmin))
	dev := env.WithToken(env.Token(t, tn, tenants.RoleDeveloper))

	put := func(c *webtest.Client, name, src, ctype string) (int, string) {
		s, body, _ := c.Request(t, http.MethodPut, "/api/v1/workflows/"+name, ctype, strings.NewReader(src))
		return s, body
	}
	// A validation error names the field and its YAML line; nothing is saved.
	bad := strings.Replace(apiWorkflow, "run: make test", "ru: make test", 1)
	s, body := put(admin, "api-tests", bad, "application/yaml")
	if s != http.StatusUnprocessableEntity || !strings.Contains(body, `"field":"/steps/0/ru"`) || !strings.Contains(body, "line 6") ||
		!strings.Contains(body, `"field":"/steps/0/run"`) {
		t.Fatalf("Got(PUT invalid) = %d %s; want 422 naming /steps/0/ru and /steps/0/run at line 6", s, body)
	}
	if s, body := put(admin, "other-name", apiWorkflow, "application/yaml"); s != http.StatusUnprocessableEntity || !strings.Contains(body, "mismatch") {
		t.Errorf("Got(PUT under another name) = %d %s; want 422 mismatch", s, body)
	}
	if s, body := put(admin, "api-tests", apiWorkflow, "application/xml"); s != http.StatusBadRequest {
		t.Errorf("Got(PUT as xml) = %d %s; want 400", s, body)
	}
	if s, _ := put(dev, "api-tests", apiWorkflow, "application/yaml"); s != http.StatusForbidden {
		t.Errorf("Got(PUT by a developer) = %d; want 403", s)
	}
	s, body = put(admin, "api-tests", apiWorkflow, "application/yaml")
	var wf struct {
		Name    string `json:"name"`
		Version int    `json:"version"`
		Source  string `json:"source"`
	}
	if err := json.Unmarshal([]byte(body), &wf); s != http.StatusOK || err != nil || wf.Version != 1 || wf.Source != apiWorkflow {
		t.Fatalf("Got(PUT) = %d %s; want version 1 with its source", s, body)
	}
	if s, body := put(admin, "api-tests", apiWorkflow, "application/yaml"); s != http.StatusUnprocessableEntity || !strings.Contains(body, "unchanged") {
		t.Errorf("Got(PUT same) = %d %s; want 422 unchanged", s, body)
	}
	if s, body, _ := dev.Request(t, http.MethodGet, "/api/v1/workflows/api-tests", "", nil); s != http.StatusOK || !strings.Contains(body, `"version":1`) {
		t.Errorf("Got(GET workflow as developer) = %d %s; want 200 version 1", s, body)
	}

	// A manual run: no VMs here, so it fails creating its sandbox, and says so.
	var run struct {
		ID     string `json:"id"`
		Number int    `json:"number"`
		State  string `json:"state"`
	}
	if s, body := dev.JSON(t, http.MethodPost, "/api/v1/workflows/api-tests/runs", map[string]string{"ref": "main"}, &run); s != http.StatusCreated || run.Number != 1 {
		t.Fatalf("Got(POST run) = %d %s; want 201 run 1", s, body)
	}
	var got struct {
		State       string `json:"state"`
		StateReason string `json:"state_reason"`
		Ref         string `json:"ref"`
		Steps       []struct {
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"steps"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s, body := dev.JSON(t, http.MethodGet, "/api/v1/runs/"+run.ID, nil, &got); s != http.StatusOK {
			t.Fatalf("Got(GET run) = %d %s; want 200", s, body)
		}
		if got.State == "failed" || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got.State != "failed" || !strings.Contains(got.StateReason, "create sandbox") || got.Ref != "main" || len(got.Steps) != 1 || got.Steps[0].State != "skipped" {
		t.Errorf("Got(run) = %+v; want failed creating its sandbox, ref main, its step skipped", got)
	}
	if s, body, hdr := dev.Request(t, http.MethodGet, "/api/v1/runs/"+run.ID+"/log", "", nil); s != http.StatusOK ||
		!strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") || !strings.Contains(body, "==> step 1: test (skipped)") {
		t.Errorf("Got(GET log) = %d %s %q; want the stored steps as text", s, hdr.Get("Content-Type"), body)
	}
	if s, body := dev.JSON(t, http.MethodPost, "/api/v1/runs/"+run.ID+"/cancel", nil, nil); s != http.StatusConflict {
		t.Errorf("Got(cancel an ended run) = %d %s; want 409", s, body)
	}
	var again struct {
		RerunOf string `json:"rerun_of"`
		Number  int    `json:"number"`
	}
	if s, body := dev.JSON(t, http.MethodPost, "/api/v1/runs/"+run.ID+"/rerun", nil, &again); s != http.StatusCreated || again.RerunOf != run.ID || again.Number != 2 {
		t.Errorf("Got(rerun) = %d %s; want 201 run 2 re-running run 1", s, body)
	}
	var list struct {
		Runs []struct {
			Number int `json:"number"`
		} `json:"runs"`
	}
	if s, body := dev.JSON(t, http.MethodGet, "/api/v1/runs?workflow=api-tests&limit=1", nil, &list); s != http.StatusOK || len(list.Runs) != 1 || list.Runs[0].Number != 2 {
		t.Errorf("Got(list runs, limit 1) = %d %s; want run 2 only", s, body)
	}
	if s, _ := dev.JSON(t, http.MethodGet, "/api/v1/runs?state=nope", nil, nil); s != http.StatusUnprocessableEntity {
		t.Errorf("Got(list runs, bad state) = %d; want 422", s)
	}
	// A workflow without a manual trigger cannot be started by hand.
	noManual := strings.Replace(strings.Replace(apiWorkflow, "  - event: manual\n", "", 1), "api-tests", "pr-only", 1)
	if s, body := put(admin, "pr-only", noManual, "application/yaml"); s != http.StatusOK {
		t.Fatalf("Got(PUT pr-only) = %d %s", s, body)
	}
	if s, body := dev.JSON(t, http.MethodPost, "/api/v1/workflows/pr-only/runs", nil, nil); s != http.StatusUnprocessableEntity || !strings.Contains(body, "manual") {
		t.Errorf("Got(POST run of pr-only) = %d %s; want 422 naming the manual trigger", s, body)
	}
	if s, _, _ := admin.Request(t, http.MethodDelete, "/api/v1/workflows/pr-only", "", nil); s != http.StatusNoContent {
		t.Errorf("Got(DELETE) = %d; want 204", s)
	}
	if s, _, _ := admin.Request(t, http.MethodGet, "/api/v1/workflows/pr-only", "", nil); s != http.StatusNotFound {
		t.Errorf("Got(GET deleted) = %d; want 404", s)
	}
}

func TestGitHubHookThroughTheApp(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	tn := env.Tenant(t, "wf-hook")
	admin := env.WithToken(env.Token(t, tn, tenants.RoleAdmin))
	const secret = "hook-secret-of-wf-hook"
	if _, err := env.Secrets.Create(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, tn.ID,
		secrets.NewSecret{Name: "GITHUB_HOOK", Value: secret, Hosts: []string{github.SecretHost}}); err != nil {
		t.Fatal(err)
	}
	if s, body := admin.JSON(t, http.MethodPut, "/api/v1/workflow-settings", map[string]string{"github_secret_name": "GITHUB_HOOK"}, nil); s != http.StatusOK {
		t.Fatalf("Got(PUT settings) = %d %s; want 200", s, body)
	}
	if s, body, _ := admin.Request(t, http.MethodPut, "/api/v1/workflows/api-tests", "application/yaml", strings.NewReader(apiWorkflow)); s != http.StatusOK {
		t.Fatalf("Got(PUT workflow) = %d %s", s, body)
	}
	payload := []byte(`{"action":"opened","number":3,"pull_request":{"title":"x",` +
		`"head":{"ref":"topic","sha":"aaaaaaa","repo":{"id":1,"full_name":"acme/app","fork":false}},` +
		`"base":{"ref":"main","repo":{"id":1,"full_name":"acme/app","fork":false}}},` +
		`"repository":{"id":1,"full_name":"acme/app","fork":false},"sender":{"login":"octocat"}}`)
	deliver := func(sig, id string) (int, string) {
		// A plain client: no session, no token, no CSRF token, like GitHub.
		req, _ := http.NewRequest(http.MethodPost, env.URL+"/hooks/github/wf-hook", bytes.NewReader(payload))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "pull_request")
		req.Header.Set("X-GitHub-Delivery", id)
		if sig != "" {
			req.Header.Set("X-Hub-Signature-256", sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	before := env.Counts(t)
	if s, body := deliver("sha256=00", "d1"); s != http.StatusUnauthorized {
		t.Errorf("Got(bad signature) = %d %s; want 401", s, body)
	}
	env.Unchanged(t, before)
	good := github.Sign([]byte(secret), payload)
	if s, body := deliver(good, "d1"); s != http.StatusAccepted || !strings.Contains(body, `"accepted"`) {
		t.Fatalf("Got(delivery) = %d %s; want 202 accepted", s, body)
	}
	if s, body := deliver(good, "d1"); s != http.StatusOK || !strings.Contains(body, "duplicate") {
		t.Errorf("Got(repeat) = %d %s; want 200 duplicate", s, body)
	}
	req, _ := http.NewRequest(http.MethodPost, env.URL+"/hooks/github/nobody", bytes.NewReader(payload))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("Got(unknown tenant) = %v, %v; want 401, as a bad signature (TestGitHubUnknownTenant)", resp.StatusCode, err)
	}
	var list struct {
		Runs []struct {
			Trigger  string `json:"trigger"`
			PRNumber int    `json:"pr_number"`
		} `json:"runs"`
	}
	if s, body := admin.JSON(t, http.MethodGet, "/api/v1/runs", nil, &list); s != http.StatusOK || len(list.Runs) != 1 ||
		list.Runs[0].Trigger != "pull_request" || list.Runs[0].PRNumber != 3 {
		t.Errorf("Got(runs) = %d %s; want one pull_request run of PR 3", s, body)
	}
}

// TestUntrustedTriggersThroughTheApp: through the app's webhook route, a
// fork's pull request skips the workflow that does not allow forks and
// runs the one that does untrusted; the API and the run page say which;
// a skipped run and a deleted workflow's run are not re-run; a captured
// body resent with a new delivery id starts nothing.
func TestUntrustedTriggersThroughTheApp(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	tn := env.Tenant(t, "wf-trust")
	admin := env.WithToken(env.Token(t, tn, tenants.RoleAdmin))
	env.Member(t, tn, "dev@wf-trust.test", tenants.RoleDeveloper)
	page := env.Login(t, "dev@wf-trust.test")
	const secret = "hook-secret-of-wf-trust"
	if _, err := env.Secrets.Create(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, tn.ID,
		secrets.NewSecret{Name: "GITHUB_HOOK", Value: secret, Hosts: []string{github.SecretHost}}); err != nil {
		t.Fatal(err)
	}
	if s, body := admin.JSON(t, http.MethodPut, "/api/v1/workflow-settings", map[string]string{"github_secret_name": "GITHUB_HOOK"}, nil); s != http.StatusOK {
		t.Fatalf("Got(PUT settings) = %d %s; want 200", s, body)
	}
	forksOK := strings.Replace(strings.Replace(apiWorkflow, "api-tests", "forks-ok", 1), "steps:", "allow_forks: true\nsteps:", 1)
	for name, src := range map[string]string{"api-tests": apiWorkflow, "forks-ok": forksOK} {
		if s, body, _ := admin.Request(t, http.MethodPut, "/api/v1/workflows/"+name, "application/yaml", strings.NewReader(src)); s != http.StatusOK {
			t.Fatalf("Got(PUT workflow %s) = %d %s", name, s, body)
		}
	}
	payload := []byte(`{"action":"opened","number":4,"pull_request":{"title":"x",` +
		`"head":{"ref":"main","sha":"bbbbbbb","repo":{"id":2,"full_name":"mallory/app","fork":true}},` +
		`"base":{"ref":"main","repo":{"id":1,"full_name":"acme/app","fork":false}}},` +
		`"repository":{"id":1,"full_name":"acme/app","fork":false},"sender":{"login":"mallory"}}`)
	deliver := func(id string) (int, github.Answer) {
		req, _ := http.NewRequest(http.MethodPost, env.URL+"/hooks/github/wf-trust", bytes.NewReader(payload))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "pull_request")
		req.Header.Set("X-GitHub-Delivery", id)
		req.Header.Set("X-Hub-Signature-256", github.Sign([]byte(secret), payload))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a github.Answer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, a
	}
	s, a := deliver("fork-1")
	if s != http.StatusAccepted || len(a.Runs) != 1 || len(a.Skipped) != 1 {
		t.Fatalf("Got(fork delivery) = %d %+v; want 202, one run and one skipped", s, a)
	}
	untrustedID, skippedID := a.Runs[0], a.Skipped[0]
	env.Settled(t) // the run just started writes its own rows (outbox) as it goes
	before := env.Counts(t)
	if s, a := deliver("fork-2"); s != http.StatusOK || a.Status != "duplicate" {
		t.Errorf("Got(same body, new delivery id) = %d %+v; want 200 duplicate", s, a)
	}
	env.Unchanged(t, before)

	type runJSON struct {
		Workflow    string `json:"workflow"`
		State       string `json:"state"`
		Trust       string `json:"trust"`
		TrustReason string `json:"trust_reason"`
	}
	wantRuns := map[string]runJSON{
		untrustedID: {"forks-ok", "", "untrusted", "fork pull request from mallory/app (allow_forks)"},
		skippedID:   {"api-tests", "skipped", "skipped", "fork pull request from mallory/app (allow_forks not set)"},
	}
	for id, want := range wantRuns {
		var got runJSON
		if s, body := admin.JSON(t, http.MethodGet, "/api/v1/runs/"+id, nil, &got); s != http.StatusOK {
			t.Fatalf("Got(GET run) = %d %s", s, body)
		}
		if want.State == "" {
			want.State = got.State // the untrusted run executes (and fails: no VMs here)
		}
		if got != want {
			t.Errorf("Got(run %s) = %+v; want %+v", id, got, want)
		}
	}
	pages := []struct {
		id         string
		says       string
		trust      string
		rerunShown bool
	}{
		{untrustedID, "Untrusted trigger: fork pull request from mallory/app (allow_forks): no secrets and no checkout token.", "untrusted", true},
		{skippedID, "Skipped: fork pull request from mallory/app (allow_forks not set). Nothing ran.", "skipped", false},
	}
	for _, p := range pages {
		s, body := page.GetPage(t, "/runs/"+p.id)
		if s != http.StatusOK || !strings.Contains(body, `id="run-trust"`) || !strings.Contains(body, `data-trust="`+p.trust+`"`) || !strings.Contains(body, p.says) {
			t.Errorf("Got(run page %s) = %d without the note %q", p.id, s, p.says)
		}
		if got := strings.Contains(body, `id="run-rerun"`); got != p.rerunShown {
			t.Errorf("Got(Re-run button on the %s run page) = %v; want %v", p.trust, got, p.rerunShown)
		}
	}
	before = env.Counts(t)
	if s, body := admin.JSON(t, http.MethodPost, "/api/v1/runs/"+skippedID+"/rerun", nil, nil); s != http.StatusConflict || !strings.Contains(body, "was skipped") {
		t.Errorf("Got(re-run a skipped run) = %d %s; want 409 saying it was skipped", s, body)
	}
	env.Unchanged(t, before)
	if s, _, _ := admin.Request(t, http.MethodDelete, "/api/v1/workflows/forks-ok", "", nil); s != http.StatusNoContent {
		t.Fatalf("Got(DELETE forks-ok) = %d; want 204", s)
	}
	before = env.Counts(t)
	if s, body := admin.JSON(t, http.MethodPost, "/api/v1/runs/"+untrustedID+"/rerun", nil, nil); s != http.StatusConflict ||
		!strings.Contains(body, "workflow forks-ok was deleted: its runs cannot be re-run") {
		t.Errorf("Got(re-run a deleted workflow's run) = %d %s; want 409 saying the workflow was deleted", s, body)
	}
	// The page's Re-run says so too, and lands back on the run.
	s, _, hdr := page.Post(t, "/runs/"+untrustedID+"/rerun", nil)
	if s != http.StatusSeeOther || hdr.Get("Location") != "/runs/"+untrustedID {
		t.Errorf("Got(page re-run of a deleted workflow's run) = %d to %q; want 303 back to the run", s, hdr.Get("Location"))
	}
	if _, body := page.GetPage(t, "/runs/"+untrustedID); !strings.Contains(body, "Not re-run: workflow forks-ok was deleted") {
		t.Errorf("Got(run page after a refused re-run) lacks the flash saying the workflow was deleted")
	}
	env.Unchanged(t, before)
}
