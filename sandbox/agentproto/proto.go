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

	// OpSandboxCreate creates and starts a sandbox: Request.Sandbox (a
	// SandboxSpec); Response.Sandbox once its init answers.
	OpSandboxCreate Op = "sandbox.create"
	// OpSandboxDestroy kills a sandbox and removes everything it had:
	// Request.SandboxID; Response.Sandbox (its last state). Destroying a
	// sandbox that already stopped (lifetime, OOM) removes its record.
	OpSandboxDestroy Op = "sandbox.destroy"
	// OpSandboxList answers Response.Sandboxes: every sandbox and template.
	OpSandboxList Op = "sandbox.list"
	// OpSandboxStats answers Response.SandboxStats for Request.SandboxID.
	OpSandboxStats Op = "sandbox.stats"
	// OpSandboxPause freezes a running sandbox's cgroup (every process
	// stops, nothing is lost) and OpSandboxResume thaws it:
	// Request.SandboxID; Response.Sandbox once the kernel reports it frozen
	// (thawed). Pausing a paused sandbox, or resuming one that is not, is
	// conflict. See pause.go.
	OpSandboxPause  Op = "sandbox.pause"
	OpSandboxResume Op = "sandbox.resume"

	// OpExec runs a command in a sandbox: Request.Exec; Response.Exec once it
	// runs; then frames: host->guest ChannelStdin (an empty frame closes
	// stdin), ChannelResize (Winsize as JSON, terminals only), ChannelSignal
	// (a signal name); guest->host ChannelStdout, ChannelStderr (not for a
	// terminal), and finally ChannelExit carrying ExitStatus as JSON, after
	// which the agent closes the stream. The host closing the stream before
	// ChannelExit kills the command; the host's session ending (a crashed
	// or restarted host) detaches a command with an ID instead: see
	// OpExecAttach.
	OpExec Op = "exec"
	// OpExecAttach re-attaches a detached exec (one whose host session
	// ended): Request.ExecAttach names it by ExecRequest.ID and gives the
	// output offset the host has (stdout and stderr bytes together);
	// Response.Exec (ExecStarted.Offset is where the replay starts: past the
	// asked offset when the agent's bounded buffer dropped bytes); then the
	// frames of OpExec from that offset on. An exec attached already is
	// taken over (its old stream is closed). An unknown id, or one whose
	// grace passed, is not_found.
	OpExecAttach Op = "exec.attach"
	// OpExecList answers Response.Execs: every exec with an ID the agent
	// still holds (running, or ended but not yet delivered to a host).
	OpExecList Op = "exec.list"
	// OpFileRead reads a file in a sandbox: Request.FileRead; Response.File;
	// then guest->host ChannelData frames and an empty ChannelData frame at
	// the end, or ChannelError (Error as JSON) instead.
	OpFileRead Op = "file.read"
	// OpFileWrite writes a file in a sandbox: Request.FileWrite; Response
	// (accepted); then host->guest ChannelData frames, an empty one at the
	// end; then guest->host one final Response message with File set (or
	// Error). The file appears whole or not at all (unless Append).
	OpFileWrite Op = "file.write"
	// OpEgress is opened by the AGENT towards the host for one connection a
	// sandbox made to its proxy listener (EgressProxyAddr). Request.Egress
	// names the sandbox; the host answers Response (an error when it takes
	// no egress from that sandbox); then ChannelData frames both ways
	// (EgressConn), an empty frame half-closes that direction. The bytes are
	// the sandbox's own: the host speaks the HTTP proxy protocol on them and
	// decides there; the agent is a byte pipe.
	OpEgress Op = "egress"
	// OpSandboxLifetime sets how long a running sandbox has left, from now:
	// Request.SandboxID and Request.Lifetime; an empty Response. The new
	// lifetime replaces the old one (longer or shorter).
	OpSandboxLifetime Op = "sandbox.lifetime"
	// OpPortDial connects to 127.0.0.1:Port inside a sandbox's network
	// namespace: Request.PortDial; Response (an error when nothing listens
	// there); then ChannelData frames both ways as on OpEgress (PortConn).
	OpPortDial Op = "port.dial"
	// OpTemplateRelease unmounts the template disk Request.Template names
	// and forgets it, so the host can hot-unplug it (sandbox/templates);
	// ErrConflict while a sandbox runs from it, ErrNotFound when no disk
	// holds it. Response with nothing set.
	OpTemplateRelease Op = "template.release"
	// OpBaseline times raw crun inside the guest, for benchmarks that compare
	// sandboxes against it in the same VM: Request.Baseline; Response.Baseline.
	OpBaseline Op = "baseline"

	// File system ops (fs.go): Request.Fs. fs.stat, fs.mkdir (Mode; made
	// with missing parents), fs.remove (Recursive), fs.move (Dest) and
	// fs.chmod (Mode) answer Response.Fs. fs.list (Depth) answers Response,
	// then guest->host ChannelData frames each an FsListChunk as JSON and an
	// empty ChannelData frame at the end, or ChannelError. fs.archive
	// (MaxBytes) answers Response, then ChannelData frames of a tar stream
	// of Path, an empty one at the end, or ChannelError. fs.watch
	// (Recursive) answers Response once it watches, then ChannelData frames
	// each an FsEventBatch as JSON until the host closes the stream or the
	// sandbox ends (ChannelError).
	OpFsStat    Op = "fs.stat"
	OpFsList    Op = "fs.list"
	OpFsMkdir   Op = "fs.mkdir"
	OpFsRemove  Op = "fs.remove"
	OpFsMove    Op = "fs.move"
	OpFsChmod   Op = "fs.chmod"
	OpFsWatch   Op = "fs.watch"
	OpFsArchive Op = "fs.archive"
	// OpVolumeMount mounts the volume disk whose serial is Request.Volume.ID
	// at the VM's volume folder (read-only and noload when asked);
	// OpVolumeUnmount unmounts it (conflict while a sandbox binds it). Both
	// answer an empty Response (volume.go).
	OpVolumeMount   Op = "volume.mount"
	OpVolumeUnmount Op = "volume.unmount"
	// OpSandboxUpper streams a PAUSED sandbox's writable layer (its
	// overlay upper dir) as a tar: Request.Fs (Sandbox, MaxBytes, required);
	// answers Response, then ChannelData frames and an empty one at the
	// end, or ChannelError (upper.go of the agent, UpperDoc).
	OpSandboxUpper Op = "sandbox.upper"
	// OpVMIdentity gives the guest its identity for this life of the VM:
	// Request.Identity (a host-drawn random seed the agent mixes into the
	// kernel's RNG and forces a reseed with, the host's wall clock it sets,
	// a generation it reports back); answers Response.Identity. The host
	// sends it after every handshake of a booted OR restored VM, before any
	// tenant work, so two VMs restored from one memory snapshot never share
	// RNG state or a stale clock (identity.go).
	OpVMIdentity Op = "vm.identity"
)

// Request is the first message on every stream.
type Request struct {
	V  int `json:"v"`
	Op Op  `json:"op"`

	Hello      *HelloRequest      `json:"hello,omitempty"`
	Sandbox    *SandboxSpec       `json:"sandbox,omitempty"`
	SandboxID  string             `json:"sandbox_id,omitempty"`
	Exec       *ExecRequest       `json:"exec,omitempty"`
	ExecAttach *ExecAttachRequest `json:"exec_attach,omitempty"`
	FileRead   *FileReadRequest   `json:"file_read,omitempty"`
	FileWrite  *FileWriteRequest  `json:"file_write,omitempty"`
	Egress     *EgressRequest     `json:"egress,omitempty"`
	Baseline   *BaselineRequest   `json:"baseline,omitempty"`
	Fs         *FsRequest         `json:"fs,omitempty"`
	Lifetime   *LifetimeRequest   `json:"lifetime,omitempty"`
	PortDial   *PortDialRequest   `json:"port_dial,omitempty"`
	Template   string             `json:"template,omitempty"` // OpTemplateRelease
	Volume     *VolumeRequest     `json:"volume,omitempty"`
	Identity   *IdentityRequest   `json:"identity,omitempty"`
	Prestart   *PrestartConfig    `json:"prestart,omitempty"` // OpSandboxPrestart (prestart.go)
}

// Response answers a Request. Error set means the op failed; otherwise the
// field for the op (if any) is set.
type Response struct {
	V     int    `json:"v"`
	Error *Error `json:"error,omitempty"`

	Hello        *Hello          `json:"hello,omitempty"`
	Stats        *Stats          `json:"stats,omitempty"`
	Sandbox      *SandboxInfo    `json:"sandbox,omitempty"`
	Sandboxes    *SandboxList    `json:"sandboxes,omitempty"`
	SandboxStats *SandboxStats   `json:"sandbox_stats,omitempty"`
	Exec         *ExecStarted    `json:"exec,omitempty"`
	Execs        *[]ExecInfo     `json:"execs,omitempty"`
	File         *FileInfo       `json:"file,omitempty"`
	Baseline     *BaselineResult `json:"baseline,omitempty"`
	Fs           *FsResult       `json:"fs,omitempty"`
	Identity     *IdentityResult `json:"identity,omitempty"`
	Prestart     *PrestartStatus `json:"prestart,omitempty"` // OpSandboxPrestart (prestart.go)
}

// Error codes carried in Error.Code.
const (
	CodeUnknownOp          = "unknown_op"
	CodeUnsupportedVersion = "unsupported_version"
	CodeBadRequest         = "bad_request"
	CodeNotImplemented     = "not_implemented"
	CodeInternal           = "internal"
	// CodeNotFound: no such sandbox, template, file or executable.
	CodeNotFound = "not_found"
	// CodeConflict: the sandbox exists already, or is not running.
	CodeConflict = "conflict"
	// CodeTooLarge: a file over the size bound.
	CodeTooLarge = "too_large"
	// CodeExhausted: the guest or the sandbox is out of room (sandboxes,
	// processes, disk space).
	CodeExhausted = "exhausted"
	// CodePermission: the sandbox user may not do this (a file it cannot
	// read or a folder it cannot write).
	CodePermission = "permission_denied"
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
	// ExecGraceSeconds is how long the agent keeps an exec with an id alive
	// after this session ends without the exec's stream being closed, so a
	// new host session can re-attach it (OpExecAttach); 0 means the agent's
	// default (DefaultExecGrace). It holds from this session on.
	ExecGraceSeconds int `json:"exec_grace_seconds,omitempty"`
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
	// Mounts counts the guest's mounts; SandboxCgroups and SandboxBundles
	// count cgroups and bundle folders of sandboxes; Sandboxes counts the
	// sandboxes the agent knows. After every sandbox is destroyed the last
	// three are 0 and Mounts is back where it was: nothing leaked.
	Mounts         int `json:"mounts"`
	SandboxCgroups int `json:"sandbox_cgroups"`
	SandboxBundles int `json:"sandbox_bundles"`
	Sandboxes      int `json:"sandboxes"`
	// Generation is the last vm.identity's (the host's VM id), empty before
	// the first.
	Generation string `json:"generation,omitempty"`
	// Prestarted counts the pool's pre-started sandboxes (OpSandboxPrestart),
	// started or starting: counted in SandboxCgroups and SandboxBundles,
	// not in Sandboxes.
	Prestarted int `json:"prestarted,omitempty"`
	// StubInits counts the sandboxes whose PID 1 is the stub init now
	// (idle: hypervisor/image/stubinit).
	StubInits int `json:"stub_inits,omitempty"`
	// MaxSandboxes is how many sandboxes the agent takes (capacity.go).
	MaxSandboxes int `json:"max_sandboxes"`
}

// EgressRequest hands the host one connection of a sandbox (OpEgress).
type EgressRequest struct {
	Sandbox string `json:"sandbox"`
	// Host and Port are unused: the destination is in the proxy request the
	// sandbox sends, which only the host reads.
	Host string `json:"host,omitempty"`
	Port int    `json:"port,omitempty"`
}

// Capabilities returns the op names as capability strings, in order.
func Capabilities(ops ...Op) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = string(op)
	}
	return out
}
