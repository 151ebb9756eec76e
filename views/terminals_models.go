package views

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// TerminalsView is the terminals page: who is on which terminal right now,
// the running sandboxes a terminal can be opened in, and the recordings.
type TerminalsView struct {
	Live       TerminalLiveList
	Sandboxes  []TerminalSandbox
	Recordings []TerminalRecordingRow
	CanDrive   bool
	// Unavailable says why no terminal can be opened now ("" when they can).
	Unavailable string
}

// TerminalLiveList is the "live now" list; with a PollURL htmx refreshes it.
type TerminalLiveList struct {
	Rows     []TerminalLiveRow
	PollURL  string
	CanDrive bool
	// Empty is shown when there are no rows.
	Empty string
}

// TerminalLiveRow is one live session with who is on it.
type TerminalLiveRow struct {
	ID              string
	SandboxID       string
	OpenedBy        string
	Command         []string
	Driver          string // "" when nobody holds control
	DriverConnected bool
	Watchers        []string
	Requests        []string // who asked for control
	StartedAt       time.Time
	BytesOut        int64
	Cols, Rows      int
	// Mine: the viewer drives it from a connected page already, so the
	// row offers no Join (it would open the same terminal a second time).
	Mine bool
}

// TerminalSandbox is a running sandbox a terminal can be opened in.
type TerminalSandbox struct {
	ID        string
	Template  string
	CreatedBy string
	CreatedAt time.Time
}

// TerminalRecordingRow is one recorded (ended) session.
type TerminalRecordingRow struct {
	ID             string
	SandboxID      string
	OpenedBy       string
	Command        []string
	StartedAt      time.Time
	EndedAt        *time.Time
	EndReason      string
	ExitCode       string // "" when the process did not exit by itself
	BytesOut       int64
	RecordingBytes int64
	Dropped        int64 // events the recorder had to drop
	// Truncated says where and why the recording stopped at a cap
	// ("truncated at 50 MiB: the session's cap is 50 MiB"); "" when it did not.
	Truncated     string
	WatchersCut   int
	RecordedInput bool
	Purged        bool // retention removed the recording
	ExpiresAt     time.Time
}

// Duration is how long the session ran.
func (r TerminalRecordingRow) Duration() time.Duration {
	if r.EndedAt == nil {
		return 0
	}
	return r.EndedAt.Sub(r.StartedAt)
}

// TerminalView is one terminal page: a live terminal to drive or watch, or
// the replay of a recording.
type TerminalView struct {
	SandboxID string
	// SessionID is the session shown; "" on a sandbox's terminal page,
	// where the script opens a new one.
	SessionID string
	Replay    bool
	// SocketURL is the WebSocket path; Watch joins read-only.
	SocketURL string
	Watch     bool
	CanDrive  bool
	CastURL   string
	// Recording describes the session on replay pages.
	Recording TerminalRecordingRow
	// Live lists the sandbox's live sessions, on its terminal page.
	Live TerminalLiveList
	// Unavailable says why no terminal can run ("" when one can).
	Unavailable string
}

// termShort is the end of an id (UUIDv7s start with their time, so two of
// one minute share their beginning).
func termShort(id string) string {
	if len(id) > 13 {
		return id[len(id)-12:]
	}
	return id
}

func termBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func termCommand(argv []string) string {
	if len(argv) == 0 {
		return "shell"
	}
	// The default shell is a small script: show it as what it is.
	if len(argv) == 3 && argv[1] == "-c" && strings.Contains(argv[2], "exec bash -l") {
		return "login shell"
	}
	return strings.Join(argv, " ")
}

func termWho(names []string) string {
	if len(names) == 0 {
		return "nobody"
	}
	return strings.Join(names, ", ")
}

func termDriver(r TerminalLiveRow) string {
	switch {
	case r.Driver == "":
		return "nobody"
	case !r.DriverConnected:
		return r.Driver + " (disconnected)"
	}
	return r.Driver
}

func termDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Minute {
		return strconv.Itoa(int(d.Seconds())) + "s"
	}
	h, m, s := int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60
	if h > 0 {
		return fmt.Sprintf("%dh %02dm", h, m)
	}
	return fmt.Sprintf("%dm %02ds", m, s)
}

func termPageURL(id string) string    { return "/terminals/" + id }
func termSandboxURL(id string) string { return "/sandboxes/" + id + "/terminal" }
func termCastURL(id string) string    { return "/api/v1/terminals/" + id + "/cast" }
func termBool(b bool) string          { return strconv.FormatBool(b) }
func termWatchFlag(watch bool) string {
	if watch {
		return "1"
	}
	return ""
}

// TruncatedShort is where the recording stopped ("truncated at 50 MiB"),
// without why.
func (r TerminalRecordingRow) TruncatedShort() string {
	short, _, _ := strings.Cut(r.Truncated, ":")
	return short
}

// SandboxTerminals is the terminal part of a sandbox's page: its sessions,
// live and ended, newest first, each linked to its page (to join or watch
// while live, to replay once ended).
type SandboxTerminals struct {
	// Visible: the viewer may watch terminals (terminals.watch); without
	// it the section is not shown at all.
	Visible  bool
	CanDrive bool
	Rows     []SandboxTerminalRow
}

// SandboxTerminalRow is one of a sandbox's terminal sessions.
type SandboxTerminalRow struct {
	ID        string
	OpenedBy  string
	Command   []string
	Driver    string // live: who holds control now ("" nobody); ended: ""
	Live      bool
	Mine      bool // live, and the viewer drives it from a connected page
	StartedAt time.Time
	Duration  time.Duration // so far, while live
	BytesOut  int64
	EndReason string
	ExitCode  string // "" when the process did not exit by itself
	Purged    bool   // retention removed the recording
}

// termStatePill is the class of a session's state: live, ended well (exit
// code 0), or ended otherwise.
func termStatePill(r SandboxTerminalRow) string {
	switch {
	case r.Live:
		return "pill pill-warn"
	case r.ExitCode == "0":
		return "pill pill-good"
	}
	return "pill pill-bad"
}

func termStateLabel(r SandboxTerminalRow) string {
	switch {
	case r.Live:
		return "live"
	case r.ExitCode != "":
		return "exit " + r.ExitCode
	}
	return "ended"
}

// termSessionsCount is "1 terminal session", "3 terminal sessions".
func termSessionsCount(n int) string {
	if n == 1 {
		return "1 terminal session"
	}
	return strconv.Itoa(n) + " terminal sessions"
}
