package runs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/shutdown"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// Sandboxes is what the engine needs of the sandbox service
// (*sandbox.Service).
type Sandboxes interface {
	Create(ctx context.Context, actor audit.Actor, tenantID string, spec sandbox.Spec) (sandbox.Sandbox, error)
	Exec(ctx context.Context, actor audit.Actor, tenantID, id string, req sandbox.ExecRequest, stdout, stderr io.Writer) (sandbox.ExecResult, error)
	ReadFile(ctx context.Context, actor audit.Actor, tenantID, id, path string, open func(size int64) (io.Writer, error)) (sandbox.FileInfo, error)
	Destroy(ctx context.Context, actor audit.Actor, tenantID, id string) (sandbox.Sandbox, error)
}

// Workflows is what the engine needs of the workflow store
// (*workflow.Store).
type Workflows interface {
	Get(ctx context.Context, tenantID, name string, version int) (workflow.Version, error)
	Current(ctx context.Context, tenantID, name string) (workflow.Version, error)
}

// Costs prices what a run's sandbox used, from the usage ledger.
type Costs interface {
	SandboxCost(ctx context.Context, tenantID, sandboxID string) (float64, error)
}

// Notifier tells the outside world a run started (a pending commit status)
// and ended (GitHub, Slack, Jira, webhooks).
type Notifier interface {
	RunStarted(ctx context.Context, def workflow.Definition, r Run) error
	RunEnded(ctx context.Context, def workflow.Definition, r Run, steps []Step) error
}

// Config tunes an Engine. Zero values take the defaults noted.
type Config struct {
	// ArtifactDir is where collected artifacts are kept, under
	// tenant/run/; "" records them (path, size, digest) without keeping
	// the bytes.
	ArtifactDir string
	// MaxOutputBytes bounds the output stored per step (64 KiB).
	MaxOutputBytes int
	// MaxArtifactBytes bounds what one run collects in all (64 MiB).
	MaxArtifactBytes int64
	// LogBytes bounds the live log kept for late subscribers (1 MiB).
	LogBytes int
	// MaxConcurrent bounds the runs executing at once (4); more wait.
	MaxConcurrent int
	// DestroyTimeout bounds destroying a run's sandbox (2 min).
	DestroyTimeout time.Duration
	// Grace is how long a run's sandbox may outlive its timeout, so that
	// the sandbox's own lifetime is only a backstop (1 min).
	Grace time.Duration
	// GitURL is where a run's repository is cloned from, as
	// GitURL/owner/name.git (DefaultGitURL).
	GitURL   string
	Costs    Costs    // nil: cost 0 (LedgerCosts prices from the usage ledger)
	Notifier Notifier // nil: no notifications
	Logger   *slog.Logger

	// Outbox gets run.completed for the tenant's outgoing webhooks, in the
	// transaction ending each run. Nil: none.
	Outbox Outbox

	// ReplicaID is this replica's id (sandbox/replicas), recorded on the
	// runs it executes, and LiveReplicas lists the replicas alive now: with
	// them Recover ends only the runs of replicas that are gone. Both
	// empty with one server: every running run at start-up is this
	// process's predecessor's.
	ReplicaID    string
	LiveReplicas func(ctx context.Context) ([]string, error)
}

func (c *Config) setDefaults() {
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = 64 << 10
	}
	if c.MaxArtifactBytes <= 0 {
		c.MaxArtifactBytes = 64 << 20
	}
	if c.LogBytes <= 0 {
		c.LogBytes = 1 << 20
	}
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = 4
	}
	if c.DestroyTimeout <= 0 {
		c.DestroyTimeout = 2 * time.Minute
	}
	if c.Grace <= 0 {
		c.Grace = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.GitURL == "" {
		c.GitURL = DefaultGitURL
	}
}

// Engine executes runs: one sandbox per run, destroyed at the end.
type Engine struct {
	store *Store
	wf    Workflows
	sbx   Sandboxes
	cfg   Config
	slots chan struct{}

	mu     sync.Mutex
	active map[string]*active // run id -> its execution
	closed bool
	wg     sync.WaitGroup
	// stopBG bounds notifications, which outlive their run's context (a
	// cancelled run is still reported); closed when Close gives up.
	stopBG *shutdown.Signal
}

type active struct {
	tenantID string
	log      *Log
	cancel   context.CancelCauseFunc
	done     chan struct{}
}

// Causes of a run's context ending.
var (
	errCancelled = errors.New("run cancelled")
	errTimedOut  = errors.New("run timed out")
	errShutdown  = errors.New("control plane shutting down")
)

// NewEngine returns an Engine keeping runs in store. A nil sbx (a server
// without sandboxes) fails every run it executes, saying so.
func NewEngine(store *Store, wf Workflows, sbx Sandboxes, cfg Config) *Engine {
	cfg.setDefaults()
	if cfg.Outbox != nil {
		store.outbox = cfg.Outbox
	}
	return &Engine{store: store, wf: wf, sbx: sbx, cfg: cfg, slots: make(chan struct{}, cfg.MaxConcurrent), active: map[string]*active{},
		stopBG: shutdown.New()}
}

// Store is the engine's store.
func (e *Engine) Store() *Store { return e.store }

// Start executes the queued run in the background. Its live log is
// available from Log at once.
func (e *Engine) Start(r Run) error {
	ctx, a, err := e.register(context.Background(), r)
	if err != nil {
		return err
	}
	go func() {
		if _, err := e.execute(ctx, r, a); err != nil {
			e.cfg.Logger.Warn("workflow run", "run", r.ID, "tenant", r.TenantID, "err", err)
		}
	}()
	return nil
}

// Run executes the queued run and returns it ended. ctx ending cancels it.
func (e *Engine) Run(ctx context.Context, r Run) (Run, error) {
	ctx, a, err := e.register(ctx, r)
	if err != nil {
		return Run{}, err
	}
	return e.execute(ctx, r, a)
}

// register makes the run's context (cancelled by Cancel and Close) and its
// live log.
func (e *Engine) register(parent context.Context, r Run) (context.Context, *active, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, nil, fmt.Errorf("start run %s: %w", r.ID, errShutdown)
	}
	if _, ok := e.active[r.ID]; ok {
		return nil, nil, fmt.Errorf("start run %s: %w: it is already executing", r.ID, errdefs.ErrConflict)
	}
	ctx, cancel := context.WithCancelCause(parent)
	a := &active{tenantID: r.TenantID, log: NewLog(e.cfg.LogBytes, 0), done: make(chan struct{}), cancel: cancel}
	e.active[r.ID] = a
	// Counted under the lock that Close takes before waiting: no run
	// starts once Close is waiting. execute says Done.
	e.wg.Add(1)
	return ctx, a, nil
}

// Executing is how many runs execute here now (every tenant's).
func (e *Engine) Executing() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.active)
}

// Log returns the live log of the tenant's executing run; false when it is
// not executing here (ended runs: read the steps' stored output).
func (e *Engine) Log(tenantID, id string) (*Log, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	a, ok := e.active[id]
	if !ok || a.tenantID != tenantID {
		return nil, false
	}
	return a.log, true
}

// Cancel cancels the tenant's run: a queued one ends at once, an executing
// one stops its step, destroys its sandbox and ends cancelled (Cancel waits
// for that, within ctx). An ended run is errdefs.ErrConflict.
func (e *Engine) Cancel(ctx context.Context, actor audit.Actor, tenantID, id string) (Run, error) {
	e.mu.Lock()
	a, ok := e.active[id]
	if ok && a.tenantID == tenantID {
		a.cancel(errCancelled)
	}
	e.mu.Unlock()
	if !ok || a.tenantID != tenantID {
		return e.store.cancelQueued(ctx, actor, tenantID, id)
	}
	select {
	case <-a.done:
	case <-ctx.Done():
		return Run{}, ctx.Err()
	}
	r, _, err := e.store.Get(ctx, tenantID, id)
	if err != nil {
		return Run{}, err
	}
	if r.State == StateCancelled {
		if err := e.store.auditCancel(ctx, actor, r); err != nil {
			return Run{}, err
		}
	}
	return r, nil
}

// Rerun creates a new run of the workflow's current version with the same
// trigger, trusted as far as the first one was, and starts it. A run of a
// deleted workflow is not re-run, nor a skipped one (re-running it would
// run what its trigger was not trusted to run): errdefs.ErrConflict.
func (e *Engine) Rerun(ctx context.Context, actor audit.Actor, tenantID, id string) (Run, error) {
	old, _, err := e.store.Get(ctx, tenantID, id)
	if err != nil {
		return Run{}, err
	}
	if old.State == StateSkipped {
		return Run{}, fmt.Errorf("%w: run #%d of %s was skipped (%s): it cannot be re-run; change the workflow (allow_forks, comment_authors) and trigger it again",
			errdefs.ErrConflict, old.Number, old.Workflow, old.TrustReason)
	}
	v, err := e.wf.Current(ctx, tenantID, old.Workflow)
	if errors.Is(err, errdefs.ErrNotFound) {
		return Run{}, fmt.Errorf("%w: workflow %s was deleted: its runs cannot be re-run (save the workflow again to run it)", errdefs.ErrConflict, old.Workflow)
	}
	if err != nil {
		return Run{}, fmt.Errorf("re-run run %s: %w", id, err)
	}
	t := old.Trigger()
	t.Kind, t.DeliveryID = TriggerRerun, ""
	r, err := e.store.Create(ctx, actor, tenantID, NewRun{Version: v, Trigger: t, RerunOf: old.ID})
	if err != nil {
		return Run{}, err
	}
	return r, e.Start(r)
}

// Manual is where a run started by hand runs: both optional.
type Manual struct {
	// Ref is a git ref (a branch, a tag); at most 255 characters.
	Ref string
	// SHA is a commit id, 7-64 hexadecimal digits.
	SHA string
}

// maxRef bounds Manual.Ref.
const maxRef = 255

// StartManual starts a run of the tenant's workflow name by hand, as actor
// (the page's Run now and POST /api/v1/workflows/:name/runs): the ref and
// SHA are checked (a *errdefs.FieldError naming ref or sha), the
// workflow's current version must have a manual trigger (a FieldError on
// name, rule manual), and the run is recorded, audited
// (workflow_run.created, trusted: the caller may write runs) and started
// in one go. Nothing is written when a check fails.
func (e *Engine) StartManual(ctx context.Context, actor audit.Actor, tenantID, name string, m Manual) (Run, error) {
	m.Ref = strings.TrimSpace(m.Ref)
	if len(m.Ref) > maxRef || strings.ContainsAny(m.Ref, "\x00\n\r") {
		return Run{}, errdefs.Invalid("ref", "ref", fmt.Sprintf("must be a git ref of at most %d characters", maxRef))
	}
	if m.SHA != "" && !isHex(m.SHA, 7, 64) {
		return Run{}, errdefs.Invalid("sha", "sha", "must be a commit id: 7-64 hexadecimal digits")
	}
	v, err := e.wf.Current(ctx, tenantID, name)
	if err != nil {
		return Run{}, err
	}
	if !v.Def.HasManual() {
		return Run{}, errdefs.Invalid("name", "manual", fmt.Sprintf("workflow %s has no manual trigger: add '- event: manual' to its triggers", v.Name))
	}
	r, err := e.store.Create(ctx, actor, tenantID, NewRun{Version: v,
		Trigger: Trigger{Kind: TriggerManual, Ref: m.Ref, SHA: strings.ToLower(m.SHA), Sender: actor.Name}})
	if err != nil {
		return Run{}, err
	}
	return r, e.Start(r)
}

func isHex(s string, minLen, maxLen int) bool {
	if len(s) < minLen || len(s) > maxLen {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return false
		}
	}
	return true
}

// Close cancels every executing run (each destroys its sandbox) and waits
// for them and their notifications, within ctx.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	for _, a := range e.active {
		a.cancel(errShutdown)
	}
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
		e.stopBG.Close()
		return nil
	case <-ctx.Done():
		// Notifications still retrying are abandoned (their delivery log
		// says how far they got).
		e.stopBG.Close()
		return fmt.Errorf("close run engine: %w", ctx.Err())
	}
}

// Recover is for start-up (with replicas: each leader term's start):
// runs left running by a previous process (by a replica that is gone) are
// ended failed and their sandboxes destroyed; queued runs are started.
func (e *Engine) Recover(ctx context.Context) error {
	if err := e.RecoverOrphans(ctx); err != nil {
		return err
	}
	queued, err := e.store.Queued(ctx, 1000)
	if err != nil {
		return err
	}
	for _, r := range queued {
		if err := e.Start(r); err != nil && !errors.Is(err, errdefs.ErrConflict) {
			return err
		}
	}
	return nil
}

// RecoverOrphans ends failed the running runs no live process executes:
// with one server, all of them (call it at start-up only); with replicas,
// those whose owner replica's registration is gone (the leader calls it
// periodically), never this replica's own or another live one's. Their
// sandboxes are destroyed.
func (e *Engine) RecoverOrphans(ctx context.Context) error {
	var (
		gone []Run
		err  error
	)
	if e.cfg.LiveReplicas == nil {
		gone, err = e.store.Interrupted(ctx)
	} else {
		var ids []string
		if ids, err = e.cfg.LiveReplicas(ctx); err != nil {
			return fmt.Errorf("recover runs: %w", err)
		}
		live := map[string]bool{e.cfg.ReplicaID: true}
		for _, id := range ids {
			live[id] = true
		}
		gone, err = e.store.interruptedExcept(ctx, live, "interrupted: the replica running it is gone")
	}
	if err != nil {
		return err
	}
	for _, r := range gone {
		if r.SandboxID != "" {
			e.destroy(ctx, r)
		}
	}
	return nil
}

// actorFor is who the run's sandbox operations are audited as.
func actorFor(r Run) audit.Actor {
	return audit.Actor{Kind: audit.ActorSystem, ID: "workflow-run:" + r.ID, Name: fmt.Sprintf("workflow %s #%d", r.Workflow, r.Number)}
}

// execute runs r to its end. Its sandbox is destroyed before the run is
// recorded as ended, whatever happened.
func (e *Engine) execute(ctx context.Context, r Run, a *active) (Run, error) {
	// over ends the run's presence here: its log closes (followers see the
	// end), Cancel stops waiting. Notifications may still be under way.
	var once sync.Once
	over := func() {
		once.Do(func() {
			a.cancel(nil)
			a.log.Close()
			e.mu.Lock()
			delete(e.active, r.ID)
			e.mu.Unlock()
			close(a.done)
		})
	}
	defer e.wg.Done()
	defer over()
	// Wait for a slot; a cancel while waiting ends the run as cancelled.
	select {
	case e.slots <- struct{}{}:
		defer func() { <-e.slots }()
	case <-ctx.Done():
		return e.end(ctx, r, nil, StateCancelled, causeText(ctx))
	}
	v, err := e.wf.Get(ctx, r.TenantID, r.Workflow, r.WorkflowVersion)
	if err != nil {
		state, reason := e.stopped(ctx, "workflow version unavailable: "+err.Error())
		return e.end(ctx, r, nil, state, reason)
	}
	// Recorded whatever ctx says: a cancel from here on ends the run
	// through the sandbox path below, as cancelled.
	r.OwnerReplica = e.cfg.ReplicaID
	if err := e.store.start(context.WithoutCancel(ctx), &r); err != nil {
		return r, err
	}
	// The start is told in the background (retries must not hold the run
	// up); the end is told after it, so a pending status never lands last.
	started := make(chan struct{})
	if e.cfg.Notifier != nil {
		e.wg.Add(1)
		go func(r Run) {
			defer e.wg.Done()
			defer close(started)
			nctx, cancel := e.stopBG.Bound(context.Background())
			defer cancel()
			if err := e.cfg.Notifier.RunStarted(nctx, v.Def, r); err != nil {
				e.cfg.Logger.Warn("notify run start", "run", r.ID, "err", err)
			}
		}(r)
	} else {
		close(started)
	}
	runCtx, stop := context.WithTimeoutCause(ctx, time.Duration(v.Def.Timeout())*time.Second, errTimedOut)
	defer stop()
	fmt.Fprintf(a.log, "==> run %s #%d of %s (version %d)\n", r.ID, r.Number, r.Workflow, r.WorkflowVersion)
	state, reason, arts := e.inSandbox(ctx, runCtx, &r, v.Def, a.log)
	if r.SandboxID != "" {
		r.Cost = e.cost(ctx, r)
	}
	fmt.Fprintf(a.log, "==> %s %s\n", state, reason)
	out, err := e.end(ctx, r, arts, state, reason)
	over()
	if err != nil {
		return out, err
	}
	<-started
	e.notify(v.Def, out)
	return out, nil
}

// inSandbox creates the run's sandbox, runs the steps, collects the
// artifacts and destroys the sandbox (always, on every path out).
func (e *Engine) inSandbox(ctx, runCtx context.Context, r *Run, def workflow.Definition, log *Log) (State, string, []Artifact) {
	if e.sbx == nil {
		return StateFailed, "this server runs without sandboxes", nil
	}
	untrusted := r.Untrusted()
	if untrusted {
		fmt.Fprintf(log, "==> untrusted trigger (%s): the sandbox gets no secrets and the checkout no token\n", r.TrustReason)
	}
	sb, err := e.sbx.Create(runCtx, actorFor(*r), r.TenantID, sandbox.Spec{
		Template: def.Sandbox.Template, VCPUs: def.Sandbox.VCPUs, MemoryMiB: def.Sandbox.MemoryMiB,
		TimeoutSeconds: def.Timeout() + int(e.cfg.Grace/time.Second),
		Metadata:       map[string]string{"workflow": r.Workflow, "workflow_run": r.ID},
		NoSecrets:      untrusted,
		Volumes:        runVolumes(def.Volumes, untrusted),
	})
	if sb.ID != "" {
		if err := e.store.setSandbox(context.WithoutCancel(ctx), r, sb.ID); err != nil {
			e.cfg.Logger.Warn("record run sandbox", "run", r.ID, "sandbox", sb.ID, "err", err)
		}
		defer e.destroy(ctx, *r)
	}
	if err != nil {
		state, reason := e.stopped(runCtx, "create sandbox: "+err.Error())
		return state, reason, nil
	}
	fmt.Fprintf(log, "==> sandbox %s (%s)\n", sb.ID, sb.Template)
	if missing := missingSecrets(def, sb.EnvKeys()); len(missing) > 0 {
		if !untrusted {
			return StateFailed, "secrets not available to sandboxes (create them and grant them in the policy): " + strings.Join(missing, ", "), nil
		}
		// Steps of an untrusted run find their secret variables unset,
		// as GitHub Actions leaves secrets empty for a fork.
		fmt.Fprintf(log, "==> withheld from this untrusted run: %s\n", strings.Join(missing, ", "))
	}
	state, reason := StateSucceeded, ""
	env := runEnv(*r)
	if repo := checkoutRepository(*r, def); repo != "" {
		dir, why := e.checkout(runCtx, *r, def, sb, repo, log)
		if runCtx.Err() != nil {
			state, reason := e.stopped(runCtx, "")
			return state, reason, nil
		}
		if why != "" {
			return StateFailed, why, nil
		}
		env["STOCKADE_CHECKOUT_DIR"] = dir
	}
	for i, st := range def.Steps {
		ok, why := e.step(runCtx, *r, sb.ID, i, st, env, log)
		if runCtx.Err() != nil {
			state, reason = e.stopped(runCtx, "")
			break
		}
		if !ok {
			if st.ContinueOnError {
				fmt.Fprintf(log, "==> step %q failed (%s); continue_on_error\n", st.Name, why)
				continue
			}
			state, reason = StateFailed, fmt.Sprintf("step %q: %s", st.Name, why)
			break
		}
	}
	var arts []Artifact
	if state != StateCancelled && len(def.Artifacts) > 0 {
		// After a timeout the sandbox still exists: collect what is there
		// within a bound of its own.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		arts = e.collect(actx, *r, sb.ID, def.Artifacts, log)
		cancel()
	}
	return state, reason, arts
}

// end records the run's end; the context may be over (cancel, timeout):
// recording is not.
func (e *Engine) end(ctx context.Context, r Run, arts []Artifact, state State, reason string) (Run, error) {
	if err := e.store.finish(context.WithoutCancel(ctx), &r, state, reason, arts, r.Cost); err != nil {
		return r, err
	}
	return r, nil
}

// stopped is the state of a run whose context ended, or failed with reason
// when it did not.
func (e *Engine) stopped(runCtx context.Context, reason string) (State, string) {
	switch context.Cause(runCtx) {
	case errTimedOut:
		return StateTimedOut, "the workflow's timeout passed"
	case errCancelled:
		return StateCancelled, "cancelled"
	case errShutdown:
		return StateCancelled, "the control plane shut down"
	}
	if runCtx.Err() != nil {
		return StateCancelled, causeText(runCtx)
	}
	return StateFailed, reason
}

func causeText(ctx context.Context) string {
	if c := context.Cause(ctx); c != nil {
		return c.Error()
	}
	return "cancelled"
}

// step runs one step; ok reports exit code 0.
func (e *Engine) step(ctx context.Context, r Run, sandboxID string, i int, st workflow.Step, env map[string]string, log *Log) (ok bool, why string) {
	begin := time.Now()
	now := e.store.clock.Now()
	rec := Step{RunID: r.ID, TenantID: r.TenantID, Index: i, Name: st.Name, State: StepRunning, StartedAt: &now}
	if err := e.store.saveStep(context.WithoutCancel(ctx), &rec); err != nil {
		e.cfg.Logger.Warn("record step start", "run", r.ID, "step", i, "err", err)
	}
	fmt.Fprintf(log, "==> step %d: %s\n", i+1, st.Name)
	capture := &bounded{max: e.cfg.MaxOutputBytes}
	w := &lockedWriter{w: io.MultiWriter(log, capture)}
	res, err := e.sbx.Exec(ctx, actorFor(r), r.TenantID, sandboxID, sandbox.ExecRequest{
		Cmd: []string{"/bin/sh", "-c", st.Run}, Cwd: "/workspace", Env: env, TimeoutSeconds: st.TimeoutSeconds,
	}, w, w)
	end := e.store.clock.Now()
	rec.EndedAt, rec.DurationMS = &end, time.Since(begin).Milliseconds()
	rec.Output, rec.Truncated = capture.text()
	switch {
	case err != nil:
		rec.State, why = StepFailed, err.Error()
	case res.ExitCode != 0:
		code := res.ExitCode
		rec.ExitCode, rec.State = &code, StepFailed
		why = fmt.Sprintf("exit code %d", code)
		if res.Reason != "" && res.Reason != "exited" {
			why += " (" + res.Reason + ")"
		}
	default:
		code := 0
		rec.ExitCode, rec.State, ok = &code, StepSucceeded, true
	}
	if err := e.store.saveStep(context.WithoutCancel(ctx), &rec); err != nil {
		e.cfg.Logger.Warn("record step end", "run", r.ID, "step", i, "err", err)
	}
	return ok, why
}

// runEnv is what every step sees about its run.
func runEnv(r Run) map[string]string {
	env := map[string]string{
		"STOCKADE_RUN_ID": r.ID, "STOCKADE_RUN_NUMBER": strconv.Itoa(r.Number), "STOCKADE_WORKFLOW": r.Workflow,
		"STOCKADE_TRIGGER": r.TriggerKind, "STOCKADE_TRUST": workflow.TrustTrusted,
	}
	if r.Untrusted() {
		env["STOCKADE_TRUST"] = workflow.TrustUntrusted
	}
	set := func(k, v string) {
		if v != "" {
			env[k] = v
		}
	}
	set("STOCKADE_REPOSITORY", r.Repository)
	set("STOCKADE_REF", r.Ref)
	set("STOCKADE_SHA", r.SHA)
	if r.PRNumber > 0 {
		env["STOCKADE_PR_NUMBER"] = strconv.Itoa(r.PRNumber)
	}
	return env
}

// missingSecrets are the step secrets the sandbox got no placeholder for:
// not created, revoked, or not granted by the tenant policy. Steps see
// secrets only through the sandbox's own placeholders, so the policy's
// grant is never bypassed.
func missingSecrets(def workflow.Definition, have []string) []string {
	var out []string
	for _, st := range def.Steps {
		for _, name := range st.Env {
			if !slices.Contains(have, name) && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// collect copies the artifacts out of the sandbox, within the run's bound.
func (e *Engine) collect(ctx context.Context, r Run, sandboxID string, paths []string, log *Log) []Artifact {
	var (
		out  []Artifact
		left = e.cfg.MaxArtifactBytes
	)
	for i, p := range paths {
		a := Artifact{Path: p}
		h := sha256.New()
		var f *os.File
		fi, err := e.sbx.ReadFile(ctx, actorFor(r), r.TenantID, sandboxID, p, func(size int64) (io.Writer, error) {
			if size > left {
				return nil, fmt.Errorf("%w: %d bytes, %d left of the run's %d", errdefs.ErrTooLarge, size, left, e.cfg.MaxArtifactBytes)
			}
			if e.cfg.ArtifactDir == "" {
				return h, nil
			}
			dst := e.ArtifactPath(r, i, p)
			if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
				return nil, err
			}
			var err error
			if f, err = os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640); err != nil {
				return nil, err
			}
			return io.MultiWriter(f, h), nil
		})
		if f != nil {
			if cerr := f.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
			a.Error = "not found"
		case err != nil:
			a.Error = truncate(err.Error(), 300)
		default:
			a.Size, a.SHA256 = fi.Size, hex.EncodeToString(h.Sum(nil))
			left -= fi.Size
		}
		if a.Error != "" {
			fmt.Fprintf(log, "==> artifact %s: %s\n", p, a.Error)
		} else {
			fmt.Fprintf(log, "==> artifact %s: %d bytes\n", p, a.Size)
		}
		out = append(out, a)
	}
	return out
}

// ArtifactPath is where artifact i (path p) of run r is kept.
func (e *Engine) ArtifactPath(r Run, i int, p string) string {
	base := path.Base(p)
	if base == "/" || base == "." || base == ".." {
		base = "file"
	}
	return filepath.Join(e.cfg.ArtifactDir, r.TenantID, r.ID, fmt.Sprintf("%02d-%s", i, base))
}

// destroy destroys the run's sandbox, bounded, whatever the run's context
// says.
func (e *Engine) destroy(ctx context.Context, r Run) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.DestroyTimeout)
	defer cancel()
	if _, err := e.sbx.Destroy(dctx, actorFor(r), r.TenantID, r.SandboxID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		e.cfg.Logger.Error("destroy run sandbox", "run", r.ID, "sandbox", r.SandboxID, "err", err)
	}
}

func (e *Engine) cost(ctx context.Context, r Run) float64 {
	if e.cfg.Costs == nil {
		return 0
	}
	c, err := e.cfg.Costs.SandboxCost(context.WithoutCancel(ctx), r.TenantID, r.SandboxID)
	if err != nil {
		e.cfg.Logger.Warn("run cost", "run", r.ID, "sandbox", r.SandboxID, "err", err)
		return 0
	}
	return c
}

func (e *Engine) notify(def workflow.Definition, r Run) {
	if e.cfg.Notifier == nil {
		return
	}
	nctx, cancel := e.stopBG.Bound(context.Background())
	defer cancel()
	_, steps, err := e.store.Get(nctx, r.TenantID, r.ID)
	if err != nil {
		e.cfg.Logger.Warn("notify run end", "run", r.ID, "err", err)
		return
	}
	if err := e.cfg.Notifier.RunEnded(nctx, def, r, steps); err != nil {
		e.cfg.Logger.Warn("notify run end", "run", r.ID, "err", err)
	}
}

// lockedWriter serialises stdout and stderr, which arrive concurrently.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// bounded keeps the first max bytes written.
type bounded struct {
	buf []byte
	max int
	cut bool
}

func (b *bounded) Write(p []byte) (int, error) {
	room := b.max - len(b.buf)
	if room < len(p) {
		b.cut = true
		if room > 0 {
			b.buf = append(b.buf, p[:room]...)
		}
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// text is the output as storable text: valid UTF-8 without NUL (PostgreSQL
// refuses both in TEXT).
func (b *bounded) text() (string, bool) {
	s := string(b.buf)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.ReplaceAll(s, "\x00", "\uFFFD"), b.cut
}
