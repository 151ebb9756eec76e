package api

// Terminal is a terminal session in a sandbox.
type Terminal struct {
	ID             string   `json:"id"`
	SandboxID      string   `json:"sandbox_id"`
	OpenedBy       string   `json:"opened_by"`
	Command        []string `json:"command" nonnull:"true"`
	Cols           int      `json:"cols"`
	Rows           int      `json:"rows"`
	StartedAt      string   `json:"started_at" format:"date-time"`
	EndedAt        *string  `json:"ended_at,omitempty" format:"date-time"`
	EndReason      string   `json:"end_reason,omitempty" doc:"e.g. the process exited with code 0, the sandbox was destroyed (requested)"`
	ExitCode       *int     `json:"exit_code,omitempty"`
	BytesOut       int64    `json:"bytes_out" doc:"terminal output"`
	BytesIn        int64    `json:"bytes_in" doc:"keystrokes from drivers"`
	RecordInput    bool     `json:"record_input" doc:"keystrokes are recorded too"`
	RecordingBytes int64    `json:"recording_bytes"`
	Dropped        int64    `json:"recording_dropped_events" doc:"events the recorder had to drop (marked in the recording)"`
	// RecordingTruncated says where and why the recording stopped at a cap
	// (absent when it did not); the terminal itself went on.
	RecordingTruncated string `json:"recording_truncated,omitempty" doc:"where and why the recording stopped at a cap; the terminal itself went on"`
	TruncatedBytes     int64  `json:"recording_truncated_bytes,omitempty"`
	WatchersCut        int    `json:"watchers_cut" doc:"clients cut off for being too slow"`
	RecordingURL       string `json:"recording_url,omitempty" doc:"absent once retention removed the recording"`
	Live               bool   `json:"live"`
	// Who is on a live session (this server's view).
	Driver   *string  `json:"driver,omitempty" doc:"live: who holds control, '' for nobody"`
	Watchers []string `json:"watchers,omitempty"`
	Requests []string `json:"control_requests,omitempty" doc:"who asked for control"`
}

// TerminalList answers GET /api/v1/terminals.
type TerminalList struct {
	Terminals []Terminal `json:"terminals" nonnull:"true"`
}

// TerminalQuery filters the terminal list.
type TerminalQuery struct {
	Sandbox string `query:"sandbox" doc:"only this sandbox's sessions"`
}

// TerminalParams opens or joins a terminal (GET /api/v1/sandboxes/{id}/terminal).
type TerminalParams struct {
	Session string   `query:"session" doc:"join this live session instead of opening a new one"`
	Watch   string   `query:"watch" enum:"0,1,true" doc:"1: join read-only (managers and auditors may only watch)"`
	Offset  int64    `query:"offset" minimum:"0" doc:"resume after this many output bytes (the count received since the hello's offset); default: the current screen"`
	Cols    int      `query:"cols" minimum:"1" maximum:"1000" doc:"columns of a new terminal; default 80"`
	Rows    int      `query:"rows" minimum:"1" maximum:"1000" doc:"rows of a new terminal; default 24"`
	Cmd     []string `query:"cmd" doc:"the command of a new terminal, one argument per parameter; default a login shell"`
}

// TerminalControl is a text frame of the terminal WebSocket.
type TerminalControl struct {
	Type     string   `json:"type" enum:"hello,resize,role,presence,requested,end,error,request,take,release,cancel"`
	Session  string   `json:"session,omitempty"`
	Sandbox  string   `json:"sandbox,omitempty"`
	Role     string   `json:"role,omitempty" enum:"driver,watcher"`
	CanDrive bool     `json:"can_drive,omitempty"`
	Offset   *int64   `json:"offset,omitempty" doc:"hello: offset of the next output byte"`
	Missed   int64    `json:"missed,omitempty" doc:"hello: bytes no longer held between the offset asked and the one given"`
	Cols     uint16   `json:"cols,omitempty"`
	Rows     uint16   `json:"rows,omitempty"`
	Driver   string   `json:"driver,omitempty"`
	Watchers []string `json:"watchers,omitempty"`
	Requests []string `json:"requests,omitempty"`
	By       string   `json:"by,omitempty" doc:"who asked for, or took, control; hello: the client itself as the others see it"`
	Reason   string   `json:"reason,omitempty" doc:"end: why"`
	ExitCode *int     `json:"exit_code,omitempty"`
	Message  string   `json:"message,omitempty" doc:"error: why a message was refused"`
}

// EgressEvent is one decision of the egress gateway.
type EgressEvent struct {
	ID               string `json:"id"`
	SandboxID        string `json:"sandbox_id"`
	VMID             string `json:"vm_id"`
	Method           string `json:"method" doc:"CONNECT, or the plain HTTP method"`
	Host             string `json:"host" doc:"the name the sandbox asked for"`
	Port             int    `json:"port"`
	Decision         string `json:"decision" enum:"allow,deny"`
	Rule             string `json:"rule" doc:"what decided: e.g. 'allow *.github.com:443', 'default deny', 'blocked: cloud metadata address 169.254.169.254'"`
	Addr             string `json:"addr,omitempty" doc:"the address the gateway connected to (the one it checked)"`
	PolicyVersion    int    `json:"policy_version" doc:"the tenant policy version applied"`
	Intercepted      bool   `json:"intercepted" doc:"the gateway terminated TLS to swap credentials"`
	Status           int    `json:"status,omitempty" doc:"the proxy's or upstream's HTTP status"`
	Error            string `json:"error,omitempty" doc:"why an allowed connection failed"`
	BytesUp          int64  `json:"bytes_up" doc:"bytes the sandbox sent"`
	BytesDown        int64  `json:"bytes_down" doc:"bytes the sandbox received"`
	StartedAt        string `json:"started_at" format:"date-time"`
	DurationMS       int64  `json:"duration_ms"`
	Suppressed       int    `json:"suppressed,omitempty" doc:"connections of the sandbox since its previous event that the per-sandbox rate limit kept out of the log (metered all the same)"`
	SecretsReflected int64  `json:"secrets_reflected" doc:"real secret values rewritten to placeholders in the connection's responses"`
}

// EgressEventList answers GET /api/v1/egress-events.
type EgressEventList struct {
	Events []EgressEvent `json:"events"`
}

// EgressQuery filters the egress decisions.
type EgressQuery struct {
	Sandbox  string `query:"sandbox" doc:"only this sandbox's connections"`
	Decision string `query:"decision" enum:"allow,deny" doc:"only allowed or only denied connections"`
	Limit    int    `query:"limit" minimum:"1" maximum:"500" doc:"at most this many; default 500"`
}
