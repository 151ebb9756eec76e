package agentproto

import "time"

const (
	// Version is the protocol version this package speaks.
	Version = 1
	// MinVersion is the oldest protocol version this package still speaks.
	MinVersion = 1

	// ChannelName is the virtio-serial port name of the agent channel.
	ChannelName = "org.stockade.agent.0"

	// MaxMessageSize bounds one length-prefixed JSON message (request or response).
	MaxMessageSize = 1 << 20
	// MaxFrameSize bounds the data of one frame on a streaming op.
	MaxFrameSize = 1 << 20
)

// Op names a request.
type Op string

const (
	// OpHello is the handshake: HelloRequest in, Hello out. First on every session.
	OpHello Op = "hello"
	// OpPing answers an empty Response; the client measures the round trip.
	OpPing Op = "ping"
	// OpStats answers Stats.
	OpStats Op = "stats"
	// OpShutdown answers an empty Response, then the agent syncs and powers the VM off.
	OpShutdown Op = "shutdown"

	// OpExec runs a command in a sandbox (not implemented yet).
	// Request.Exec; Response.Exec; then frames: host->guest ChannelStdin (an
	// empty frame closes stdin), ChannelSignal; guest->host ChannelStdout,
	// ChannelStderr, and finally ChannelExit carrying ExitStatus as JSON.
	OpExec Op = "exec"
	// OpPTY runs a command on a new terminal in a sandbox (not implemented yet).
	// Request.PTY; Response.Exec; then frames: host->guest ChannelStdin,
	// ChannelResize (Winsize as JSON), ChannelSignal; guest->host ChannelStdout
	// and finally ChannelExit.
	OpPTY Op = "pty"
	// OpFileRead reads a file from a sandbox (not implemented yet).
	// Request.FileRead; Response.File; then guest->host ChannelData frames, an
	// empty ChannelData frame at the end, or ChannelError (Error as JSON).
	OpFileRead Op = "file.read"
	// OpFileWrite writes a file into a sandbox (not implemented yet).
	// Request.FileWrite; Response (accepted); then host->guest ChannelData
	// frames, an empty one at the end; then guest->host one final Response
	// message with File set to what was written.
	OpFileWrite Op = "file.write"
	// OpEgress is opened by the AGENT towards the host for one outbound
	// connection from a sandbox (not implemented yet). Request.Egress; the host
	// answers Response (error when policy denies); then ChannelData frames both
	// ways, an empty frame half-closes that direction.
	OpEgress Op = "egress"
)

// Request is the first message on every stream.
type Request struct {
	V  int `json:"v"`
	Op Op  `json:"op"`

	Hello     *HelloRequest     `json:"hello,omitempty"`
	Exec      *ExecRequest      `json:"exec,omitempty"`
	PTY       *PTYRequest       `json:"pty,omitempty"`
	FileRead  *FileReadRequest  `json:"file_read,omitempty"`
	FileWrite *FileWriteRequest `json:"file_write,omitempty"`
	Egress    *EgressRequest    `json:"egress,omitempty"`
}

// Response answers a Request. Error set means the op failed; otherwise the
// field for the op (if any) is set.
type Response struct {
	V     int    `json:"v"`
	Error *Error `json:"error,omitempty"`

	Hello *Hello       `json:"hello,omitempty"`
	Stats *Stats       `json:"stats,omitempty"`
	Exec  *ExecStarted `json:"exec,omitempty"`
	File  *FileInfo    `json:"file,omitempty"`
}

// Error codes carried in Error.Code.
const (
	CodeUnknownOp          = "unknown_op"
	CodeUnsupportedVersion = "unsupported_version"
	CodeBadRequest         = "bad_request"
	CodeNotImplemented     = "not_implemented"
	CodeInternal           = "internal"
)

// Error is a failed op as sent on the wire.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// MinVersion and MaxVersion name the sender's range with CodeUnsupportedVersion.
	MinVersion int `json:"min_version,omitempty"`
	MaxVersion int `json:"max_version,omitempty"`
}

// HelloRequest opens a session.
type HelloRequest struct {
	MinVersion int `json:"min_version"`
	MaxVersion int `json:"max_version"`
	// Client names the host software, for the agent's log only.
	Client string `json:"client,omitempty"`
}

// Hello is what the agent says about itself. All of it is the guest's claim.
type Hello struct {
	Protocol      int           `json:"protocol"`
	Agent         string        `json:"agent"`
	Kernel        string        `json:"kernel"`
	Capabilities  []string      `json:"capabilities"`
	PID1          bool          `json:"pid1"`
	Boot          Boot          `json:"boot"`
	Uptime        time.Duration `json:"uptime_ns"`
	SessionNumber int           `json:"session"`
}

// Boot holds guest kernel uptimes (CLOCK_BOOTTIME) at the steps of the boot.
// Zero means the step did not happen (yet, or because the agent is not PID 1).
type Boot struct {
	InitStart  time.Duration `json:"init_start_ns"`
	SwitchRoot time.Duration `json:"switch_root_ns"`
	Mounted    time.Duration `json:"mounted_ns"`
	// ChannelModules: the modules the channel needs (virtio, virtio_console) are loaded.
	ChannelModules time.Duration `json:"channel_modules_ns"`
	ChannelOpen    time.Duration `json:"channel_open_ns"`
	// ModulesLoaded: every module is loaded; the rest load while the agent already serves.
	ModulesLoaded time.Duration `json:"modules_loaded_ns"`
	// Modules is how many kernel modules init loaded.
	Modules int `json:"modules"`
}

// Stats is a snapshot of the guest.
type Stats struct {
	Uptime       time.Duration `json:"uptime_ns"`
	Load1        float64       `json:"load1"`
	Load5        float64       `json:"load5"`
	Load15       float64       `json:"load15"`
	MemTotal     uint64        `json:"mem_total_bytes"`
	MemAvailable uint64        `json:"mem_available_bytes"`
	CPUs         int           `json:"cpus"`
	// CgroupControllers lists the cgroup v2 controllers of the root cgroup.
	CgroupControllers []string `json:"cgroup_controllers"`
	// Crun is the first line of `crun --version`, empty when crun does not run.
	Crun string `json:"crun"`
}

// ExecRequest starts a command in a sandbox (OpExec).
type ExecRequest struct {
	Sandbox string   `json:"sandbox"`
	Argv    []string `json:"argv"`
	Env     []string `json:"env,omitempty"`
	Dir     string   `json:"dir,omitempty"`
	// Stdin false means the command's stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
}

// PTYRequest starts a command on a new terminal in a sandbox (OpPTY).
type PTYRequest struct {
	Sandbox string   `json:"sandbox"`
	Argv    []string `json:"argv"`
	Env     []string `json:"env,omitempty"`
	Dir     string   `json:"dir,omitempty"`
	Term    string   `json:"term,omitempty"`
	Size    Winsize  `json:"size"`
}

// ExecStarted answers OpExec and OpPTY.
type ExecStarted struct {
	PID int `json:"pid"`
}

// ExitStatus is the data of the final ChannelExit frame.
type ExitStatus struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
}

// Winsize is the data of a ChannelResize frame.
type Winsize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// FileReadRequest asks for (part of) a file in a sandbox (OpFileRead).
type FileReadRequest struct {
	Sandbox string `json:"sandbox"`
	Path    string `json:"path"`
	Offset  int64  `json:"offset,omitempty"`
	// Limit 0 means to the end of the file.
	Limit int64 `json:"limit,omitempty"`
}

// FileWriteRequest writes a file in a sandbox (OpFileWrite).
type FileWriteRequest struct {
	Sandbox string `json:"sandbox"`
	Path    string `json:"path"`
	Mode    uint32 `json:"mode"`
	Append  bool   `json:"append,omitempty"`
}

// FileInfo describes a file read or written.
type FileInfo struct {
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"`
}

// EgressRequest asks the host to connect a sandbox to host:port (OpEgress).
type EgressRequest struct {
	Sandbox string `json:"sandbox"`
	Host    string `json:"host"`
	Port    int    `json:"port"`
}

// Capabilities returns the op names as capability strings, in order.
func Capabilities(ops ...Op) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = string(op)
	}
	return out
}
