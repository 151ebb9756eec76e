package handlers

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

// The process API (sandbox/process.go): commands that run detached from
// the request that started them, named by their pid in the sandbox.

func processJSON(p sandbox.Process) api.Process {
	cmd := p.Argv()
	if cmd == nil {
		cmd = []string{}
	}
	return api.Process{
		PID: p.PID, ProcessID: p.ID, SandboxID: p.SandboxID, Cmd: cmd, Cwd: p.Cwd, Tag: p.Tag, TTY: p.TTY, State: p.State,
		ExitCode: p.ExitCode, Signal: p.Signal, Reason: p.Reason, StartedBy: p.StartedByName,
		StartedAt: p.StartedAt.UTC().Format(timeJSON), EndedAt: timePtr(p.EndedAt),
		OutputBytes: p.OutputBytes, OutputStart: p.OutputStart, StdinOpen: p.Stdin,
	}
}

// pidParam is the :pid of the route: a process id in the sandbox.
func pidParam(c echo.Context) (uint32, error) {
	v, err := strconv.ParseUint(c.Param("pid"), 10, 32)
	if err != nil || v == 0 {
		return 0, errdefs.Invalid("pid", "invalid", "must be a process id in the sandbox: a whole number from 1")
	}
	return uint32(v), nil
}

// APIStartProcess starts a process: POST /api/v1/sandboxes/:id/processes
// answers 201 once it runs, with its pid.
func (h *Handlers) APIStartProcess(c echo.Context) error {
	var in api.StartProcess
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl := CallerOf(c)
	p, err := h.sbx.StartProcess(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), sandbox.ProcessRequest{
		Cmd: in.Cmd, Env: in.Env, Cwd: in.Cwd, Stdin: in.Stdin, TTY: in.TTY, Cols: in.Cols, Rows: in.Rows,
		TimeoutSeconds: in.TimeoutSeconds, Tag: in.Tag,
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, processJSON(p))
}

// APIProcesses lists a sandbox's processes: GET .../processes.
func (h *Handlers) APIProcesses(c echo.Context) error {
	ps, err := h.sbx.ListProcesses(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("id"))
	if err != nil {
		return err
	}
	out := api.ProcessList{Processes: make([]api.Process, 0, len(ps))}
	for _, p := range ps {
		out.Processes = append(out.Processes, processJSON(p))
	}
	return c.JSON(http.StatusOK, out)
}

// APIProcess answers one process: GET .../processes/:pid.
func (h *Handlers) APIProcess(c echo.Context) error {
	pid, err := h.processSandbox(c)
	if err != nil {
		return err
	}
	p, err := h.sbx.GetProcess(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("id"), pid)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, processJSON(p))
}

// processSandbox checks the route's sandbox (another tenant's is not
// found, whatever the pid), then parses its pid.
func (h *Handlers) processSandbox(c echo.Context) (uint32, error) {
	if _, err := h.sbx.Store().Sandbox(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("id")); err != nil {
		return 0, err
	}
	return pidParam(c)
}

// APIProcessOutput streams a process's output from ?offset= as
// newline-delimited JSON (chunked): ProcessEvents, the last one its status.
// With ?follow=1 it stays open until the process ends; the client going
// away does not touch the process.
func (h *Handlers) APIProcessOutput(c echo.Context) error {
	pid, err := h.processSandbox(c)
	if err != nil {
		return err
	}
	var offset int64
	if v := c.QueryParam("offset"); v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
			return errdefs.Invalid("offset", "invalid", "offset must be a whole number of bytes, 0 or more")
		}
	}
	follow := false
	switch v := c.QueryParam("follow"); v {
	case "", "0", "false":
	case "1", "true":
		follow = true
	default:
		return errdefs.Invalid("follow", "invalid", "must be 1, true, 0 or false")
	}
	timeout := h.cfg.StreamWriteTimeout
	if timeout <= 0 {
		timeout = DefaultStreamWriteTimeout
	}
	w := c.Response()
	rc := http.NewResponseController(w)
	write := func(e api.ProcessEvent) error {
		if !w.Committed {
			w.Header().Set(echo.HeaderContentType, api.MediaNDJSON)
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
		}
		// A reader that stops reading is cut off; the process goes on.
		rc.SetWriteDeadline(time.Now().Add(timeout))
		b, _ := json.Marshal(e)
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
		return rc.Flush()
	}
	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	p, err := h.sbx.ProcessOutput(ctx, CallerOf(c).Tenant.ID, c.Param("id"), pid, offset, follow, func(ch sandbox.ProcessChunk) error {
		off := ch.Offset
		e := api.ProcessEvent{Type: ch.Stream, Offset: &off}
		if utf8.Valid(ch.Data) {
			e.Data = string(ch.Data)
		} else {
			e.DataBase64 = base64.StdEncoding.EncodeToString(ch.Data)
		}
		return write(e)
	})
	if err != nil && !w.Committed {
		return err // refused (a bad offset, not found): a problem document
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		// A write that failed: the client is gone.
		return nil //nolint:nilerr // nothing more can reach it
	}
	pj := processJSON(p)
	write(api.ProcessEvent{Type: "status", Process: &pj})
	return nil
}

// APIProcessStdin writes to a process's stdin: POST .../processes/:pid/stdin.
func (h *Handlers) APIProcessStdin(c echo.Context) error {
	pid, err := h.processSandbox(c)
	if err != nil {
		return err
	}
	var in api.ProcessStdin
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	data := []byte(in.Data)
	switch {
	case in.Data != "" && in.DataBase64 != "":
		return errdefs.Invalid("data", "exclusive", "give data or data_base64, not both")
	case in.DataBase64 != "":
		if data, err = base64.StdEncoding.DecodeString(in.DataBase64); err != nil {
			return errdefs.Invalid("data_base64", "base64", "must be standard base64")
		}
	}
	if err := h.sbx.WriteStdin(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("id"), pid, data); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// APIProcessCloseStdin closes a process's stdin: POST .../stdin/close.
func (h *Handlers) APIProcessCloseStdin(c echo.Context) error {
	pid, err := h.processSandbox(c)
	if err != nil {
		return err
	}
	if err := h.sbx.CloseStdin(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("id"), pid); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// APIProcessSignal sends a signal: POST .../processes/:pid/signal.
func (h *Handlers) APIProcessSignal(c echo.Context) error {
	pid, err := h.processSandbox(c)
	if err != nil {
		return err
	}
	var in api.ProcessSignal
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl := CallerOf(c)
	if err := h.sbx.Signal(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), pid, in.Signal); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// APIProcessResize resizes a process's terminal: POST .../resize.
func (h *Handlers) APIProcessResize(c echo.Context) error {
	pid, err := h.processSandbox(c)
	if err != nil {
		return err
	}
	var in api.ProcessResize
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if err := h.sbx.Resize(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("id"), pid, in.Cols, in.Rows); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// APIProcessWait waits for a process to end, for at most
// ?timeout_seconds= (default 60): GET .../processes/:pid/wait answers the
// process as it is then (still running when the wait ran out).
func (h *Handlers) APIProcessWait(c echo.Context) error {
	pid, err := h.processSandbox(c)
	if err != nil {
		return err
	}
	secs := 60
	if v := c.QueryParam("timeout_seconds"); v != "" {
		if secs, err = strconv.Atoi(v); err != nil || secs < 1 || secs > 3600 {
			return errdefs.Invalid("timeout_seconds", "range", "must be between 1 and 3600")
		}
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), time.Duration(secs)*time.Second)
	defer cancel()
	p, err := h.sbx.Wait(ctx, CallerOf(c).Tenant.ID, c.Param("id"), pid)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return c.JSON(http.StatusOK, processJSON(p))
}

// APISetTimeout sets a running sandbox's remaining lifetime:
// POST /api/v1/sandboxes/:id/timeout {timeout_seconds}.
func (h *Handlers) APISetTimeout(c echo.Context) error {
	var in api.SetTimeout
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl := CallerOf(c)
	sb, err := h.sbx.SetTimeout(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), in.TimeoutSeconds)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sandboxJSON(sb))
}

// sandboxProcesses are the processes a sandbox page lists.
func (h *Handlers) sandboxProcesses(c echo.Context, sandboxID string) (views.SandboxProcesses, error) {
	ps, err := h.sbx.ListProcesses(c.Request().Context(), CallerOf(c).Tenant.ID, sandboxID)
	if err != nil {
		return views.SandboxProcesses{}, err
	}
	out := views.SandboxProcesses{Rows: make([]views.ProcessRow, 0, len(ps))}
	for _, p := range ps {
		out.Rows = append(out.Rows, views.ProcessRow{PID: p.PID, Command: p.Argv(), Tag: p.Tag, State: p.State, ExitCode: p.ExitCode,
			Signal: p.Signal, Reason: p.Reason, StartedBy: p.StartedByName, StartedAt: p.StartedAt, OutputBytes: p.OutputBytes, TTY: p.TTY})
	}
	return out, nil
}
