package agent

import (
	"fmt"
	"math"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agent/sandboxinit"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// The subset of the OCI runtime spec (v1.0.2) that sandboxes use. Our own
// structs: the guest binary imports nothing beyond the wire types.

type ociSpec struct {
	OCIVersion string      `json:"ociVersion"`
	Process    *ociProcess `json:"process"`
	Root       ociRoot     `json:"root"`
	Hostname   string      `json:"hostname,omitempty"`
	Mounts     []ociMount  `json:"mounts"`
	Linux      *ociLinux   `json:"linux"`
}

type ociProcess struct {
	Terminal        bool        `json:"terminal"`
	User            ociUser     `json:"user"`
	Args            []string    `json:"args"`
	Env             []string    `json:"env"`
	Cwd             string      `json:"cwd"`
	Capabilities    *ociCaps    `json:"capabilities,omitempty"`
	Rlimits         []ociRlimit `json:"rlimits,omitempty"`
	NoNewPrivileges bool        `json:"noNewPrivileges"`
}

type ociUser struct {
	UID            uint32   `json:"uid"`
	GID            uint32   `json:"gid"`
	Umask          *uint32  `json:"umask,omitempty"`
	AdditionalGids []uint32 `json:"additionalGids,omitempty"`
}

// ociCaps marshals every set, empty ones as [] (not null: "no capability",
// as opposed to "runtime default").
type ociCaps struct {
	Bounding    []string `json:"bounding"`
	Effective   []string `json:"effective"`
	Inheritable []string `json:"inheritable"`
	Permitted   []string `json:"permitted"`
	Ambient     []string `json:"ambient"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type,omitempty"`
	Source      string   `json:"source,omitempty"`
	Options     []string `json:"options,omitempty"`
}

type ociLinux struct {
	Namespaces        []ociNamespace `json:"namespaces"`
	CgroupsPath       string         `json:"cgroupsPath,omitempty"`
	Resources         *ociResources  `json:"resources,omitempty"`
	Seccomp           *ociSeccomp    `json:"seccomp,omitempty"`
	RootfsPropagation string         `json:"rootfsPropagation,omitempty"`
	MaskedPaths       []string       `json:"maskedPaths,omitempty"`
	ReadonlyPaths     []string       `json:"readonlyPaths,omitempty"`
}

type ociNamespace struct {
	Type string `json:"type"`
}

type ociResources struct {
	Devices []ociDeviceRule `json:"devices,omitempty"`
	Memory  *ociMemory      `json:"memory,omitempty"`
	CPU     *ociCPU         `json:"cpu,omitempty"`
	Pids    *ociPids        `json:"pids,omitempty"`
	BlockIO *ociBlockIO     `json:"blockIO,omitempty"`
}

type ociDeviceRule struct {
	Allow  bool   `json:"allow"`
	Type   string `json:"type,omitempty"`
	Major  *int64 `json:"major,omitempty"`
	Minor  *int64 `json:"minor,omitempty"`
	Access string `json:"access,omitempty"`
}

type ociMemory struct {
	Limit *int64 `json:"limit,omitempty"`
	// Swap is memory+swap: equal to Limit means no swap.
	Swap *int64 `json:"swap,omitempty"`
}

type ociCPU struct {
	Quota  *int64  `json:"quota,omitempty"`
	Period *uint64 `json:"period,omitempty"`
}

type ociPids struct {
	Limit int64 `json:"limit"`
}

type ociBlockIO struct {
	ThrottleReadBpsDevice  []ociThrottle `json:"throttleReadBpsDevice,omitempty"`
	ThrottleReadIOPSDevice []ociThrottle `json:"throttleReadIOPSDevice,omitempty"`
}

type ociThrottle struct {
	Major int64  `json:"major"`
	Minor int64  `json:"minor"`
	Rate  uint64 `json:"rate"`
}

type ociSeccomp struct {
	DefaultAction string       `json:"defaultAction"`
	Architectures []string     `json:"architectures"`
	Syscalls      []ociSyscall `json:"syscalls"`
}

type ociSyscall struct {
	Names    []string    `json:"names"`
	Action   string      `json:"action"`
	ErrnoRet *uint       `json:"errnoRet,omitempty"`
	Args     []ociSysArg `json:"args,omitempty"`
}

type ociSysArg struct {
	Index    uint   `json:"index"`
	Value    uint64 `json:"value"`
	ValueTwo uint64 `json:"valueTwo,omitempty"`
	Op       string `json:"op"`
}

// Inside every sandbox.
const (
	// sandboxUID and sandboxGID are the sandbox user of every template.
	sandboxUID = 1000
	sandboxGID = 1000
	// initMount is where the agent binary appears in a sandbox, read-only.
	initMount = "/.stockade/init"
	// stubMount is where the stub init appears, read-only.
	stubMount = "/.stockade/stub"
	// initListenFD is the control listener's number in the sandbox's init
	// (crun --preserve-fds 1 hands over fd 3).
	initListenFD = 3
	workspaceDir = sandboxinit.WorkspaceDir
	cpuPeriod    = 100000
)

// Defaults for zero Limits fields.
const (
	defaultMemoryMiB    = 256
	defaultPidsMax      = 256
	defaultDiskMiB      = 256
	defaultWorkspaceMiB = 256
)

// withDefaults fills the zero fields of l.
func withDefaults(l agentproto.Limits) agentproto.Limits {
	if l.MemoryMiB == 0 {
		l.MemoryMiB = defaultMemoryMiB
	}
	if l.PidsMax == 0 {
		l.PidsMax = defaultPidsMax
	}
	if l.DiskMiB == 0 {
		l.DiskMiB = defaultDiskMiB
	}
	if l.WorkspaceMiB == 0 {
		l.WorkspaceMiB = defaultWorkspaceMiB
	}
	return l
}

// checkLimits rejects limits no sandbox can run with. The host applies the
// tenant's policy; these are only sanity bounds.
func checkLimits(l agentproto.Limits) error {
	switch {
	case l.VCPUs < 0 || l.VCPUs > 1024 || math.IsNaN(l.VCPUs):
		return fmt.Errorf("vcpus %v: %w", l.VCPUs, agentproto.ErrBadRequest)
	case l.MemoryMiB < 16 || l.MemoryMiB > 1<<20:
		return fmt.Errorf("memory %d MiB: want 16 MiB or more: %w", l.MemoryMiB, agentproto.ErrBadRequest)
	case l.PidsMax < 8 || l.PidsMax > 1<<22:
		return fmt.Errorf("pids_max %d: want 8 or more: %w", l.PidsMax, agentproto.ErrBadRequest)
	case l.DiskMiB < 1 || l.DiskMiB > 1<<20:
		return fmt.Errorf("disk %d MiB: %w", l.DiskMiB, agentproto.ErrBadRequest)
	case l.WorkspaceMiB < 1 || l.WorkspaceMiB > 1<<20:
		return fmt.Errorf("workspace %d MiB: %w", l.WorkspaceMiB, agentproto.ErrBadRequest)
	}
	return nil
}

// devNum is a block device's major:minor.
type devNum struct{ Major, Minor int64 }

// bundleSpec is everything the OCI config of one sandbox depends on.
type bundleSpec struct {
	Hostname string
	// InitPath is the agent binary in the guest, bound at initMount.
	InitPath string
	// StubPath is the stub init in the guest (hypervisor/image/stubinit),
	// bound at stubMount; with InitIdle > 0 the sandbox's init execs it
	// when idle that long (0: not until an initOpIdle says so, as a
	// pre-started sandbox's when claimed). "": init stays the Go one.
	StubPath string
	InitIdle time.Duration
	// Env is the environment of the sandbox's init; its commands inherit it.
	Env    []string
	Limits agentproto.Limits // with defaults filled
	// CgroupPath is the sandbox's cgroup below the cgroup2 root.
	CgroupPath string
	// TemplateDevice is the template disk, throttled by Limits.IO.
	TemplateDevice devNum
}

// ociConfig is the sandbox's config.json: every namespace but the user
// namespace (see doc.go), the cgroup limits, the default seccomp profile,
// no capabilities, no_new_privs, the sandbox user, runc's masked and
// read-only paths, and the agent binary as init.
func ociConfig(b bundleSpec) ociSpec {
	umask := uint32(0o022)
	mem := int64(b.Limits.MemoryMiB) << 20
	res := &ociResources{
		Devices: deviceRules(),
		Memory:  &ociMemory{Limit: &mem, Swap: &mem},
		Pids:    &ociPids{Limit: int64(b.Limits.PidsMax)},
	}
	if b.Limits.VCPUs > 0 {
		quota, period := int64(math.Round(b.Limits.VCPUs*cpuPeriod)), uint64(cpuPeriod)
		res.CPU = &ociCPU{Quota: &quota, Period: &period}
	}
	if io := b.Limits.IO; io != nil && (io.ReadBPS > 0 || io.ReadIOPS > 0) {
		res.BlockIO = &ociBlockIO{}
		d := b.TemplateDevice
		if io.ReadBPS > 0 {
			res.BlockIO.ThrottleReadBpsDevice = []ociThrottle{{Major: d.Major, Minor: d.Minor, Rate: io.ReadBPS}}
		}
		if io.ReadIOPS > 0 {
			res.BlockIO.ThrottleReadIOPSDevice = []ociThrottle{{Major: d.Major, Minor: d.Minor, Rate: io.ReadIOPS}}
		}
	}
	hostname := b.Hostname
	if hostname == "" {
		hostname = "sandbox"
	}
	args := []string{initMount, "sandbox-init", "--listen-fd", fmt.Sprint(initListenFD)}
	var stub []ociMount
	if b.StubPath != "" {
		args = append(args, "--idle-ms", fmt.Sprint(b.InitIdle.Milliseconds()), "--stub", stubMount)
		stub = []ociMount{{Destination: stubMount, Type: "bind", Source: b.StubPath, Options: []string{"bind", "ro", "nosuid", "nodev"}}}
	}
	return ociSpec{
		OCIVersion: "1.0.2",
		Process: &ociProcess{
			User: ociUser{UID: sandboxUID, GID: sandboxGID, Umask: &umask, AdditionalGids: []uint32{sandboxGID}},
			Args: args,
			Env:  b.Env,
			Cwd:  workspaceDir,
			Capabilities: &ociCaps{
				Bounding: []string{}, Effective: []string{}, Inheritable: []string{}, Permitted: []string{}, Ambient: []string{},
			},
			Rlimits: []ociRlimit{
				{Type: "RLIMIT_NOFILE", Hard: 65536, Soft: 65536},
				{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
			},
			NoNewPrivileges: true,
		},
		Root:     ociRoot{Path: "rootfs"},
		Hostname: hostname,
		Mounts: append([]ociMount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts",
				Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
			{Destination: initMount, Type: "bind", Source: b.InitPath, Options: []string{"bind", "ro", "nosuid", "nodev"}},
		}, stub...),
		Linux: &ociLinux{
			Namespaces: []ociNamespace{
				{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, {Type: "cgroup"},
			},
			CgroupsPath:       b.CgroupPath,
			Resources:         res,
			Seccomp:           seccompProfile(),
			RootfsPropagation: "rprivate",
			// runc's defaults, plus the guest's virtio ports' sysfs entries.
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
				"/sys/firmware", "/sys/devices/virtual/powercap", "/sys/class/virtio-ports",
			},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
}

// deviceRules deny every device but the standard ones (null, zero, full,
// random, urandom, tty, ptmx and the sandbox's own pts).
func deviceRules() []ociDeviceRule {
	dev := func(typ string, major, minor int64) ociDeviceRule {
		r := ociDeviceRule{Allow: true, Type: typ, Major: &major, Access: "rwm"}
		if minor >= 0 {
			r.Minor = &minor
		}
		return r
	}
	return []ociDeviceRule{
		{Allow: false, Access: "rwm"},
		dev("c", 1, 3), dev("c", 1, 5), dev("c", 1, 7), dev("c", 1, 8), dev("c", 1, 9),
		dev("c", 5, 0), dev("c", 5, 2), dev("c", 136, -1),
	}
}

// Linux constants the profile filters on (x86-64).
const (
	cloneNewUser = 0x10000000
	afInet       = 2
	afInet6      = 10
	afPacket     = 17
	afVsock      = 40
	sockRaw      = 3
	sockTypeMask = 0xf
	tiocsti      = 0x5412
	tioclinux    = 0x541c
	errnoEPERM   = 1
	errnoENOSYS  = 38
)

// seccompProfile is the default profile: everything is allowed but what lets
// a process reach past its sandbox (mounts, modules, kexec, bpf, keyrings,
// ptrace, perf, handles, namespaces, swap, reboot, raw and packet sockets,
// terminal injection, changing quota projects), which fails with EPERM. No capability is held in a
// sandbox, so most of these fail anyway; the profile removes the kernel code
// behind them from reach. Every ABI of the CPU is listed so a 32-bit
// syscall cannot slip past.
func seccompProfile() *ociSeccomp {
	eperm, enosys := uint(errnoEPERM), uint(errnoENOSYS)
	deny := func(names ...string) ociSyscall {
		return ociSyscall{Names: names, Action: "SCMP_ACT_ERRNO", ErrnoRet: &eperm}
	}
	denyIf := func(name string, args ...ociSysArg) ociSyscall {
		return ociSyscall{Names: []string{name}, Action: "SCMP_ACT_ERRNO", ErrnoRet: &eperm, Args: args}
	}
	return &ociSeccomp{
		DefaultAction: "SCMP_ACT_ALLOW",
		Architectures: []string{"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"},
		Syscalls: []ociSyscall{
			deny(
				// mounts and roots
				"mount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount", "open_tree",
				"fsopen", "fsconfig", "fsmount", "fspick",
				// kernel code and state
				"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
				"bpf", "perf_event_open", "reboot", "swapon", "swapoff", "acct", "syslog",
				"iopl", "ioperm", "quotactl", "quotactl_fd", "lookup_dcookie", "uselib", "ustat",
				"sysfs", "_sysctl", "nfsservctl", "vhangup", "userfaultfd", "fanotify_init",
				"io_uring_setup", "io_uring_enter", "io_uring_register",
				"settimeofday", "clock_settime", "clock_adjtime",
				// keyrings
				"keyctl", "add_key", "request_key",
				// other processes
				"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
				// handles bypass path checks
				"open_by_handle_at", "name_to_handle_at",
				// namespaces
				"setns",
			),
			// New user namespaces would hand back capabilities inside them.
			denyIf("unshare", ociSysArg{Index: 0, Value: cloneNewUser, ValueTwo: cloneNewUser, Op: "SCMP_CMP_MASKED_EQ"}),
			denyIf("clone", ociSysArg{Index: 0, Value: cloneNewUser, ValueTwo: cloneNewUser, Op: "SCMP_CMP_MASKED_EQ"}),
			// clone3 passes its flags in memory, out of the filter's sight:
			// ENOSYS makes libc fall back to clone.
			{Names: []string{"clone3"}, Action: "SCMP_ACT_ERRNO", ErrnoRet: &enosys},
			denyIf("socket", ociSysArg{Index: 0, Value: afPacket, Op: "SCMP_CMP_EQ"}),
			denyIf("socket", ociSysArg{Index: 0, Value: afVsock, Op: "SCMP_CMP_EQ"}),
			// Raw IP sockets; netlink's SOCK_RAW (ip, ss) stays allowed.
			denyIf("socket", ociSysArg{Index: 0, Value: afInet, Op: "SCMP_CMP_EQ"},
				ociSysArg{Index: 1, Value: sockTypeMask, ValueTwo: sockRaw, Op: "SCMP_CMP_MASKED_EQ"}),
			denyIf("socket", ociSysArg{Index: 0, Value: afInet6, Op: "SCMP_CMP_EQ"},
				ociSysArg{Index: 1, Value: sockTypeMask, ValueTwo: sockRaw, Op: "SCMP_CMP_MASKED_EQ"}),
			denyIf("ioctl", ociSysArg{Index: 1, Value: tiocsti, Op: "SCMP_CMP_EQ"}),
			denyIf("ioctl", ociSysArg{Index: 1, Value: tioclinux, Op: "SCMP_CMP_EQ"}),
			// A file's quota project, and a folder's inheritance of it,
			// hold it to its sandbox's share of the scratch disk
			// (scratch.go): its owner could change either.
			denyIf("ioctl", ociSysArg{Index: 1, Value: fsIocFSSetXattr, Op: "SCMP_CMP_EQ"}),
			denyIf("ioctl", ociSysArg{Index: 1, Value: unix.FS_IOC_SETFLAGS, Op: "SCMP_CMP_EQ"}),
			denyIf("ioctl", ociSysArg{Index: 1, Value: fsIoc32SetFlags, Op: "SCMP_CMP_EQ"}),
		},
	}
}
