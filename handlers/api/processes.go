package api

// StartProcess is the body of POST /api/v1/sandboxes/{id}/processes.
type StartProcess struct {
	Cmd            []string          `json:"cmd" required:"true" doc:"the program and its arguments, e.g. [\"python3\",\"-m\",\"http.server\"]"`
	Env            map[string]string `json:"env,omitempty"`
	Cwd            string            `json:"cwd,omitempty" doc:"working directory; default /workspace"`
	Stdin          bool              `json:"stdin,omitempty" doc:"keep stdin open for POST .../stdin (always open with tty)"`
	TTY            bool              `json:"tty,omitempty" doc:"run it on a terminal (output on stdout only; resizable)"`
	Cols           uint16            `json:"cols,omitempty" doc:"with tty: the terminal's width, 1-1000; default 80"`
	Rows           uint16            `json:"rows,omitempty" doc:"with tty: the terminal's height, 1-1000; default 24"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" minimum:"0" doc:"kill it after that long; 0 (default): none of its own, it lives as long as its sandbox"`
	Tag            string            `json:"tag,omitempty" doc:"a label of your own, at most 128 bytes"`
}

// Process is a process started through the process API.
type Process struct {
	PID         uint32   `json:"pid" doc:"its process id inside the sandbox's pid namespace: what the other process routes name it by"`
	ProcessID   string   `json:"process_id" doc:"its unique id (a pid comes back once its process ended)"`
	SandboxID   string   `json:"sandbox_id"`
	Cmd         []string `json:"cmd" nonnull:"true"`
	Cwd         string   `json:"cwd,omitempty"`
	Tag         string   `json:"tag,omitempty"`
	TTY         bool     `json:"tty"`
	State       string   `json:"state" enum:"running,exited,lost" doc:"lost: its agent no longer had it, or its sandbox ended while no server watched"`
	ExitCode    *int     `json:"exit_code,omitempty" doc:"once exited: its exit code, or 128+signal"`
	Signal      string   `json:"signal,omitempty" doc:"the signal that ended it, e.g. KILL"`
	Reason      string   `json:"reason,omitempty" doc:"exited, timeout, oom, killed; or why it was lost"`
	StartedBy   string   `json:"started_by"`
	StartedAt   string   `json:"started_at" format:"date-time"`
	EndedAt     *string  `json:"ended_at,omitempty" format:"date-time"`
	OutputBytes int64    `json:"output_bytes" doc:"what it printed so far, stdout and stderr together: the offset of its next byte"`
	OutputStart int64    `json:"output_start" doc:"the oldest offset still readable (the server keeps the latest 256 KiB per process)"`
	StdinOpen   bool     `json:"stdin_open"`
}

// ProcessList answers GET /api/v1/sandboxes/{id}/processes.
type ProcessList struct {
	Processes []Process `json:"processes" nonnull:"true" doc:"running ones first, then the latest ended, newest first"`
}

// ProcessParams names a process of the sandbox by its pid.
type ProcessParams struct {
	PID uint32 `path:"pid" doc:"the process id inside the sandbox (Process.pid)"`
}

// ProcessOutputQuery says from where to read a process's output.
type ProcessOutputQuery struct {
	PID    uint32 `path:"pid" doc:"the process id inside the sandbox (Process.pid)"`
	Offset int64  `query:"offset" minimum:"0" doc:"the output byte to start from (stdout and stderr together); default 0. Output older than output_start is gone: the first event's offset says where it really starts"`
	Follow string `query:"follow" enum:"0,1,true,false" doc:"1: keep the response open and stream what the process prints next, until it ends (the client may go at any time: the process is not affected)"`
}

// ProcessEvent is one line of GET .../processes/{pid}/output
// (newline-delimited JSON, chunked).
type ProcessEvent struct {
	Type       string   `json:"type" enum:"stdout,stderr,status" doc:"stdout and stderr carry output; the last line is always status"`
	Offset     *int64   `json:"offset,omitempty" doc:"stdout, stderr: where data starts in the output"`
	Data       string   `json:"data,omitempty" doc:"output as text"`
	DataBase64 string   `json:"data_base64,omitempty" doc:"output that is not UTF-8"`
	Process    *Process `json:"process,omitempty" doc:"status: the process as it is now (output_bytes: where to go on from)"`
}

// ProcessStdin is the body of POST .../processes/{pid}/stdin: exactly one
// of data and data_base64.
type ProcessStdin struct {
	Data       string `json:"data,omitempty" doc:"text to write"`
	DataBase64 string `json:"data_base64,omitempty" doc:"bytes to write, base64"`
}

// ProcessSignal is the body of POST .../processes/{pid}/signal.
type ProcessSignal struct {
	Signal string `json:"signal" required:"true" doc:"SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT, SIGSTOP, SIGTSTP, SIGWINCH, SIGALRM or SIGPIPE (the SIG prefix is optional); sent to its process group"`
}

// ProcessResize is the body of POST .../processes/{pid}/resize.
type ProcessResize struct {
	Cols uint16 `json:"cols" required:"true" doc:"1-1000"`
	Rows uint16 `json:"rows" required:"true" doc:"1-1000"`
}

// ProcessWaitQuery bounds a wait.
type ProcessWaitQuery struct {
	PID            uint32 `path:"pid" doc:"the process id inside the sandbox (Process.pid)"`
	TimeoutSeconds int    `query:"timeout_seconds" minimum:"1" maximum:"3600" doc:"answer after at most that long, the process still running; default 60"`
}

// SetTimeout is the body of POST /api/v1/sandboxes/{id}/timeout.
type SetTimeout struct {
	TimeoutSeconds int `json:"timeout_seconds" required:"true" minimum:"1" doc:"the sandbox's remaining lifetime from now, longer or shorter than it had; at most the tenant policy's lifetime.max_timeout_seconds"`
}
