package web_test

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/tenants/workflow"
	"github.com/stockade-dev/stockade/web/webtest"
)

// workflowVMEnv is the web app with the real run engine on the real
// sandbox service, on VMs of the local libvirtd (TCG here). The tenant's
// pool keeps one warm VM, booting while the test uses the editor.
type workflowVMEnv struct {
	web *webtest.Env
	sbx *sandbox.Service
	eng *runs.Engine
}

func newWorkflowVMEnv(t *testing.T, slug, name string) (*workflowVMEnv, tenants.Tenant) {
	t.Helper()
	dataDir := sandboxtest.NeedVMs(t)
	ctx := context.Background()
	db := dbtest.SQLite(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	vms, sbx := sandboxtest.Start(t, db, vmpool.Config{DataDir: dataDir, Logger: log},
		sandbox.Config{SyncInterval: 500 * time.Millisecond, SampleInterval: time.Second, DefaultTemplate: "busybox"})
	wfs, err := workflow.NewStore(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	eng := runs.NewEngine(runs.NewStore(db, nil), wfs, sbx, runs.Config{ArtifactDir: t.TempDir(), Logger: log, Grace: 5 * time.Second,
		Costs: runs.LedgerCosts(usage.NewStore(db, nil))})
	// Before the sandbox service closes: a run still executing ends and
	// destroys its sandbox.
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := eng.Close(cctx); err != nil {
			t.Errorf("close the run engine: %v", err)
		}
	})
	e := &workflowVMEnv{sbx: sbx, eng: eng}
	e.web = webtest.New(t, webtest.Options{DB: db, VMs: vms, Sandboxes: sbx, Workflows: wfs, Runs: eng})
	tn := e.web.TenantNamed(t, slug, name)
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
	if _, err := vms.SetPool(ctx, sys, tn.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, WarmVMs: 1, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	return e, tn
}

// The workflow the admin types first: the step says "rn" for "run", so
// the schema refuses it (an unknown field, and run is missing).
const badWorkflow = `name: live-log
description: prints a line, waits, prints another
triggers:
  - event: manual
sandbox:
  template: busybox
  memory_mib: 128
timeout_seconds: 300
steps:
  - name: slow
    rn: echo first line; sleep 5; echo second line after the delay
artifacts: [report.txt]
`

// The fixed workflow: the second line comes 5 s after the first, so a page
// that shows the first without the second and later both is streaming.
const goodWorkflow = `name: live-log
description: prints a line, waits, prints another
triggers:
  - event: manual
sandbox:
  template: busybox
  memory_mib: 128
timeout_seconds: 300
steps:
  - name: slow
    run: echo first line; sleep 5; echo second line after the delay
  - name: report
    run: echo "report of $STOCKADE_WORKFLOW at $STOCKADE_REF" > report.txt; cat report.txt
artifacts: [report.txt]
`

// TestWorkflowsBrowser: in headless Chromium an admin writes a workflow in
// the editor, sees the schema errors with their lines (and keeps the
// text), fixes and saves it, runs it by hand at a ref, and watches the log
// arrive live on the run page, which then shows the final status, the
// steps' exit codes and the artifact without a reload. The run is real: a
// sandbox on a VM, destroyed at the end. Screenshots go to
// test-artifacts/.
func TestWorkflowsBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	env, acme := newWorkflowVMEnv(t, "acme-corp", "Acme Corporation")
	env.web.Member(t, acme, "ada@example.com", tenants.RoleAdmin)
	css := webtest.CSS
	eval := func(what, expr string) string {
		t.Helper()
		s, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return s
	}
	// waitFor polls expr in the page until it is true.
	waitFor := func(what, expr string, d time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(b.Ctx, d)
		defer cancel()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(0))); err != nil {
			t.Fatalf("%s: %v (the log shows %q)", what, err, eval("read the log", `(document.getElementById("run-log") || {textContent: ""}).textContent`))
		}
	}

	b.Login(t, env.web.URL+"/workflows", "ada@example.com", `#new-workflow`)
	hookURL := eval("webhook URL", `document.getElementById("github-webhook-url").textContent`)
	if want := env.web.URL + "/hooks/github/acme-corp"; hookURL != want {
		t.Errorf("Got(GitHub webhook URL) = %q; want %q", hookURL, want)
	}

	// The admin types the workflow with a mistake and saves.
	b.Do(t, "open the editor of a new workflow",
		chromedp.Click(css(`#new-workflow`)),
		chromedp.WaitVisible(css(`#workflow-source`)),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("workflow-source").value = ""`),
		chromedp.SendKeys(css(`#workflow-source`), badWorkflow),
		chromedp.Click(css(`#workflow-save`)),
		chromedp.WaitVisible(css(`#workflow-errors`)))
	errText := eval("errors", `document.getElementById("workflow-errors").textContent`)
	for _, want := range []string{"line 10, /steps/0", "run"} {
		if !strings.Contains(errText, want) {
			t.Errorf("Got(errors shown) = %q; want it to contain %q", errText, want)
		}
	}
	if kept := eval("editor text", `document.getElementById("workflow-source").value`); kept != badWorkflow {
		t.Errorf("Got(editor text after the failed save) = %q; want what was typed, %q", kept, badWorkflow)
	}
	// The error's line link selects that line in the editor.
	b.Do(t, "follow the error's line", chromedp.Click(css(`#workflow-errors a[data-line]`)))
	if sel := eval("selection", `(t => t.value.slice(t.selectionStart, t.selectionEnd))(document.getElementById("workflow-source"))`); sel != "  - name: slow" {
		t.Errorf("Got(selected line) = %q; want line 10, %q", sel, "  - name: slow")
	}
	b.Screenshot(t, artifacts, "workflow-editor-error.png")

	// Fixed and saved: the editor of version 1.
	b.Do(t, "fix and save",
		chromedp.Evaluate[chromedp.Void](`document.getElementById("workflow-source").value = `+mustJSON(t, goodWorkflow)),
		chromedp.Click(css(`#workflow-save`)),
		chromedp.WaitVisible(css(`#run-now-button`)))
	if flash := eval("flash", `document.querySelector(".flash").textContent`); !strings.Contains(flash, "version 1") {
		t.Errorf("Got(flash after save) = %q; want it to name version 1", flash)
	}

	// Run by hand at a ref, and watch.
	b.Do(t, "run now",
		chromedp.SendKeys(css(`#run-ref`), "main"),
		chromedp.Click(css(`#run-now-button`)),
		chromedp.WaitVisible(css(`#run-log`)),
		chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	runID := eval("run id", `location.pathname.split("/").pop()`)
	// The VM may still be booting: allow for it under TCG.
	waitFor("the first line", `document.getElementById("run-log").textContent.includes("first line")`, 5*time.Minute)
	if got := eval("log", `document.getElementById("run-log").textContent`); strings.Contains(got, "second line after the delay") {
		t.Errorf("Got(log when the first line shows) = %q; want the second line still to come (5 s later)", got)
	}
	b.Screenshot(t, artifacts, "workflow-run-streaming.png")
	waitFor("the second line, live", `document.getElementById("run-log").textContent.includes("second line after the delay")`, time.Minute)
	waitFor("the final status without a reload", `document.getElementById("run-state").textContent === "succeeded"`, 2*time.Minute)
	if reloaded := eval("reload marker", `window.notReloaded === true ? "no" : "yes"`); reloaded != "no" {
		t.Errorf("Got(page reloaded) = %s; want the log and status to arrive in the same page", reloaded)
	}
	logText := eval("log", `document.getElementById("run-log").textContent`)
	for _, want := range []string{"report of live-log at main", "==> succeeded", "==> artifact report.txt"} {
		if !strings.Contains(logText, want) {
			t.Errorf("Got(log) = %q; want it to contain %q", logText, want)
		}
	}
	if codes := eval("exit codes", `[...document.querySelectorAll("#run-steps [data-exit-code]")].map(e => e.textContent).join(",")`); codes != "0,0" {
		t.Errorf("Got(exit codes shown) = %q; want 0,0", codes)
	}
	artURL := eval("artifact link", `(document.querySelector("#run-artifacts a[download]") || {}).getAttribute?.("href") || ""`)
	if artURL != "/runs/"+runID+"/artifacts/0" {
		t.Errorf("Got(artifact link) = %q; want /runs/%s/artifacts/0", artURL, runID)
	}
	body, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`fetch("`+artURL+`").then(r => r.text())`, chromedp.EvalAwaitPromise))
	if err != nil || body != "report of live-log at main\n" {
		t.Errorf("Got(artifact) = %q, %v; want the report the step wrote", body, err)
	}
	if sb := eval("sandbox link", `(document.getElementById("run-sandbox") || {textContent: ""}).textContent`); sb == "" {
		t.Error("Got(sandbox link) = none; want the run's sandbox")
	}
	b.Screenshot(t, artifacts, "workflow-run-live.png")

	// The run's sandbox is gone.
	r, _, err := env.eng.Store().Get(context.Background(), acme.ID, runID)
	if err != nil {
		t.Fatal(err)
	}
	st, err := env.sbx.Get(context.Background(), acme.ID, r.SandboxID)
	if err != nil || !st.Sandbox.State.Ended() {
		t.Errorf("Got(the run's sandbox after the run) = %v, %v; want it destroyed", st.Sandbox.State, err)
	}

	// The history lists it; the workflow list shows its last run.
	b.Do(t, "runs", chromedp.Navigate(env.web.URL+"/runs?workflow=live-log"), chromedp.WaitVisible(css(`tr[data-run="`+runID+`"]`)))
	if row := eval("run row", `document.querySelector('tr[data-run="`+runID+`"]').textContent`); !strings.Contains(row, "succeeded") || !strings.Contains(row, "main") {
		t.Errorf("Got(run row) = %q; want its status and ref", row)
	}
	b.Screenshot(t, artifacts, "runs.png")
	b.Do(t, "workflows", chromedp.Navigate(env.web.URL+"/workflows"), chromedp.WaitVisible(css(`tr[data-workflow="live-log"]`)))
	b.Screenshot(t, artifacts, "workflows.png")
	if last := eval("last run", `document.querySelector('tr[data-workflow="live-log"] [data-last-run]').textContent`); !strings.Contains(last, "succeeded") {
		t.Errorf("Got(last run) = %q; want succeeded", last)
	}

	// Another tenant's admin finds neither the run nor its artifact.
	other := env.web.TenantNamed(t, "globex", "Globex")
	env.web.Member(t, other, "gus@example.com", tenants.RoleAdmin)
	gus := env.web.Login(t, "gus@example.com")
	for _, p := range []string{"/runs/" + runID, artURL, "/runs/" + runID + "/events", "/runs/" + runID + "/summary"} {
		if s, _, _ := gus.Request(t, http.MethodGet, p, "", nil); s != http.StatusNotFound {
			t.Errorf("Got(GET %s as another tenant) = %d; want 404", p, s)
		}
	}
	// The stored log of the ended run streams as one snapshot and its end.
	ada := env.web.Login(t, "ada@example.com")
	s, body, hdr := ada.Request(t, http.MethodGet, "/runs/"+runID+"/events", "", nil)
	if s != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") || !strings.Contains(body, "event: end\ndata: "+mustJSON(t, map[string]string{"reason": "", "state": "succeeded"})) {
		t.Errorf("Got(events of the ended run) = %d %q %q; want a snapshot and the end", s, hdr.Get("Content-Type"), body)
	}

	// The refused save answered 422 on purpose (Chromium logs the status
	// of every failed load); anything else is a broken page.
	for _, p := range b.Problems() {
		if strings.Contains(p, "status of 422") && strings.Contains(p, "/workflows)") {
			continue
		}
		t.Errorf("Got(console) %s; want no errors, exceptions or CSP violations", p)
	}
}
