package terminal

// The WebSocket protocol of a terminal: binary frames carry terminal data
// (output to clients, keystrokes from the driver), JSON text frames carry
// Control messages. A client counts the output bytes it received from the
// hello's Offset on, and resumes a dropped connection with that count
// (?session=ID&offset=N), so nothing is lost or repeated while the bytes
// are still in the session's ring buffer.

// Control message types.
const (
	// Server to client.
	MsgHello     = "hello"      // first message: session, role, offset of the next data byte, size
	MsgResize    = "resize"     // also client to server (driver only)
	MsgRole      = "role"       // this client's role changed
	MsgPresence  = "presence"   // who drives and who watches changed
	MsgRequested = "requested"  // someone asks for control (By)
	MsgEnd       = "end"        // the session ended (Reason, ExitCode); the server closes next
	MsgError     = "error"      // a client message was refused (Message)
	MsgRequest   = "request"    // client to server: ask for control
	MsgTake      = "take"       // client to server: take control after asking
	MsgRelease   = "release"    // client to server: stop driving
	MsgCancel    = "cancel"     // client to server: withdraw a request for control
	RoleDriver   = "driver"     // may type and resize
	RoleWatcher  = "watcher"    // reads only
	closeTooSlow = "too slow: " // close reason prefix of a cut watcher
)

// Control is one JSON text frame. Type says which fields are set.
type Control struct {
	Type string `json:"type"`

	Session  string   `json:"session,omitempty"`
	Sandbox  string   `json:"sandbox,omitempty"`
	Role     string   `json:"role,omitempty"`
	CanDrive bool     `json:"can_drive,omitempty"`
	Offset   *int64   `json:"offset,omitempty"`
	Missed   int64    `json:"missed,omitempty"` // bytes between the asked offset and the oldest held
	Cols     uint16   `json:"cols,omitempty"`
	Rows     uint16   `json:"rows,omitempty"`
	Driver   string   `json:"driver,omitempty"`
	Watchers []string `json:"watchers,omitempty"`
	// Requests names who asked for control and waits for it.
	Requests []string `json:"requests,omitempty"`
	// By is who asked for or took control; in the hello, the client
	// itself as the others see it.
	By       string `json:"by,omitempty"`
	Reason   string `json:"reason,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Message  string `json:"message,omitempty"`
}
