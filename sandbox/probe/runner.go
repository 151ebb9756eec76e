// Package probe runs the compliance probe: a shell program (probe.sh,
// busybox ash, dash or bash) copied into a fresh sandbox of the tenant
// through the files API, which tries each escape the compliance checklist
// asks about and prints one line per check. The runner also tries from
// outside two time limits (a command past its timeout, and a second,
// short-lived sandbox past its lifetime) and the files API (root's files and
// folders must be refused to it as they are to the sandbox user). Both sandboxes are destroyed whatever happens.
// Live reads the sandbox, terminal, VM and egress data the checklist needs.
// Runner implements compliance.Prober and Live compliance.Live.
package probe

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/compliance"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

//go:embed probe.sh
var script []byte

// Script returns the probe program.
func Script() []byte { return bytes.Clone(script) }

// Sandboxes is what the runner needs of the sandbox service.
// *sandbox.Service implements it.
type Sandboxes interface {
	Create(ctx context.Context, actor audit.Actor, tenantID string, spec sandbox.Spec) (sandbox.Sandbox, error)
	WriteFile(ctx context.Context, actor audit.Actor, tenantID, id, path string, r io.Reader, mode uint32) (sandbox.FileInfo, error)
	ReadFile(ctx context.Context, actor audit.Actor, tenantID, id, path string, open func(size int64) (io.Writer, error)) (sandbox.FileInfo, error)
	Exec(ctx context.Context, actor audit.Actor, tenantID, id string, req sandbox.ExecRequest, stdout, stderr io.Writer) (sandbox.ExecResult, error)
	Destroy(ctx context.Context, actor audit.Actor, tenantID, id string) (sandbox.Sandbox, error)
	Get(ctx context.Context, tenantID, id string) (sandbox.Status, error)
}

// Targets are what the probe tries to reach. Zero fields take the defaults
// noted; tests point them at local upstreams.
type Targets struct {
	// Internet is a host:port asked for through the egress proxy; default
	// example.com:80.
	Internet string
	// InternetDirect is an ip:port dialled without the proxy; default
	// 1.1.1.1:80.
	InternetDirect string
	// Metadata is the cloud metadata service; default 169.254.169.254:80.
	Metadata string
	// Private are addresses in private ranges; default 10.0.0.1:80,
	// 172.16.0.1:80, 192.168.0.1:80 and 10.0.2.2:80 (a user-mode NIC's host).
	Private []string
	// ControlPlane is the control plane's host:port (from its public URL);
	// "" skips those checks.
	ControlPlane string
}

func (t *Targets) setDefaults() {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&t.Internet, "example.com:80")
	def(&t.InternetDirect, "1.1.1.1:80")
	def(&t.Metadata, "169.254.169.254:80")
	if len(t.Private) == 0 {
		t.Private = []string{"10.0.0.1:80", "172.16.0.1:80", "192.168.0.1:80", "10.0.2.2:80"}
	}
}

// Config configures a Runner.
type Config struct {
	// Template of the probe sandboxes; "" is the service's default.
	Template string
	// MemoryMiB of the probe sandbox; 0 is the tenant policy's default.
	MemoryMiB int
	// TimeoutSeconds is the probe sandbox's lifetime; default 600 (less if
	// the tenant policy allows less).
	TimeoutSeconds int
	// LifetimeSeconds is the lifetime of the short-lived sandbox the
	// probe tries to outlive; default 10.
	LifetimeSeconds int
	// ScriptTimeout bounds the probe program; default 5 min.
	ScriptTimeout time.Duration
	// Policies, when set, bounds the lifetimes above by the tenant's policy.
	Policies sandbox.Policies
	Targets  Targets
	Logger   *slog.Logger
}

// Runner runs the probe.
type Runner struct {
	sbx Sandboxes
	cfg Config
	log *slog.Logger
}

// NewRunner returns a Runner creating its sandboxes through sbx.
func NewRunner(sbx Sandboxes, cfg Config) *Runner {
	if cfg.TimeoutSeconds <= 0 {
		cfg.TimeoutSeconds = 600
	}
	if cfg.LifetimeSeconds <= 0 {
		cfg.LifetimeSeconds = 10
	}
	if cfg.ScriptTimeout <= 0 {
		cfg.ScriptTimeout = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Targets.setDefaults()
	return &Runner{sbx: sbx, cfg: cfg, log: cfg.Logger.With("component", "probe")}
}

// MetadataKey marks the probe's sandboxes in their metadata.
const MetadataKey = "stockade.probe"

// Paths of what the runner copies into the probe sandbox.
const (
	ScriptPath = "/workspace/.stockade-probe.sh"
	DecoyPath  = "/workspace/.env"
)

// syncBuffer is a buffer two output streams write at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) printf(format string, args ...any) { fmt.Fprintf(s, format, args...) }

// Probe runs the probe program in a new sandbox of the tenant, plus the two
// time-limit checks, and destroys every sandbox it made.
func (r *Runner) Probe(ctx context.Context, actor audit.Actor, tenantID string, started func(sandboxID string)) (compliance.ProbeResult, error) {
	out := &syncBuffer{}
	timeout, life := r.lifetimes(ctx, tenantID)
	// The short-lived sandbox runs alongside the probe: its wait overlaps.
	lifeCh := make(chan compliance.ProbeCheck, 1)
	lifeOut := &syncBuffer{}
	go func() { lifeCh <- r.lifetime(ctx, actor, tenantID, life, lifeOut) }()

	checks := map[string]compliance.ProbeCheck{}
	res := compliance.ProbeResult{}
	err := r.run(ctx, actor, tenantID, timeout, out, checks, func(id string) {
		res.SandboxID = id
		if started != nil {
			started(id)
		}
	})
	lc := <-lifeCh
	checks[lc.ID] = lc
	res.Checks = ordered(checks)
	res.Output = out.String() + lifeOut.String()
	return res, err
}

// run creates the probe sandbox, runs the probe program and the command
// timeout check in it, and destroys it before returning.
func (r *Runner) run(ctx context.Context, actor audit.Actor, tenantID string, timeout int, out *syncBuffer,
	checks map[string]compliance.ProbeCheck, started func(id string)) error {
	begin := time.Now()
	sb, err := r.sbx.Create(ctx, actor, tenantID, sandbox.Spec{Template: r.cfg.Template, MemoryMiB: r.cfg.MemoryMiB,
		TimeoutSeconds: timeout, Metadata: map[string]string{MetadataKey: "compliance"}})
	if err != nil {
		out.printf("# create the probe sandbox: %v\n", err)
		return fmt.Errorf("create the probe sandbox: %w", err)
	}
	started(sb.ID)
	out.printf("# probe sandbox %s (template %s, %d MiB, lifetime %ds) on vm %s after %v\n", sb.ID, sb.Template, sb.MemoryMiB,
		sb.TimeoutSeconds, sb.VMID, time.Since(begin).Round(time.Millisecond))
	defer r.destroy(ctx, actor, tenantID, sb.ID, out)

	if _, err := r.sbx.WriteFile(ctx, actor, tenantID, sb.ID, ScriptPath, bytes.NewReader(script), 0o755); err != nil {
		return fmt.Errorf("copy the probe into sandbox %s: %w", sb.ID, err)
	}
	if _, err := r.sbx.WriteFile(ctx, actor, tenantID, sb.ID, DecoyPath, strings.NewReader("PROBE_DECOY=inside-the-workspace\n"), 0o644); err != nil {
		return fmt.Errorf("copy the decoy into sandbox %s: %w", sb.ID, err)
	}
	t := r.cfg.Targets
	env := map[string]string{
		"PROBE_INTERNET": t.Internet, "PROBE_INTERNET_DIRECT": t.InternetDirect, "PROBE_METADATA": t.Metadata,
		"PROBE_PRIVATE": strings.Join(t.Private, " "), "PROBE_CONTROL": t.ControlPlane, "PROBE_DECOY": DecoyPath,
	}
	sctx, cancel := context.WithTimeout(ctx, r.cfg.ScriptTimeout+30*time.Second)
	xr, err := r.sbx.Exec(sctx, actor, tenantID, sb.ID, sandbox.ExecRequest{Cmd: []string{"/bin/sh", ScriptPath}, Env: env,
		TimeoutSeconds: int(r.cfg.ScriptTimeout / time.Second)}, out, out)
	cancel()
	for _, c := range Parse(out.String()) {
		checks[c.ID] = c
	}
	if err != nil {
		return fmt.Errorf("run the probe in sandbox %s: %w", sb.ID, err)
	}
	out.printf("# probe program: exit %d (%s) after %v\n", xr.ExitCode, xr.Reason, xr.Duration.Round(time.Millisecond))
	if xr.Reason != "exited" {
		return fmt.Errorf("the probe program in sandbox %s ended early: %s", sb.ID, xr.Reason)
	}
	c := r.commandTimeout(ctx, actor, tenantID, sb.ID, out)
	checks[c.ID] = c
	c = r.filesAPI(ctx, actor, tenantID, sb.ID, out)
	checks[c.ID] = c
	return nil
}

// Paths the files API check tries.
const (
	shadowPath = "/etc/shadow"
	shadowLink = "/workspace/.stockade-probe-shadow"
)

// filesAPI tries, from outside through the files API, what the sandbox
// user may not do inside: read /etc/shadow, directly and through a link
// made in the sandbox, and write into / and /etc. Only a refusal for want
// of permission counts as blocked; nothing read is kept, only its size.
func (r *Runner) filesAPI(ctx context.Context, actor audit.Actor, tenantID, id string, out *syncBuffer) compliance.ProbeCheck {
	c := compliance.ProbeCheck{ID: compliance.CheckFilesAPI, Name: compliance.CheckName(compliance.CheckFilesAPI)}
	var made bytes.Buffer
	line := "[ -e " + shadowPath + " ] && ln -sf " + shadowPath + " " + shadowLink + " && echo linked"
	if _, err := r.sbx.Exec(ctx, actor, tenantID, id, sandbox.ExecRequest{Cmd: []string{"/bin/sh", "-c", line}, TimeoutSeconds: 30}, &made, out); err != nil {
		c.Outcome, c.Detail = compliance.OutcomeError, "link "+shadowLink+": "+err.Error()
		return c
	}
	if strings.TrimSpace(made.String()) != "linked" {
		c.Outcome, c.Detail = compliance.OutcomeError, "the template has no "+shadowPath+" to try"
		return c
	}
	var escaped, failed, refused []string
	judge := func(what string, n int64, err error) {
		switch {
		case err == nil:
			escaped = append(escaped, fmt.Sprintf("%s (%d bytes)", what, n))
		case errors.Is(err, errdefs.ErrForbidden):
			refused = append(refused, what)
		default:
			failed = append(failed, what+": "+err.Error())
		}
		fmt.Fprintf(out, "# files api: %s: %v\n", what, errOr(err, "done"))
	}
	for _, p := range []string{shadowPath, shadowLink} {
		var n int64
		_, err := r.sbx.ReadFile(ctx, actor, tenantID, id, p, func(size int64) (io.Writer, error) {
			n = size
			return io.Discard, nil
		})
		judge("read "+p, n, err)
	}
	for _, p := range []string{"/etc/.stockade-probe-api", "/.stockade-probe-api"} {
		_, err := r.sbx.WriteFile(ctx, actor, tenantID, id, p, strings.NewReader("written through the files API\n"), 0o644)
		judge("write "+p, 0, err)
	}
	switch {
	case len(escaped) > 0:
		c.Outcome, c.Detail = compliance.OutcomeEscaped, "the files API could "+strings.Join(escaped, ", ")
	case len(failed) > 0:
		c.Outcome, c.Detail = compliance.OutcomeError, strings.Join(failed, "; ")
	default:
		c.Outcome = compliance.OutcomeBlocked
		c.Detail = "the files API was refused, as the sandbox user is: " + strings.Join(refused, ", ")
	}
	return c
}

// lifetimes are the probe sandbox's and the short-lived sandbox's
// lifetimes, within the tenant policy.
func (r *Runner) lifetimes(ctx context.Context, tenantID string) (timeout, life int) {
	timeout, life = r.cfg.TimeoutSeconds, r.cfg.LifetimeSeconds
	if r.cfg.Policies != nil {
		if p, err := r.cfg.Policies.Current(ctx, tenantID); err == nil {
			timeout = min(timeout, p.Doc.Lifetime.MaxTimeoutSeconds)
			life = min(life, p.Doc.Lifetime.MaxTimeoutSeconds)
		}
	}
	return timeout, life
}

// destroy destroys a probe sandbox whatever the caller's context says.
func (r *Runner) destroy(ctx context.Context, actor audit.Actor, tenantID, id string, out *syncBuffer) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	for attempt := 0; ; attempt++ {
		_, err := r.sbx.Destroy(dctx, actor, tenantID, id)
		if err == nil {
			out.printf("# sandbox %s destroyed\n", id)
			return
		}
		st, gerr := r.sbx.Get(dctx, tenantID, id)
		if gerr == nil && st.State.Ended() {
			out.printf("# sandbox %s already %s (%s)\n", id, st.State, st.StateReason)
			return
		}
		// Still being created, or its agent out of reach: try again.
		if attempt >= 10 || dctx.Err() != nil {
			out.printf("# could not destroy sandbox %s: %v\n", id, err)
			r.log.Error("destroy probe sandbox", "sandbox", id, "tenant", tenantID, "err", err)
			return
		}
		time.Sleep(2 * time.Second)
	}
}

// commandTimeout runs a command past a 2 s timeout, with a child that
// leaves its process group, then looks for what survived and ends it.
func (r *Runner) commandTimeout(ctx context.Context, actor audit.Actor, tenantID, id string, out *syncBuffer) compliance.ProbeCheck {
	c := compliance.ProbeCheck{ID: compliance.CheckCommandTimeout, Name: compliance.CheckName(compliance.CheckCommandTimeout)}
	line := "setsid sleep 301 </dev/null >/dev/null 2>&1 & exec sleep 302"
	xr, err := r.sbx.Exec(ctx, actor, tenantID, id, sandbox.ExecRequest{Cmd: []string{"/bin/sh", "-c", line}, TimeoutSeconds: 2}, out, out)
	if err != nil {
		c.Outcome, c.Detail = compliance.OutcomeError, err.Error()
		return c
	}
	var found bytes.Buffer
	scan := `for p in /proc/[0-9]*; do c=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null); case "$c" in "sleep 30"[12]" ") echo "${p#/proc/} $c"; kill -9 "${p#/proc/}";; esac; done`
	if _, err := r.sbx.Exec(ctx, actor, tenantID, id, sandbox.ExecRequest{Cmd: []string{"/bin/sh", "-c", scan}, TimeoutSeconds: 30}, &found, out); err != nil {
		c.Outcome, c.Detail = compliance.OutcomeError, "look for survivors: "+err.Error()
		return c
	}
	survivors := strings.Count(found.String(), "sleep 30")
	fmt.Fprintf(out, "# command timeout: %s after %v; survivors: %q\n", xr.Reason, xr.Duration.Round(time.Millisecond), found.String())
	switch {
	case xr.Reason != "timeout" || strings.Contains(found.String(), "sleep 302"):
		c.Outcome = compliance.OutcomeEscaped
		c.Detail = fmt.Sprintf("a command with a 2 s timeout ended %s after %v", xr.Reason, xr.Duration.Round(time.Millisecond))
	case survivors > 0:
		c.Outcome = compliance.OutcomeBlocked
		c.Detail = fmt.Sprintf("the command was killed at its 2 s timeout (after %v); a child that left its process group (setsid) outlived it, bounded by the sandbox's lifetime (see lifetime)",
			xr.Duration.Round(time.Millisecond))
	default:
		c.Outcome = compliance.OutcomeBlocked
		c.Detail = fmt.Sprintf("the command and its children were killed at its 2 s timeout (after %v)", xr.Duration.Round(time.Millisecond))
	}
	return c
}

// lifetime starts a sandbox that lives life seconds, runs a command (with
// a detached child) meant to last ten minutes in it, and checks that the
// sandbox ended at its lifetime, taking the command with it.
func (r *Runner) lifetime(ctx context.Context, actor audit.Actor, tenantID string, life int, out *syncBuffer) compliance.ProbeCheck {
	c := compliance.ProbeCheck{ID: compliance.CheckLifetime, Name: compliance.CheckName(compliance.CheckLifetime)}
	fail := func(outcome, format string, args ...any) compliance.ProbeCheck {
		c.Outcome, c.Detail = outcome, fmt.Sprintf(format, args...)
		out.printf("# lifetime: %s: %s\n", outcome, c.Detail)
		return c
	}
	sb, err := r.sbx.Create(ctx, actor, tenantID, sandbox.Spec{Template: r.cfg.Template, MemoryMiB: r.cfg.MemoryMiB,
		TimeoutSeconds: life, Metadata: map[string]string{MetadataKey: "lifetime"}})
	if err != nil {
		return fail(compliance.OutcomeError, "create a sandbox with a %d s lifetime: %v", life, err)
	}
	out.printf("# lifetime: sandbox %s with a %d s lifetime, expires %s\n", sb.ID, life, sb.ExpiresAt.Format(time.RFC3339))
	defer r.destroy(ctx, actor, tenantID, sb.ID, out)
	grace := 90 * time.Second // the agent's timer, then the service's sync, under TCG
	ectx, cancel := context.WithTimeout(ctx, time.Duration(life)*time.Second+grace)
	defer cancel()
	begin := time.Now()
	line := "setsid sleep 601 </dev/null >/dev/null 2>&1 & exec sleep 600"
	xr, xerr := r.sbx.Exec(ectx, actor, tenantID, sb.ID, sandbox.ExecRequest{Cmd: []string{"/bin/sh", "-c", line}, TimeoutSeconds: 600}, out, out)
	took := time.Since(begin).Round(time.Millisecond)
	if ectx.Err() != nil && ctx.Err() == nil {
		return fail(compliance.OutcomeEscaped, "a command was still running %v into a sandbox with a %d s lifetime", took, life)
	}
	if ctx.Err() != nil {
		return fail(compliance.OutcomeError, "cut short: %v", ctx.Err())
	}
	// The command ended (or could not start because the sandbox already
	// had): the sandbox must have ended at its lifetime.
	var st sandbox.Status
	for deadline := time.Now().Add(grace); ; {
		st, err = r.sbx.Get(ctx, tenantID, sb.ID)
		if err != nil {
			return fail(compliance.OutcomeError, "read sandbox %s: %v", sb.ID, err)
		}
		if st.State != sandbox.StateRunning && st.State != sandbox.StateCreating {
			break
		}
		if time.Now().After(deadline) {
			return fail(compliance.OutcomeEscaped, "the command ended (%v) but sandbox %s still runs %v past its %d s lifetime",
				errOr(xerr, xr.Reason), sb.ID, time.Since(sb.ExpiresAt).Round(time.Second), life)
		}
		time.Sleep(time.Second)
	}
	if !strings.Contains(st.StateReason, "timeout") {
		return fail(compliance.OutcomeError, "sandbox %s ended %s for another reason: %s", sb.ID, st.State, st.StateReason)
	}
	c.Outcome = compliance.OutcomeBlocked
	c.Detail = fmt.Sprintf("a ten-minute command (with a detached child) in a sandbox with a %d s lifetime ended after %v (%s); the sandbox is %s (%s)",
		life, took, errOr(xerr, xr.Reason), st.State, st.StateReason)
	out.printf("# lifetime: blocked: %s\n", c.Detail)
	return c
}

func errOr(err error, s string) string {
	if err != nil {
		if errors.Is(err, errdefs.ErrConflict) {
			return "the sandbox had ended"
		}
		return err.Error()
	}
	return s
}

// Parse reads the check lines of the probe's output ("PROBE id outcome
// detail"); an outcome it does not know is an error.
func Parse(output string) []compliance.ProbeCheck {
	var out []compliance.ProbeCheck
	sc := bufio.NewScanner(strings.NewReader(output))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.SplitN(strings.TrimRight(sc.Text(), "\r"), " ", 4)
		if len(f) < 3 || f[0] != "PROBE" {
			continue
		}
		c := compliance.ProbeCheck{ID: f[1], Name: compliance.CheckName(f[1]), Outcome: f[2]}
		if len(f) == 4 {
			c.Detail = strings.TrimSpace(f[3])
		}
		switch c.Outcome {
		case compliance.OutcomeBlocked, compliance.OutcomeEscaped, compliance.OutcomeError:
		default:
			c.Detail = fmt.Sprintf("unknown outcome %q: %s", c.Outcome, c.Detail)
			c.Outcome = compliance.OutcomeError
		}
		out = append(out, c)
	}
	return out
}

// ordered lists checks in the order of compliance.CheckNames, then any
// others.
func ordered(m map[string]compliance.ProbeCheck) []compliance.ProbeCheck {
	out := make([]compliance.ProbeCheck, 0, len(m))
	for _, n := range compliance.CheckNames() {
		if c, ok := m[n.ID]; ok {
			out = append(out, c)
			delete(m, n.ID)
		}
	}
	for _, c := range m {
		out = append(out, c)
	}
	return out
}

// HostPort is the host:port of a URL such as the control plane's public
// URL ("" when it has none).
func HostPort(rawURL string) string {
	rest, ok := strings.CutPrefix(rawURL, "http://")
	port := "80"
	if !ok {
		if rest, ok = strings.CutPrefix(rawURL, "https://"); !ok {
			return ""
		}
		port = "443"
	}
	rest, _, _ = strings.Cut(rest, "/")
	if h, p, err := net.SplitHostPort(rest); err == nil {
		if _, err := strconv.Atoi(p); err == nil {
			return net.JoinHostPort(h, p)
		}
	}
	if rest == "" {
		return ""
	}
	return net.JoinHostPort(rest, port)
}
