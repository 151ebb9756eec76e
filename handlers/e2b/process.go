package e2b

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/stockade-dev/stockade/handlers/e2b/proto/process"
	"github.com/stockade-dev/stockade/handlers/e2b/proto/process/processconnect"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// processService is envd's process.Process over sandbox.Service's process
// API: a started process lives on after its stream ends (E2B's
// behaviour), until it exits, is killed, its Connect-Timeout-Ms passes or
// its sandbox ends.
type processService struct {
	processconnect.UnimplementedProcessHandler // StreamInput: the JS SDK never calls it
	s                                          *Server
}

// keepaliveEvery is how often a stream says it is alive (the SDK's
// Keepalive-Ping-Interval, seconds; 50 when absent).
func keepaliveEvery(h interface{ Get(string) string }) time.Duration {
	n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval"))
	if err != nil || n < 1 || n > 3600 {
		n = 50
	}
	return time.Duration(n) * time.Second
}

func (p *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], st *connect.ServerStream[process.StartResponse]) error {
	b := bindingOf(ctx)
	m := req.Msg
	cfg := m.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	pr := sandbox.ProcessRequest{Cmd: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Env: cfg.GetEnvs(),
		Cwd: inPath(cfg.GetCwd()), Stdin: m.GetStdin(), Tag: m.GetTag()}
	if m.Pty != nil {
		pr.TTY = true
		pr.Cols, pr.Rows = uint16(min(m.GetPty().GetSize().GetCols(), 1000)), uint16(min(m.GetPty().GetSize().GetRows(), 1000))
	}
	if ms, err := strconv.ParseInt(req.Header().Get("Connect-Timeout-Ms"), 10, 64); err == nil && ms > 0 {
		pr.TimeoutSeconds = int((ms + 999) / 1000)
	}
	proc, err := p.s.sbx.StartProcess(ctx, b.actor, b.tenantID, b.sandboxID, pr)
	if err != nil {
		return rpcErr(err)
	}
	send := func(ev *process.ProcessEvent) error { return st.Send(&process.StartResponse{Event: ev}) }
	return p.s.stream(ctx, req.Header(), b, proc.PID, 0, pr.TTY, send)
}

func (p *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], st *connect.ServerStream[process.ConnectResponse]) error {
	b := bindingOf(ctx)
	pid := req.Msg.GetProcess().GetPid()
	proc, err := p.s.sbx.GetProcess(ctx, b.tenantID, b.sandboxID, pid)
	if err != nil {
		return rpcErr(err)
	}
	send := func(ev *process.ProcessEvent) error { return st.Send(&process.ConnectResponse{Event: ev}) }
	return p.s.stream(ctx, req.Header(), b, pid, proc.OutputBytes, proc.TTY, send)
}

// stream sends a process's start event, its output from offset (as
// data.pty on a terminal), keepalives while it is quiet, and its end.
func (s *Server) stream(ctx context.Context, h interface{ Get(string) string }, b binding, pid uint32, offset int64, onTTY bool, send func(*process.ProcessEvent) error) error {
	var mu sync.Mutex
	locked := func(ev *process.ProcessEvent) error {
		mu.Lock()
		defer mu.Unlock()
		return send(ev)
	}
	if err := locked(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: pid}}}); err != nil {
		return err
	}
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		t := time.NewTicker(keepaliveEvery(h))
		defer t.Stop()
		for {
			select {
			case <-kctx.Done():
				return
			case <-t.C:
				_ = locked(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}})
			}
		}
	}()
	rec, err := s.sbx.ProcessOutput(ctx, b.tenantID, b.sandboxID, pid, offset, true, func(c sandbox.ProcessChunk) error {
		d := &process.ProcessEvent_DataEvent{}
		switch {
		case c.Stream == "stderr":
			d.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: c.Data}
		case onTTY:
			d.Output = &process.ProcessEvent_DataEvent_Pty{Pty: c.Data}
		default:
			d.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: c.Data}
		}
		return locked(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}})
	})
	if err != nil {
		return rpcErr(err)
	}
	stop()
	return locked(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: endEvent(rec)}})
}

func endEvent(p sandbox.Process) *process.ProcessEvent_EndEvent {
	e := &process.ProcessEvent_EndEvent{}
	switch {
	case p.ExitCode != nil && p.Signal == "":
		e.ExitCode, e.Exited, e.Status = int32(*p.ExitCode), true, fmt.Sprintf("exit status %d", *p.ExitCode)
	case p.Signal != "":
		msg := "signal: " + p.Signal
		e.ExitCode, e.Status, e.Error = -1, msg, &msg
	default:
		msg := "process " + p.State
		if p.Reason != "" {
			msg += ": " + p.Reason
		}
		e.ExitCode, e.Status, e.Error = -1, msg, &msg
	}
	return e
}

func (p *processService) List(ctx context.Context, _ *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	b := bindingOf(ctx)
	procs, err := p.s.sbx.ListProcesses(ctx, b.tenantID, b.sandboxID)
	if err != nil {
		return nil, rpcErr(err)
	}
	out := &process.ListResponse{}
	for _, pr := range procs {
		if pr.State != sandbox.ProcessRunning {
			continue
		}
		argv := pr.Argv()
		cfg := &process.ProcessConfig{Envs: map[string]string{}}
		if len(argv) > 0 {
			cfg.Cmd, cfg.Args = argv[0], argv[1:]
		}
		if pr.Cwd != "" {
			cwd := outPath(pr.Cwd)
			cfg.Cwd = &cwd
		}
		info := &process.ProcessInfo{Config: cfg, Pid: pr.PID}
		if pr.Tag != "" {
			tag := pr.Tag
			info.Tag = &tag
		}
		out.Processes = append(out.Processes, info)
	}
	return connect.NewResponse(out), nil
}

func (p *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	b := bindingOf(ctx)
	in := req.Msg.GetInput()
	data := in.GetStdin()
	if data == nil {
		data = in.GetPty()
	}
	if err := p.s.sbx.WriteStdin(ctx, b.tenantID, b.sandboxID, req.Msg.GetProcess().GetPid(), data); err != nil {
		return nil, rpcErr(err)
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func (p *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	b := bindingOf(ctx)
	if err := p.s.sbx.CloseStdin(ctx, b.tenantID, b.sandboxID, req.Msg.GetProcess().GetPid()); err != nil {
		return nil, rpcErr(err)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

func (p *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	b := bindingOf(ctx)
	var sig string
	switch req.Msg.GetSignal() {
	case process.Signal_SIGNAL_SIGKILL:
		sig = "KILL"
	case process.Signal_SIGNAL_SIGTERM:
		sig = "TERM"
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %d: one of SIGNAL_SIGTERM, SIGNAL_SIGKILL", req.Msg.GetSignal()))
	}
	if err := p.s.sbx.Signal(ctx, b.actor, b.tenantID, b.sandboxID, req.Msg.GetProcess().GetPid(), sig); err != nil {
		if errdefs.IsConflict(err) { // it ended: envd knows only running processes
			return nil, connect.NewError(connect.CodeNotFound, err)
		}
		return nil, rpcErr(err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

func (p *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	b := bindingOf(ctx)
	if req.Msg.Pty != nil {
		sz := req.Msg.GetPty().GetSize()
		if err := p.s.sbx.Resize(ctx, b.tenantID, b.sandboxID, req.Msg.GetProcess().GetPid(), uint16(min(sz.GetCols(), 1000)), uint16(min(sz.GetRows(), 1000))); err != nil {
			return nil, rpcErr(err)
		}
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}
