package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/handlers/github"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestWorkflowTrustBrowser: in headless Chromium, the run page of a fork's
// pull request says it was skipped (no Re-run), or that it ran untrusted;
// Re-run of a deleted workflow's run comes back to the run saying why.
// No VM is needed: nothing of this runs in a sandbox that matters (the
// untrusted run fails creating its sandbox, there are no VMs here).
func TestWorkflowTrustBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "ada@example.com", tenants.RoleAdmin)
	ctx := context.Background()
	const secret = "hook-secret-of-acme"
	sys := audit.Actor{Kind: audit.ActorSystem, Name: "test"}
	if _, err := env.Secrets.Create(ctx, sys, acme.ID, secrets.NewSecret{Name: "GITHUB_HOOK", Value: secret, Hosts: []string{github.SecretHost}}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Workflows.SetGitHubSecret(ctx, sys, acme.ID, "GITHUB_HOOK"); err != nil {
		t.Fatal(err)
	}
	forksOK := strings.Replace(strings.Replace(apiWorkflow, "api-tests", "forks-ok", 1), "steps:", "allow_forks: true\nsteps:", 1)
	for _, src := range []string{apiWorkflow, forksOK} {
		if _, err := env.Workflows.Save(ctx, sys, acme.ID, []byte(src), nil); err != nil {
			t.Fatal(err)
		}
	}
	payload := []byte(`{"action":"opened","number":4,"pull_request":{"title":"Fix typo",` +
		`"head":{"ref":"patch-1","sha":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","repo":{"id":2,"full_name":"mallory/app","fork":true}},` +
		`"base":{"ref":"main","repo":{"id":1,"full_name":"acme/app","fork":false}}},` +
		`"repository":{"id":1,"full_name":"acme/app","fork":false},"sender":{"login":"mallory"}}`)
	req, _ := http.NewRequest(http.MethodPost, env.URL+"/hooks/github/acme-corp", bytes.NewReader(payload))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "pull_request")
	req.Header.Set("X-GitHub-Delivery", "fork-delivery")
	req.Header.Set("X-Hub-Signature-256", github.Sign([]byte(secret), payload))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var a github.Answer
	err = json.NewDecoder(resp.Body).Decode(&a)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusAccepted || len(a.Runs) != 1 || len(a.Skipped) != 1 {
		t.Fatalf("Got(fork delivery) = %d %+v, %v; want 202 with a run and a skipped run", resp.StatusCode, a, err)
	}
	css := webtest.CSS
	b.Login(t, env.URL+"/runs", "ada@example.com", `main h1`)

	b.Do(t, "open the skipped run", chromedp.Navigate(env.URL+"/runs/"+a.Skipped[0]), chromedp.WaitVisible(css(`#run-trust`)))
	if got, want := b.Text(t, `#run-trust`), "Skipped: fork pull request from mallory/app (allow_forks not set). Nothing ran."; got != want {
		t.Errorf("Got(trust note of the skipped run) = %q; want %q", got, want)
	}
	if got := b.Text(t, `#run-state`); got != "skipped" {
		t.Errorf("Got(state of the skipped run) = %q; want skipped", got)
	}
	if n, err := chromedp.Run(b.Ctx, chromedp.Evaluate[int](`document.querySelectorAll("#run-rerun").length`)); err != nil || n != 0 {
		t.Errorf("Got(Re-run buttons on the skipped run) = %d, %v; want none", n, err)
	}
	b.Screenshot(t, artifacts, "workflow-run-skipped-fork.png")

	b.Do(t, "open the untrusted run", chromedp.Navigate(env.URL+"/runs/"+a.Runs[0]), chromedp.WaitVisible(css(`#run-trust`)))
	want := "Untrusted trigger: fork pull request from mallory/app (allow_forks): no secrets and no checkout token."
	if got := b.Text(t, `#run-trust`); got != want {
		t.Errorf("Got(trust note of the untrusted run) = %q; want %q", got, want)
	}
	b.Screenshot(t, artifacts, "workflow-run-untrusted-fork.png")

	b.Do(t, "open the history", chromedp.Navigate(env.URL+"/runs"), chromedp.WaitVisible(css(`tr[data-run="`+a.Runs[0]+`"]`)))
	if got := b.Text(t, `tr[data-run="`+a.Runs[0]+`"] td[data-label="Trigger"] .pill`); got != "untrusted" {
		t.Errorf("Got(mark of the untrusted run in the history) = %q; want untrusted", got)
	}
	if got := b.Text(t, `tr[data-run="`+a.Skipped[0]+`"] td[data-label="Status"]`); got != "skipped" {
		t.Errorf("Got(state of the skipped run in the history) = %q; want skipped", got)
	}
	b.Screenshot(t, artifacts, "runs-untrusted-fork.png")

	if err := env.Workflows.Delete(ctx, sys, acme.ID, "forks-ok"); err != nil {
		t.Fatal(err)
	}
	b.Do(t, "re-run the deleted workflow's run",
		chromedp.Navigate(env.URL+"/runs/"+a.Runs[0]),
		chromedp.WaitVisible(css(`#run-rerun`)),
		chromedp.Click(css(`#run-rerun`)),
		chromedp.WaitVisible(css(`.flash-error`)))
	if got := b.Text(t, `.flash-error`); !strings.Contains(got, "Not re-run: workflow forks-ok was deleted: its runs cannot be re-run") {
		t.Errorf("Got(flash after Re-run) = %q; want it to say the workflow was deleted", got)
	}
	b.Screenshot(t, artifacts, "workflow-rerun-deleted.png")
	for _, p := range b.Problems() {
		t.Errorf("Got(console problem) = %s; want none", p)
	}
}
