package mcp

import (
	"context"
	"errors"
	"time"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// The process tools, on the process API (sandbox/process.go): commands
// that outlive the call that started them, named by their pid.

// ProcessOut is a process as the tools answer it.
type ProcessOut struct {
	PID         uint32   `json:"pid" jsonschema:"its process id in the sandbox: what the other process tools take"`
	State       string   `json:"state" jsonschema:"running, exited or lost"`
	ExitCode    *int     `json:"exit_code,omitempty" jsonschema:"once exited: its exit code, or 128+signal"`
	Signal      string   `json:"signal,omitempty"`
	Reason      string   `json:"reason,omitempty"`
	Cmd         []string `json:"cmd"`
	Tag         string   `json:"tag,omitempty"`
	OutputBytes int64    `json:"output_bytes" jsonschema:"what it printed so far: the offset of its next byte"`
}

func processOut(p sandbox.Process) ProcessOut {
	return ProcessOut{PID: p.PID, State: p.State, ExitCode: p.ExitCode, Signal: p.Signal, Reason: p.Reason, Cmd: p.Argv(),
		Tag: p.Tag, OutputBytes: p.OutputBytes}
}

// StartProcessIn is start_process's input: the sandbox and POST
// /api/v1/sandboxes/{id}/processes's body.
type StartProcessIn struct {
	SandboxRef
	api.StartProcess
}

func (s *Server) startProcess(ctx context.Context, c *caller, in StartProcessIn) (ProcessOut, error) {
	if err := in.check(); err != nil {
		return ProcessOut{}, err
	}
	p, err := s.sbx.StartProcess(ctx, c.actor, c.tenantID, in.SandboxID, sandbox.ProcessRequest{
		Cmd: in.Cmd, Env: in.Env, Cwd: in.Cwd, Stdin: in.Stdin, TTY: in.TTY, Cols: in.Cols, Rows: in.Rows,
		TimeoutSeconds: in.TimeoutSeconds, Tag: in.Tag,
	})
	if err != nil {
		return ProcessOut{}, err
	}
	return processOut(p), nil
}

// ProcessesOut is a sandbox's processes.
type ProcessesOut struct {
	Processes []ProcessOut `json:"processes"`
}

func (s *Server) listProcesses(ctx context.Context, c *caller, in SandboxRef) (ProcessesOut, error) {
	if err := in.check(); err != nil {
		return ProcessesOut{}, err
	}
	ps, err := s.sbx.ListProcesses(ctx, c.tenantID, in.SandboxID)
	if err != nil {
		return ProcessesOut{}, err
	}
	out := ProcessesOut{Processes: make([]ProcessOut, 0, len(ps))}
	for _, p := range ps {
		out.Processes = append(out.Processes, processOut(p))
	}
	return out, nil
}

// ProcessRef names a process of a sandbox.
type ProcessRef struct {
	SandboxRef
	PID uint32 `json:"pid" jsonschema:"the process's pid (start_process or list_processes answer it)"`
}

func (r ProcessRef) check() error {
	if err := r.SandboxRef.check(); err != nil {
		return err
	}
	if r.PID == 0 {
		return errdefs.Invalid("pid", "required", "is required: the pid start_process or list_processes answered")
	}
	return nil
}

// ReadProcessIn is read_process_output's input.
type ReadProcessIn struct {
	ProcessRef
	Offset      int64 `json:"offset,omitempty" jsonschema:"the output byte to read from (stdout and stderr together); default 0; the last answer's next_offset goes on"`
	WaitSeconds int   `json:"wait_seconds,omitempty" jsonschema:"first wait up to this long (at most 300) for the process to end"`
}

// ProcessOutput is a process's output from an offset.
type ProcessOutput struct {
	Process    ProcessOut `json:"process"`
	Offset     int64      `json:"offset" jsonschema:"where output starts (past the asked offset when older output is gone)"`
	NextOffset int64      `json:"next_offset" jsonschema:"the offset to read from next"`
	Output     string     `json:"output" jsonschema:"stdout and stderr as they came, as text"`
	Truncated  bool       `json:"truncated,omitempty" jsonschema:"more than 1 MiB: read on from next_offset"`
}

// maxWaitSeconds bounds read_process_output's wait.
const maxWaitSeconds = 300

func (s *Server) readProcessOutput(ctx context.Context, c *caller, in ReadProcessIn) (ProcessOutput, error) {
	if err := in.check(); err != nil {
		return ProcessOutput{}, err
	}
	if in.WaitSeconds < 0 || in.WaitSeconds > maxWaitSeconds {
		return ProcessOutput{}, errdefs.Invalid("wait_seconds", "range", "must be from 0 to 300")
	}
	if in.WaitSeconds > 0 {
		wctx, cancel := context.WithTimeout(ctx, time.Duration(in.WaitSeconds)*time.Second)
		_, err := s.sbx.Wait(wctx, c.tenantID, in.SandboxID, in.PID)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return ProcessOutput{}, err
		}
	}
	out := ProcessOutput{Offset: -1, NextOffset: in.Offset}
	buf := &capped{max: maxOutput}
	p, err := s.sbx.ProcessOutput(ctx, c.tenantID, in.SandboxID, in.PID, in.Offset, false, func(ch sandbox.ProcessChunk) error {
		if out.Offset < 0 {
			out.Offset = ch.Offset
		}
		n, _ := buf.Write(ch.Data)
		if buf.cut {
			out.Truncated = true
			return errStop
		}
		out.NextOffset = ch.Offset + int64(n)
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return ProcessOutput{}, err
	}
	if out.Offset < 0 {
		out.Offset = in.Offset
	}
	out.Process, out.Output = processOut(p), buf.text()
	return out, nil
}

// errStop ends a read that has its fill.
var errStop = errors.New("enough output")

// SignalProcessIn is signal_process's input.
type SignalProcessIn struct {
	ProcessRef
	api.ProcessSignal
}

func (s *Server) signalProcess(ctx context.Context, c *caller, in SignalProcessIn) (ProcessOut, error) {
	if err := in.check(); err != nil {
		return ProcessOut{}, err
	}
	if err := s.sbx.Signal(ctx, c.actor, c.tenantID, in.SandboxID, in.PID, in.Signal); err != nil {
		return ProcessOut{}, err
	}
	p, err := s.sbx.GetProcess(ctx, c.tenantID, in.SandboxID, in.PID)
	if err != nil {
		return ProcessOut{}, err
	}
	return processOut(p), nil
}

// SetTimeoutIn is set_timeout's input: the sandbox and POST
// /api/v1/sandboxes/{id}/timeout's body.
type SetTimeoutIn struct {
	SandboxRef
	api.SetTimeout
}

func (s *Server) setTimeout(ctx context.Context, c *caller, in SetTimeoutIn) (Sandbox, error) {
	if err := in.check(); err != nil {
		return Sandbox{}, err
	}
	sb, err := s.sbx.SetTimeout(ctx, c.actor, c.tenantID, in.SandboxID, in.TimeoutSeconds)
	if err != nil {
		return Sandbox{}, err
	}
	return sandboxOut(sb), nil
}
