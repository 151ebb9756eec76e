package handlers

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

// sandboxService returns the sandbox service; its operations answer
// vmpool.ErrUnavailable themselves while the VM pools are not running.
// Kept so its call sites stay as they are; every service is required
// (handlers.New), so it never fails.
func (h *Handlers) sandboxService() (*sandbox.Service, error) { return h.sbx, nil }

func sandboxJSON(sb sandbox.Sandbox) api.Sandbox {
	keys := sb.EnvKeys()
	if keys == nil {
		keys = []string{}
	}
	return api.Sandbox{
		ID: sb.ID, State: string(sb.State), StateReason: sb.StateReason, Template: sb.Template, TemplateVersion: sb.TemplateVersion,
		VCPUs: sb.VCPUs, MemoryMiB: sb.MemoryMiB, TimeoutSeconds: sb.TimeoutSeconds, IdleTimeoutSeconds: sb.IdleTimeoutSeconds,
		VMID: sb.VMID, EnvKeys: keys, Metadata: sb.Metadata(), CreatedBy: sb.CreatedByName,
		CreatedAt: sb.CreatedAt.UTC().Format(timeJSON), StartedAt: timePtr(sb.StartedAt), ExpiresAt: sb.ExpiresAt.UTC().Format(timeJSON),
		EndedAt: timePtr(sb.EndedAt), LastActiveAt: timePtr(sb.LastActiveAt), CreateMS: sb.CreateMS, GuestReadyMS: sb.GuestReadyMS,
		Execs: sb.Execs, PolicyVersion: sb.PolicyVersion, IdempotencyKey: sb.IdempotencyKey, PausedAt: pausedAt(sb),
	}
}

// APISandboxes lists the tenant's sandboxes: GET /api/v1/sandboxes.
func (h *Handlers) APISandboxes(c echo.Context) error {
	svc, err := h.sandboxService()
	if err != nil {
		return err
	}
	var sbs []sandbox.Sandbox
	if key := c.QueryParam("idempotency_key"); key != "" {
		// The sandboxes a create with that key made, whatever happened to
		// the create's answer (a server that crashed mid-create, say).
		sbs, err = svc.Store().WithIdempotencyKey(c.Request().Context(), CallerOf(c).Tenant.ID, key)
	} else {
		sbs, err = svc.List(c.Request().Context(), CallerOf(c).Tenant.ID)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.SandboxList{Sandboxes: each(sbs, sandboxJSON)})
}

// APICreateSandbox creates a sandbox and answers once it runs:
// POST /api/v1/sandboxes -> 201.
func (h *Handlers) APICreateSandbox(c echo.Context) error {
	svc, err := h.sandboxService()
	if err != nil {
		return err
	}
	var in api.CreateSandbox
	if c.Request().ContentLength != 0 {
		if err := decodeJSON(c, &in); err != nil {
			return err
		}
	}
	cl := CallerOf(c)
	sb, err := svc.Create(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, sandbox.Spec{
		Template: in.Template, VCPUs: in.VCPUs, MemoryMiB: in.MemoryMiB, TimeoutSeconds: in.TimeoutSeconds,
		IdleTimeoutSeconds: in.IdleTimeoutSeconds, Env: in.Env, Metadata: in.Metadata, IdempotencyKey: IdempotencyKeyOf(c),
		Volumes: volumeRequests(in.Volumes),
	})
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/api/v1/sandboxes/"+sb.ID)
	return c.JSON(http.StatusCreated, sandboxJSON(sb))
}

// APISandbox shows one sandbox with its timeline and, while it runs, its
// usage: GET /api/v1/sandboxes/:id.
func (h *Handlers) APISandbox(c echo.Context) error {
	svc, err := h.sandboxService()
	if err != nil {
		return err
	}
	ctx, tenantID := c.Request().Context(), CallerOf(c).Tenant.ID
	st, err := svc.Get(ctx, tenantID, c.Param("id"))
	if err != nil {
		return err
	}
	evs, err := svc.Events(ctx, tenantID, st.ID)
	if err != nil {
		return err
	}
	out := sandboxJSON(st.Sandbox)
	for _, e := range evs {
		out.Events = append(out.Events, api.SandboxEvent{State: string(e.State), Reason: e.Reason, Actor: e.Actor, At: e.At.UTC().Format(timeJSON)})
	}
	if s := st.Stats; s != nil {
		out.Stats = &api.SandboxStats{CPUUsageMS: s.CPUUsage.Milliseconds(), MemoryCurrentBytes: s.MemoryCurrent, MemoryPeakBytes: s.MemoryPeak,
			MemoryMaxBytes: s.MemoryMax, OOMKills: s.OOMKills, Pids: s.Pids, PidsMax: s.PidsMax, DiskUsedBytes: s.DiskUsed,
			DiskSizeBytes: s.DiskSize, WorkspaceUsedBytes: s.WorkspaceUsed, WorkspaceSizeBytes: s.WorkspaceSize}
	}
	return c.JSON(http.StatusOK, out)
}

// APIDestroySandbox destroys a sandbox: DELETE /api/v1/sandboxes/:id.
func (h *Handlers) APIDestroySandbox(c echo.Context) error {
	svc, err := h.sandboxService()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	sb, err := svc.Destroy(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sandboxJSON(sb))
}

// maxExecOutput bounds each output stream the buffered exec answer holds;
// the streaming variant has no bound.
const maxExecOutput = 4 << 20

// APIExec runs a command in a sandbox: POST /api/v1/sandboxes/:id/exec.
// Without ?stream=1 it answers once the command ended, with its output;
// with it, newline-delimited JSON events as the command runs (see the
// OpenAPI document).
func (h *Handlers) APIExec(c echo.Context) error {
	svc, err := h.sandboxService()
	if err != nil {
		return err
	}
	var in api.ExecRequest
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl := CallerOf(c)
	req := sandbox.ExecRequest{Cmd: in.Cmd, Cwd: in.Cwd, Env: in.Env, Stdin: []byte(in.Stdin), TimeoutSeconds: in.TimeoutSeconds}
	if s := c.QueryParam("stream"); s == "1" || s == "true" {
		return h.streamExec(c, svc, req)
	}
	stdout, stderr := &boundedBuffer{max: maxExecOutput}, &boundedBuffer{max: maxExecOutput}
	res, err := svc.Exec(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), req, stdout, stderr)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.ExecResult{
		ExecID: res.ExecID, ExitCode: res.ExitCode, Signal: res.Signal, Reason: res.Reason, DurationMS: res.Duration.Milliseconds(),
		Stdout: stdout.text(), Stderr: stderr.text(), StdoutTruncated: stdout.cut, StderrTruncated: stderr.cut,
	})
}

// eventStream writes ExecEvents as NDJSON, one flushed line each. The
// response is committed at the first event, so a command refused before it
// starts still gets a problem document.
//
// Each write must finish within timeout: a client that stops reading
// (its window full) gets stall called, which kills the command (reason
// timeout) rather than let it hold the stream, and its sandbox, for ever.
type eventStream struct {
	c       echo.Context
	mu      sync.Mutex
	started bool
	pending []api.ExecEvent // output that raced ahead of the started event
	failed  bool
	offset  int64 // output bytes written

	timeout time.Duration
	stall   func(error)
	stalled bool // a write missed the timeout
}

// newEventStream starts an event stream for c with the context its
// command runs under: it ends when the request does, with the cause
// sandbox.ErrStreamStalled when that was a write that missed the timeout
// (the server cancels a request whose write failed before the write
// returns: the cause is decided under the stream's lock, after it).
func (h *Handlers) newEventStream(c echo.Context) (*eventStream, context.Context, func()) {
	timeout := h.cfg.StreamWriteTimeout
	if timeout <= 0 {
		timeout = DefaultStreamWriteTimeout
	}
	ctx, stall := context.WithCancelCause(context.WithoutCancel(c.Request().Context()))
	s := &eventStream{c: c, timeout: timeout, stall: stall}
	stop := context.AfterFunc(c.Request().Context(), func() {
		s.mu.Lock()
		stalled := s.stalled
		s.mu.Unlock()
		if stalled {
			stall(fmt.Errorf("%w for %s", sandbox.ErrStreamStalled, timeout))
		} else {
			stall(context.Canceled)
		}
	})
	return s, ctx, func() { stop(); stall(nil) }
}

func (s *eventStream) write(e api.ExecEvent) {
	if s.failed {
		return
	}
	w := s.c.Response()
	if !w.Committed {
		w.Header().Set(echo.HeaderContentType, "application/x-ndjson")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
	}
	rc := http.NewResponseController(w)
	if s.timeout > 0 {
		rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	b, _ := json.Marshal(e)
	_, err := w.Write(append(b, '\n'))
	if err == nil {
		err = rc.Flush()
	}
	if err != nil {
		s.failed = true
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.stalled = true
			s.stall(fmt.Errorf("%w for %s", sandbox.ErrStreamStalled, s.timeout))
		}
		return
	}
	s.offset += int64(len(e.Data))
	if raw, err := base64.StdEncoding.DecodeString(e.DataBase64); err == nil {
		s.offset += int64(len(raw))
	}
}

func (s *eventStream) emit(e api.ExecEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started && e.Type != "started" && e.Type != "exit" && e.Type != "error" {
		s.pending = append(s.pending, e)
		return
	}
	if e.Type == "started" {
		s.started = true
		s.write(e)
		for _, p := range s.pending {
			s.write(p)
		}
		s.pending = nil
		return
	}
	for _, p := range s.pending {
		s.write(p)
	}
	s.pending = nil
	s.write(e)
}

// output is an io.Writer turning a stream's bytes into events.
type output struct {
	s    *eventStream
	kind string
}

func (o output) Write(p []byte) (int, error) {
	e := api.ExecEvent{Type: o.kind}
	if utf8.Valid(p) {
		e.Data = string(p)
	} else {
		e.DataBase64 = base64.StdEncoding.EncodeToString(p)
	}
	o.s.emit(e)
	return len(p), nil
}

func (h *Handlers) streamExec(c echo.Context, svc *sandbox.Service, req sandbox.ExecRequest) error {
	cl := CallerOf(c)
	s, ctx, done := h.newEventStream(c)
	defer done()
	req.Started = func(execID string, pid int) { s.emit(api.ExecEvent{Type: "started", ExecID: execID, PID: pid}) }
	res, err := svc.Exec(ctx, cl.Actor(c), cl.Tenant.ID, c.Param("id"), req, output{s, "stdout"}, output{s, "stderr"})
	if err != nil {
		if !c.Response().Committed {
			return err // refused before it started: a problem document
		}
		h.log.Warn("streamed exec failed", "sandbox", c.Param("id"), "err", err)
		s.mu.Lock()
		off := s.offset
		s.mu.Unlock()
		// The final event names the cause: "lost" when the agent session
		// went and did not come back in time (the record says so too).
		s.emit(api.ExecEvent{Type: "error", ExecID: res.ExecID, Reason: res.Reason, Detail: err.Error(), Offset: &off})
		return nil
	}
	code, ms := res.ExitCode, res.Duration.Milliseconds()
	s.emit(api.ExecEvent{Type: "exit", ExecID: res.ExecID, ExitCode: &code, Signal: res.Signal, Reason: res.Reason, DurationMS: &ms})
	return nil
}

// APIResumeExec re-attaches a streamed command that outlived the server
// that started it: GET /api/v1/sandboxes/:id/execs/:exec_id/stream?offset=N
// answers the events of ?stream=1 from output byte N on (stdout and stderr
// bytes together, as the client counted them); the started event's offset
// says where the output really starts (past N when the agent's bounded
// buffer dropped bytes while no server read them).
func (h *Handlers) APIResumeExec(c echo.Context) error {
	svc, err := h.sandboxService()
	if err != nil {
		return err
	}
	var offset int64
	if v := c.QueryParam("offset"); v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
			return errdefs.Invalid("offset", "invalid", "offset must be a whole number of bytes, 0 or more")
		}
	}
	cl := CallerOf(c)
	s, ctx, done := h.newEventStream(c)
	defer done()
	execID := c.Param("exec_id")
	started := func(start int64, pid int) {
		s.mu.Lock()
		s.offset = start
		s.mu.Unlock()
		s.emit(api.ExecEvent{Type: "started", ExecID: execID, PID: pid, Offset: &start})
	}
	res, err := svc.ResumeExec(ctx, cl.Actor(c), cl.Tenant.ID, c.Param("id"), execID, offset, started, output{s, "stdout"}, output{s, "stderr"})
	if err != nil {
		if !c.Response().Committed {
			return err
		}
		s.mu.Lock()
		off := s.offset
		s.mu.Unlock()
		s.emit(api.ExecEvent{Type: "error", ExecID: execID, Reason: res.Reason, Detail: err.Error(), Offset: &off})
		return nil
	}
	code, ms := res.ExitCode, res.Duration.Milliseconds()
	s.emit(api.ExecEvent{Type: "exit", ExecID: res.ExecID, ExitCode: &code, Signal: res.Signal, Reason: res.Reason, DurationMS: &ms})
	return nil
}

// boundedBuffer keeps up to max bytes and notes that more came.
type boundedBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
	cut bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.max - len(b.buf)
	if len(p) > room {
		b.cut = true
		p = p[:max(room, 0)]
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *boundedBuffer) text() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.ToValidUTF8(string(b.buf), "\uFFFD")
}

// APIReadFile sends a file of a sandbox as raw bytes:
// GET /api/v1/sandboxes/:id/files?path=...
func (h *Handlers) APIReadFile(c echo.Context) error {
	svc, err := h.sandboxService()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	_, err = svc.ReadFile(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), c.QueryParam("path"),
		func(size int64) (io.Writer, error) {
			hdr := c.Response().Header()
			hdr.Set(echo.HeaderContentType, "application/octet-stream")
			hdr.Set(echo.HeaderContentLength, strconv.FormatInt(size, 10))
			c.Response().WriteHeader(http.StatusOK)
			return c.Response(), nil
		})
	if err != nil && c.Response().Committed {
		// The bytes had started: all that is left is to cut the response
		// short, so the client sees less than Content-Length.
		h.log.Warn("file read cut short", "sandbox", c.Param("id"), "err", err)
		panic(http.ErrAbortHandler)
	}
	return err
}

// APIWriteFile writes the raw request body into a file of a sandbox:
// PUT /api/v1/sandboxes/:id/files?path=...[&mode=0644].
func (h *Handlers) APIWriteFile(c echo.Context) error {
	svc, err := h.sandboxService()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	limit, err := svc.FileLimit(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		return err
	}
	if n := c.Request().ContentLength; n > limit.Bytes {
		return limit.TooLarge("upload", n)
	}
	var mode uint64
	if m := c.QueryParam("mode"); m != "" {
		if mode, err = strconv.ParseUint(m, 8, 32); err != nil {
			return errdefs.Invalid("mode", "syntax", "must be octal permission bits, such as 0644 or 755")
		}
	}
	body := http.MaxBytesReader(c.Response(), c.Request().Body, limit.Bytes+1)
	fi, err := svc.WriteFile(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), c.QueryParam("path"), body, uint32(mode))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return limit.TooLarge("upload", -1)
		}
		return err
	}
	return c.JSON(http.StatusOK, api.File{Path: fi.Path, Size: fi.Size, Mode: fmt.Sprintf("%04o", fi.Mode&0o7777)})
}

// --- Pages ---

func sandboxRow(sb sandbox.Sandbox) views.SandboxRow {
	return views.SandboxRow{
		ID: sb.ID, State: string(sb.State), StateReason: sandbox.ReasonText(sb.StateReason), Template: sb.Template, VCPUs: sb.VCPUs,
		MemoryMiB: sb.MemoryMiB, VMID: sb.VMID, CreatedBy: sb.CreatedByName, CreatedAt: sb.CreatedAt, ExpiresAt: sb.ExpiresAt,
		EndedAt: sb.EndedAt, Execs: sb.Execs, PausedAt: pausedTime(sb),
	}
}

func (h *Handlers) sandboxTable(c echo.Context) (views.SandboxTable, error) {
	cl := CallerOf(c)
	t := views.SandboxTable{CanEdit: tenants.Can(cl.Role, tenants.PermSandboxesWrite), PollURL: "/sandboxes/table", Now: h.clock()}
	if tok, ok := c.Get(CSRFContextKey).(string); ok {
		t.CSRF = tok
	}
	sbs, err := h.sbx.List(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		return views.SandboxTable{}, err
	}
	for _, sb := range sbs {
		t.Rows = append(t.Rows, sandboxRow(sb))
	}
	return t, nil
}

// sandboxesView builds the sandboxes page; form, when not nil, is a rejected
// create form to show again with its errors.
func (h *Handlers) sandboxesView(c echo.Context, form *views.SandboxForm) (views.SandboxesView, error) {
	ctx := c.Request().Context()
	cl := CallerOf(c)
	table, err := h.sandboxTable(c)
	if err != nil {
		return views.SandboxesView{}, err
	}
	v := views.SandboxesView{Table: table, CanEdit: table.CanEdit}
	svc, err := h.sandboxService()
	if err != nil {
		v.Unavailable = err.Error()
		return v, nil
	}
	// The service's figures, the ones its Create decides from: the tenant
	// policy's defaults and bounds within the size of the tenant's VMs.
	o, err := svc.CreateOptions(ctx, cl.Tenant.ID)
	if err != nil {
		return views.SandboxesView{}, err
	}
	d := o.Defaults
	v.Form = views.SandboxForm{Template: d.Template, VCPUs: strconv.Itoa(d.VCPUs), MemoryMiB: strconv.Itoa(d.MemoryMiB)}
	if d.TimeoutSeconds%60 == 0 {
		v.Form.TimeoutMinutes = strconv.Itoa(d.TimeoutSeconds / 60)
	} // else left empty: the form counts minutes, and empty is the exact default
	for _, t := range o.Templates {
		v.Templates = append(v.Templates, views.Choice{Value: t.Name, Label: t.Name})
	}
	v.VMVCPUs, v.MaxMemoryMiB, v.MaxTimeoutMinutes = o.MaxVCPUs, o.MaxMemoryMiB, o.MaxTimeoutSeconds/60
	v.DefaultMemoryMiB, v.DefaultTimeout = d.MemoryMiB, time.Duration(d.TimeoutSeconds)*time.Second
	if o.Unavailable != nil {
		v.Unavailable = o.Unavailable.Error()
	}
	if h.vms != nil {
		if err := h.vms.Available(); err != nil {
			v.Unavailable = err.Error()
		}
		q, err := h.vms.Quota(ctx, cl.Tenant.ID)
		if err != nil {
			return views.SandboxesView{}, err
		}
		v.Quota = views.SandboxQuotaView{MaxSandboxes: q.MaxSandboxes, MaxVCPUs: q.MaxVCPUs, MaxMemoryMiB: q.MaxMemoryMiB}
	}
	for _, r := range table.Rows {
		if r.Active() {
			v.Quota.UsedSandboxes++
			v.Quota.UsedVCPUs += r.VCPUs
			v.Quota.UsedMemoryMiB += r.MemoryMiB
		}
	}
	if v.CanEdit {
		v.QuotaLines = h.quotaWarningsView(c)
	}
	if why := h.frozenReason(c); why != "" {
		v.Unavailable = why // the create form is disabled, saying why
	}
	if form != nil {
		v.Form = *form
	}
	return v, nil
}

// SandboxesPage lists the tenant's sandboxes with a create form: GET /sandboxes.
func (h *Handlers) SandboxesPage(c echo.Context) error {
	v, err := h.sandboxesView(c, nil)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Sandboxes(h.page(c, "Sandboxes", views.NavSandboxes), v))
}

// SandboxesTable is the sandbox table alone, polled by the page:
// GET /sandboxes/table.
func (h *Handlers) SandboxesTable(c echo.Context) error {
	t, err := h.sandboxTable(c)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.SandboxTableFragment(t))
}

// CreateSandbox creates a sandbox from the page's form: POST /sandboxes.
// Errors are shown in place, next to the field (or above the form).
func (h *Handlers) CreateSandbox(c echo.Context) error {
	form := views.SandboxForm{
		Template: strings.TrimSpace(c.FormValue("template")), VCPUs: strings.TrimSpace(c.FormValue("vcpus")),
		MemoryMiB: strings.TrimSpace(c.FormValue("memory_mib")), TimeoutMinutes: strings.TrimSpace(c.FormValue("timeout_minutes")),
	}
	svc, err := h.sandboxService()
	var sb sandbox.Sandbox
	if err == nil {
		var spec sandbox.Spec
		spec, err = formSpec(form)
		if err == nil {
			cl := CallerOf(c)
			sb, err = svc.Create(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, spec)
		}
	}
	if err == nil {
		h.flash(c, views.FlashSuccess, "Sandbox "+shortID(sb.ID)+" is running.")
		return redirect(c, "/sandboxes/"+sb.ID)
	}
	status := errdefs.HTTPStatus(err)
	var qe *errdefs.QuotaError
	switch {
	case errors.As(err, &qe):
		form.Errors = map[string]string{views.FormError: "Over the tenant quota: " + qe.Error() +
			". Destroy a sandbox, ask for smaller limits, or ask a platform operator to raise the quota."}
	case errdefs.IsUnavailable(err):
		form.Errors = map[string]string{views.FormError: "Could not start the sandbox: " + err.Error()}
	default:
		if form.Errors, err = fieldErrors(err); err != nil {
			return err
		}
	}
	v, err := h.sandboxesView(c, &form)
	if err != nil {
		return err
	}
	return render(c, status, views.Sandboxes(h.page(c, "Sandboxes", views.NavSandboxes), v))
}

// formSpec reads the create form: whole numbers, timeout in minutes; an
// error names every field at fault.
func formSpec(f views.SandboxForm) (sandbox.Spec, error) {
	spec := sandbox.Spec{Template: f.Template}
	var errs []error
	for _, x := range []struct {
		name, raw string
		dst       *int
	}{
		{"vcpus", f.VCPUs, &spec.VCPUs}, {"memory_mib", f.MemoryMiB, &spec.MemoryMiB}, {"timeout_minutes", f.TimeoutMinutes, &spec.TimeoutSeconds},
	} {
		if x.raw == "" {
			continue // the default
		}
		n, err := strconv.Atoi(x.raw)
		if err != nil || n < 1 {
			errs = append(errs, errdefs.Invalid(x.name, "number", "must be a whole number of at least 1"))
			continue
		}
		*x.dst = n
	}
	if spec.TimeoutSeconds > sandbox.MaxTimeoutSeconds/60 {
		errs = append(errs, errdefs.Invalid("timeout_minutes", "range", fmt.Sprintf("must be at most %d (a week)", sandbox.MaxTimeoutSeconds/60)))
	}
	if len(errs) > 0 {
		return sandbox.Spec{}, errors.Join(errs...)
	}
	spec.TimeoutSeconds *= 60
	return spec, nil
}

// sandboxView builds one sandbox's page.
func (h *Handlers) sandboxView(c echo.Context) (views.SandboxView, error) {
	svc, err := h.sandboxService()
	if err != nil {
		return views.SandboxView{}, err
	}
	ctx, cl := c.Request().Context(), CallerOf(c)
	st, err := svc.Get(ctx, cl.Tenant.ID, c.Param("id"))
	if err != nil {
		return views.SandboxView{}, err
	}
	evs, err := svc.Events(ctx, cl.Tenant.ID, st.ID)
	if err != nil {
		return views.SandboxView{}, err
	}
	execs, err := svc.Execs(ctx, cl.Tenant.ID, st.ID)
	if err != nil {
		return views.SandboxView{}, err
	}
	sb := st.Sandbox
	v := views.SandboxView{
		Row: sandboxRow(sb), TemplateVersion: sb.TemplateVersion, TimeoutSeconds: sb.TimeoutSeconds, PolicyVersion: sb.PolicyVersion,
		IdleTimeoutSeconds: sb.IdleTimeoutSeconds, EnvKeys: sb.EnvKeys(), Metadata: sb.Metadata(), StartedAt: sb.StartedAt,
		LastActiveAt: sb.LastActiveAt, CreateMS: sb.CreateMS, GuestReadyMS: sb.GuestReadyMS,
		CanEdit: tenants.Can(cl.Role, tenants.PermSandboxesWrite), CanSeeVMs: tenants.Can(cl.Role, tenants.PermVMsRead), Now: h.clock(),
		CanSeeUsage: tenants.Can(cl.Role, tenants.PermUsageRead),
	}
	if sb.State.Active() {
		v.PollURL = "/sandboxes/" + sb.ID + "/live"
	}
	if tok, ok := c.Get(CSRFContextKey).(string); ok {
		v.CSRF = tok
	}
	if s := st.Stats; s != nil {
		v.Stats = &views.SandboxStatsView{CPUTime: s.CPUUsage, MemoryCurrent: s.MemoryCurrent, MemoryMax: s.MemoryMax,
			MemoryPeak: s.MemoryPeak, Pids: s.Pids, PidsMax: s.PidsMax, DiskUsed: s.DiskUsed, DiskSize: s.DiskSize,
			WorkspaceUsed: s.WorkspaceUsed, WorkspaceSize: s.WorkspaceSize, OOMKills: s.OOMKills}
	}
	for _, e := range evs {
		v.Events = append(v.Events, views.SandboxEventRow{State: string(e.State), Reason: e.Reason, Actor: e.Actor, At: e.At})
	}
	for _, x := range execs {
		row := views.ExecRow{ID: x.ID, Argv: x.Argv(), Cwd: x.Cwd, Actor: x.Actor, StartedAt: x.StartedAt, Running: x.EndedAt == nil,
			Reason: x.Reason, Duration: time.Duration(x.DurationMS) * time.Millisecond, Stdout: x.Stdout, Stderr: x.Stderr,
			StdoutBytes: x.StdoutBytes, StderrBytes: x.StderrBytes, Truncated: x.Truncated}
		if x.ExitCode != nil {
			row.ExitCode = strconv.Itoa(*x.ExitCode)
		}
		v.Execs = append(v.Execs, row)
	}
	if v.Terminals, err = h.sandboxTerminals(c, sb.ID); err != nil {
		return views.SandboxView{}, err
	}
	if v.Processes, err = h.sandboxProcesses(c, sb.ID); err != nil { // processes.go
		return views.SandboxView{}, err
	}
	return v, nil
}

// SandboxPage shows one sandbox: its limits, VM, timeline and commands
// with their output: GET /sandboxes/:id.
func (h *Handlers) SandboxPage(c echo.Context) error {
	v, err := h.sandboxView(c)
	if err != nil {
		return err
	}
	if v.CanEdit {
		if v.Ports, err = h.portsView(c, v); err != nil {
			return err
		}
	}
	return render(c, http.StatusOK, views.SandboxPage(h.page(c, "Sandbox "+shortID(v.Row.ID), views.NavSandboxes), v))
}

// SandboxLive is the live part of a sandbox's page (state, usage,
// timeline, commands), polled while the sandbox is active:
// GET /sandboxes/:id/live.
func (h *Handlers) SandboxLive(c echo.Context) error {
	v, err := h.sandboxView(c)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.SandboxLive(v))
}

// DestroySandbox destroys a sandbox from its page or the list:
// POST /sandboxes/:id/destroy.
func (h *Handlers) DestroySandbox(c echo.Context) error {
	if asked, err := h.confirmDestroySandbox(c); asked {
		return err
	}
	svc, err := h.sandboxService()
	if err == nil {
		cl := CallerOf(c)
		_, err = svc.Destroy(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	}
	back := "/sandboxes/" + c.Param("id")
	switch {
	case err == nil:
		h.flash(c, views.FlashSuccess, "Sandbox "+shortID(c.Param("id"))+" destroyed.")
	case errors.Is(err, errdefs.ErrNotFound):
		return err
	case errors.Is(err, vmpool.ErrUnavailable), errors.Is(err, errdefs.ErrConflict):
		h.flash(c, views.FlashError, "Not destroyed: "+err.Error())
	default:
		return err
	}
	return redirect(c, back)
}
