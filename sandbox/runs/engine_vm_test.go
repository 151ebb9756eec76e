package runs_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/notify"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/tenants/workflow"
	"github.com/stockade-dev/stockade/web/webtest"
)

// The engine runs here on the real sandbox service, on one VM of the local
// libvirtd (TCG): no fake stands in for the sandboxes.

const systemURI = hypervisortest.SystemURI

var bg = context.Background()

type vmEnv struct {
	dir    string
	db     *gorm.DB
	vms    *vmpool.Service
	svc    *sandbox.Service
	wf     *workflow.Store
	engine *runs.Engine
	arts   string
	tenant tenants.Tenant
}

var shared struct {
	once sync.Once
	env  *vmEnv
	skip string
	err  error
}

func need(t *testing.T) *vmEnv {
	t.Helper()
	shared.once.Do(func() { shared.env, shared.skip, shared.err = setupVM() })
	if shared.skip != "" {
		hypervisortest.Unavailable(t, shared.skip)
	}
	if shared.err != nil {
		t.Fatalf("set up the VM environment: %v", shared.err)
	}
	return shared.env
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.env != nil {
		if err := shared.env.teardown(); err != nil {
			fmt.Fprintln(os.Stderr, "teardown:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

func setupVM() (env *vmEnv, skip string, err error) {
	dataDir, skip, err := sandboxtest.PrepareVMs(bg)
	if skip != "" || err != nil {
		return nil, skip, err
	}
	dir, err := os.MkdirTemp("", "runs-test-")
	if err != nil {
		return nil, "", err
	}
	env = &vmEnv{dir: dir, arts: filepath.Join(dir, "artifacts")}
	defer func() {
		if err != nil {
			env.teardown()
			env = nil
		}
	}()
	if env.db, err = tenants.Open(bg, "", dir); err != nil {
		return nil, "", err
	}
	if err = tenants.Migrate(bg, env.db); err != nil {
		return nil, "", err
	}
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
	if env.tenant, err = tenants.NewStore(env.db, nil).CreateTenant(bg, sys, "runs-vm", "Runs"); err != nil {
		return nil, "", err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if env.vms, err = vmpool.New(bg, env.db, vmpool.Config{URIs: []string{systemURI}, DataDir: dataDir, Logger: log, ConnectTimeout: 30 * time.Second}); err != nil {
		return nil, "", err
	}
	sctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	if err = env.vms.Start(sctx); err != nil {
		return nil, "", err
	}
	env.svc = sandbox.New(env.db, env.vms, sandbox.Config{DataDir: dataDir, Logger: log, SyncInterval: 500 * time.Millisecond,
		SampleInterval: time.Second, DefaultTemplate: "busybox"})
	if err = env.svc.Start(sctx); err != nil {
		return nil, "", err
	}
	if _, err = env.vms.SetPool(bg, sys, env.tenant.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, WarmVMs: 1, RecycleAfterHours: 24}); err != nil {
		return nil, "", err
	}
	wctx, cancel := context.WithTimeout(bg, 4*time.Minute)
	defer cancel()
	if _, err = sandboxtest.WaitVM(wctx, env.vms, env.tenant.ID, ""); err != nil {
		return nil, "", err
	}
	if env.wf, err = workflow.NewStore(env.db, nil); err != nil {
		return nil, "", err
	}
	env.engine = runs.NewEngine(runs.NewStore(env.db, nil), env.wf, env.svc, runs.Config{ArtifactDir: env.arts, Logger: log, Grace: 5 * time.Second,
		Costs: runs.LedgerCosts(usage.NewStore(env.db, nil))})
	return env, "", nil
}

func (e *vmEnv) teardown() error {
	var errs []error
	install := ""
	if e.db != nil {
		install, _ = tenants.NewStore(e.db, nil).InstallationID(bg)
	}
	if e.engine != nil {
		cctx, cancel := context.WithTimeout(bg, time.Minute)
		errs = append(errs, e.engine.Close(cctx))
		cancel()
	}
	if e.svc != nil {
		e.svc.Close()
	}
	if e.vms != nil {
		e.vms.Close()
	}
	if install != "" {
		cctx, cancel := context.WithTimeout(bg, 2*time.Minute)
		defer cancel()
		if _, err := hypervisortest.DestroyInstallation(cctx, systemURI, install); err != nil {
			errs = append(errs, err)
		}
	}
	if e.db != nil {
		if sqlDB, err := e.db.DB(); err == nil {
			sqlDB.Close()
		}
	}
	os.RemoveAll(e.dir)
	return errors.Join(errs...)
}

var admin = audit.Actor{Kind: audit.ActorUser, ID: "u1", Name: "Ada Admin"}

// create saves src as a workflow and records a manual run of it.
func (e *vmEnv) create(t *testing.T, src string) runs.Run {
	t.Helper()
	v, err := e.wf.Save(bg, admin, e.tenant.ID, []byte(src), nil)
	var fe *errdefs.FieldError
	if errors.As(err, &fe) && fe.Rule == "unchanged" { // -count=N runs the same table again
		name := strings.Fields(strings.SplitN(src, "\n", 2)[0])[1]
		v, err = e.wf.Current(bg, e.tenant.ID, name)
	}
	if err != nil {
		t.Fatalf("save workflow: %v", err)
	}
	r, err := e.engine.Store().Create(bg, admin, e.tenant.ID, runs.NewRun{Version: v, Trigger: runs.Trigger{Kind: runs.TriggerManual, Ref: "main"}})
	if err != nil {
		t.Fatalf("create run: %v", err)
	}
	return r
}

// gone checks the run's sandbox was destroyed.
func (e *vmEnv) gone(t *testing.T, r runs.Run) {
	t.Helper()
	if r.SandboxID == "" {
		t.Fatalf("run %s has no sandbox", r.ID)
	}
	st, err := e.svc.Get(bg, e.tenant.ID, r.SandboxID)
	if err != nil {
		t.Fatalf("Get(sandbox %s) = %v", r.SandboxID, err)
	}
	if !st.Sandbox.State.Ended() {
		t.Errorf("sandbox %s of run %s is %s after the run; want it destroyed", r.SandboxID, r.ID, st.Sandbox.State)
	}
}

func TestEngineOnVMs(t *testing.T) {
	e := need(t)
	tests := []struct {
		name      string
		src       string
		state     runs.State
		reason    string   // substring of the run's reason
		steps     []string // step states
		codes     []int    // exit codes, -1 for none
		output    []string // substring of each step's output
		artifacts map[string]string
	}{
		{"succeeds with output and artifacts", `name: ok
triggers: [{event: manual}]
steps:
  - name: write
    run: echo "hello from $STOCKADE_WORKFLOW at $STOCKADE_REF"; printf 'report' > out.txt
  - name: read
    run: cat out.txt; echo oops >&2
artifacts: [out.txt, missing.txt]
`, runs.StateSucceeded, "", []string{"succeeded", "succeeded"}, []int{0, 0}, []string{"hello from ok at main", "report&&oops"},
			map[string]string{"out.txt": "", "missing.txt": "not found"}},
		{"a failing step stops the run", `name: fails
triggers: [{event: manual}]
steps:
  - name: boom
    run: echo before; exit 3
  - name: never
    run: echo never
`, runs.StateFailed, `step "boom": exit code 3`, []string{"failed", "skipped"}, []int{3, -1}, []string{"before", ""}, nil},
		{"continue_on_error goes on", `name: goes-on
triggers: [{event: manual}]
steps:
  - name: boom
    run: exit 2
    continue_on_error: true
  - name: after
    run: echo after
`, runs.StateSucceeded, "", []string{"failed", "succeeded"}, []int{2, 0}, []string{"", "after"}, nil},
		{"timeout", `name: slow
triggers: [{event: manual}]
timeout_seconds: 4
steps:
  - name: sleep
    run: sleep 60
`, runs.StateTimedOut, "timeout", []string{"failed"}, []int{-1}, []string{""}, nil},
		{"a secret that is not there", `name: needs-secret
triggers: [{event: manual}]
steps:
  - name: s
    run: echo $NOPE
    env: [NOPE]
`, runs.StateFailed, "NOPE", []string{"skipped"}, []int{-1}, []string{""}, nil},
		// The workflow's one repository is checked out first, with its
		// GitHub token: missing, the run fails before any step, saying so.
		{"a checkout token that is not there", `name: checkout-no-token
triggers: [{event: manual}]
repositories: [acme/app]
steps:
  - name: s
    run: echo never
notify:
  github: {token_secret: NO_GH_TOKEN}
`, runs.StateFailed, "checkout acme/app: secret NO_GH_TOKEN is not available to sandboxes", []string{"skipped"}, []int{-1}, []string{""}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.create(t, tt.src)
			ctx, cancel := context.WithTimeout(bg, 3*time.Minute)
			defer cancel()
			got, err := e.engine.Run(ctx, r)
			if err != nil {
				t.Fatalf("Run() = %v", err)
			}
			if got.State != tt.state || !strings.Contains(got.StateReason, tt.reason) {
				t.Errorf("Run() state = %s (%q); want %s (%q)", got.State, got.StateReason, tt.state, tt.reason)
			}
			stored, steps, err := e.engine.Store().Get(bg, e.tenant.ID, r.ID)
			if err != nil || stored.State != tt.state || stored.EndedAt == nil || stored.StartedAt == nil {
				t.Fatalf("stored run = %+v, %v; want %s with start and end", stored, err, tt.state)
			}
			for i, st := range steps {
				code := -1
				if st.ExitCode != nil {
					code = *st.ExitCode
				}
				if st.State != tt.steps[i] || code != tt.codes[i] || !containsAll(st.Output, tt.output[i]) {
					t.Errorf("step %d = %s exit %d output %q; want %s exit %d with %q", i, st.State, code, st.Output, tt.steps[i], tt.codes[i], tt.output[i])
				}
			}
			for _, a := range stored.Artifacts() {
				want, ok := tt.artifacts[a.Path]
				if !ok || a.Error != want {
					t.Errorf("artifact %+v; want error %q", a, want)
				}
				if a.Error == "" {
					kept, err := os.ReadFile(e.engine.ArtifactPath(stored, 0, a.Path))
					if err != nil || string(kept) != "report" || a.Size != 6 || len(a.SHA256) != 64 {
						t.Errorf("kept artifact = %q, %v (%+v); want report, 6 bytes, a digest", kept, err, a)
					}
				}
			}
			if len(stored.Artifacts()) != len(tt.artifacts) {
				t.Errorf("artifacts = %+v; want %d", stored.Artifacts(), len(tt.artifacts))
			}
			e.gone(t, stored)
			// Priced from the usage ledger: the sandbox held a vCPU and
			// memory for as long as it lived.
			if stored.Cost <= 0 || got.Cost != stored.Cost {
				t.Errorf("cost = %v (returned %v); want > 0 from the ledger, the same stored and returned", stored.Cost, got.Cost)
			}
		})
	}
}

func TestEngineCancelAndLiveLog(t *testing.T) {
	e := need(t)
	r := e.create(t, `name: cancel-me
triggers: [{event: manual}]
steps:
  - name: wait
    run: echo started; sleep 120
`)
	if err := e.engine.Start(r); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	l, ok := e.engine.Log(e.tenant.ID, r.ID)
	if !ok {
		t.Fatalf("Log() = false; want the live log of an executing run")
	}
	if _, ok := e.engine.Log("other-tenant", r.ID); ok {
		t.Errorf("Log(other tenant) = true; want false")
	}
	past, _, sub := l.Subscribe()
	var seen bytes.Buffer
	seen.Write(past)
	deadline := time.After(2 * time.Minute)
	for !strings.Contains(seen.String(), "started") {
		select {
		case chunk, open := <-sub.C:
			if !open {
				t.Fatalf("log ended before the step printed; saw %q", seen.String())
			}
			seen.Write(chunk)
		case <-deadline:
			t.Fatalf("no 'started' in the live log after 2 min; saw %q", seen.String())
		}
	}
	if _, err := e.engine.Cancel(bg, admin, "other-tenant", r.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Cancel(other tenant) = %v; want ErrNotFound", err)
	}
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	got, err := e.engine.Cancel(ctx, admin, e.tenant.ID, r.ID)
	if err != nil || got.State != runs.StateCancelled {
		t.Fatalf("Cancel() = %+v, %v; want cancelled", got, err)
	}
	for range sub.C {
	}
	if !l.Ended() {
		t.Errorf("live log still open after the run ended")
	}
	e.gone(t, got)
	if _, err := e.engine.Cancel(ctx, admin, e.tenant.ID, r.ID); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Cancel(ended) = %v; want ErrConflict", err)
	}
	// Re-run: a new run of the same version and trigger.
	again, err := e.engine.Rerun(ctx, admin, e.tenant.ID, r.ID)
	if err != nil || again.RerunOf != r.ID || again.Number != r.Number+1 || again.Ref != "main" {
		t.Fatalf("Rerun() = %+v, %v; want run %d re-running %s at main", again, err, r.Number+1, r.ID)
	}
	if got, err := e.engine.Cancel(ctx, admin, e.tenant.ID, again.ID); err != nil || got.State != runs.StateCancelled {
		t.Errorf("Cancel(rerun) = %+v, %v; want cancelled", got, err)
	}
}

// hookRecorder is a local server recording what it is sent.
type hookRecorder struct {
	*httptest.Server
	mu   sync.Mutex
	got  []string // "METHOD PATH BODY"
	code int
}

func newRecorder(t *testing.T, code int, answer string) *hookRecorder {
	h := &hookRecorder{code: code}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.got = append(h.got, r.Method+" "+r.URL.Path+" "+string(b))
		h.mu.Unlock()
		w.WriteHeader(h.code)
		io.WriteString(w, answer)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookRecorder) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

// TestEngineNotifies runs a pull request's workflow on a VM and checks what
// GitHub, Slack and a Standard Webhooks endpoint (local servers) are told.
func TestEngineNotifies(t *testing.T) {
	e := need(t)
	github := newRecorder(t, 201, `{"id":1}`)
	slack := newRecorder(t, 200, "ok")
	hook := newRecorder(t, 204, "")
	root := make([]byte, 32)
	rand.Read(root)
	ss, err := secrets.New(e.db, root, secrets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"GH_TOKEN": "ghp_x", "SLACK_URL": slack.URL + "/services/T/B/X", "HOOK_KEY": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"} {
		_ = ss.Revoke(bg, admin, e.tenant.ID, name) // from an earlier -count round
		if _, err := ss.Create(bg, admin, e.tenant.ID, secrets.NewSecret{Name: name, Value: v, Hosts: []string{"127.0.0.1"}}); err != nil {
			t.Fatal(err)
		}
	}
	sender := notify.New(e.db, notify.HostScoped(ss), notify.Config{AllowPrivate: true, GitHubAPI: github.URL, SlackWebhookHost: "127.0.0.1",
		Backoff: []time.Duration{10 * time.Millisecond}})
	eng := runs.NewEngine(runs.NewStore(e.db, nil), e.wf, e.svc, runs.Config{Notifier: runs.NotifyWith(sender, "https://stockade.test")})
	t.Cleanup(func() { eng.Close(bg) })
	v, err := e.wf.Save(bg, admin, e.tenant.ID, []byte(`name: pr-check
triggers: [{event: pull_request}]
checkout: false
steps:
  - name: test
    run: echo testing; exit 1
notify:
  github: {token_secret: GH_TOKEN}
  slack: {webhook_url_secret: SLACK_URL}
  webhooks:
    - url: `+hook.URL+`/stockade
      secret: HOOK_KEY
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	sha := "6dcb09b5b57875f334f61aebed695e2e4193db5e"
	r, err := eng.Store().Create(bg, admin, e.tenant.ID, runs.NewRun{Version: v,
		Trigger: runs.Trigger{Kind: "pull_request", Repository: "acme/app", Ref: "topic", SHA: sha, PRNumber: 9, Sender: "octocat"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 3*time.Minute)
	defer cancel()
	got, err := eng.Run(ctx, r)
	if err != nil || got.State != runs.StateFailed {
		t.Fatalf("Run() = %+v, %v; want failed", got, err)
	}
	e.gone(t, got)
	gh := github.requests()
	if len(gh) != 3 || !strings.HasPrefix(gh[0], "POST /repos/acme/app/statuses/"+sha+` {"state":"pending"`) ||
		!strings.HasPrefix(gh[1], "POST /repos/acme/app/statuses/"+sha+` {"state":"failure"`) ||
		!strings.HasPrefix(gh[2], "POST /repos/acme/app/issues/9/comments ") || !strings.Contains(gh[1], "https://stockade.test/runs/"+r.ID) {
		t.Errorf("GitHub was sent %q; want pending, then failure with the run's link, then a comment on PR 9", gh)
	}
	if s := slack.requests(); len(s) != 1 || !strings.HasPrefix(s[0], "POST /services/T/B/X ") || !strings.Contains(s[0], fmt.Sprintf("pr-check #%d failed on acme/app#9", r.Number)) {
		t.Errorf("Slack was sent %q; want one message about the failed run", s)
	}
	if h := hook.requests(); len(h) != 1 || !strings.Contains(h[0], `"type":"run.ended"`) || !strings.Contains(h[0], `"state":"failed"`) ||
		!strings.Contains(h[0], `"exit_code":1`) {
		t.Errorf("the webhook was sent %q; want one run.ended with the failed step's exit code", h)
	}
}

// TestLiveLogOverHTTP starts a run through the API and follows its log
// (GET /api/v1/runs/:id/log?follow=1): lines arrive while the run is still
// running, and the stream ends with the run.
func TestLiveLogOverHTTP(t *testing.T) {
	e := need(t)
	w := webtest.New(t, webtest.Options{DB: e.db, Sandboxes: e.svc, Workflows: e.wf, Runs: e.engine})
	tok := w.WithToken(w.Token(t, e.tenant, tenants.RoleAdmin))
	src := "name: ticks\ntriggers: [{event: manual}]\nsteps:\n  - name: tick\n    run: for i in 1 2 3; do echo tick $i; sleep 1; done\n"
	if s, body, _ := tok.Request(t, http.MethodPut, "/api/v1/workflows/ticks", "application/yaml", strings.NewReader(src)); s != http.StatusOK &&
		!strings.Contains(body, "unchanged") {
		t.Fatalf("PUT workflow = %d %s", s, body)
	}
	var run struct {
		ID string `json:"id"`
	}
	if s, body := tok.JSON(t, http.MethodPost, "/api/v1/workflows/ticks/runs", nil, &run); s != http.StatusCreated {
		t.Fatalf("POST run = %d %s", s, body)
	}
	req, _ := http.NewRequest(http.MethodGet, w.URL+"/api/v1/runs/"+run.ID+"/log?follow=1", nil)
	req.Header.Set("Authorization", "Bearer "+tok.Bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET log?follow=1 = %v, %v", resp, err)
	}
	defer resp.Body.Close()
	var (
		seen        bytes.Buffer
		stateAtTick string
		buf         = make([]byte, 4096)
	)
	for {
		n, err := resp.Body.Read(buf)
		seen.Write(buf[:n])
		if stateAtTick == "" && strings.Contains(seen.String(), "tick 1") {
			r, _, _ := e.engine.Store().Get(bg, e.tenant.ID, run.ID)
			stateAtTick = string(r.State)
		}
		if err != nil {
			break
		}
	}
	if stateAtTick != string(runs.StateRunning) {
		t.Errorf("run state when 'tick 1' arrived = %q; want running (the log must be live)", stateAtTick)
	}
	if !strings.Contains(seen.String(), "tick 3") || !strings.Contains(seen.String(), "==> succeeded") {
		t.Errorf("followed log = %q; want every tick and the end", seen.String())
	}
	r, _, _ := e.engine.Store().Get(bg, e.tenant.ID, run.ID)
	e.gone(t, r)
}

// containsAll reports whether out holds every "&&"-separated piece of want.
// stdout and stderr are separate pipes, so the order in which a step's two
// streams reach its log is not fixed (a loaded host showed "oops\nreport").
func containsAll(out, want string) bool {
	for _, w := range strings.Split(want, "&&") {
		if !strings.Contains(out, w) {
			return false
		}
	}
	return true
}
