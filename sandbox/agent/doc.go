package agent

// Sandboxes (Manager, sandboxes.go)
//
// One sandbox is one crun container, started with ONE `crun run --detach`
// and no other crun call in its life: not per command (under TCG a crun
// call costs ~100-300 ms against ~10 ms for a spawn through init) and not
// on destroy (crun's state lives in the bundle, which destroy removes).
//
// The bundle, /run/stockade/sandboxes/<id>:
//
//	scratch/   the overlay's upper and work dirs: a bind of the quota'd
//	           folder /run/stockade/scratch/<id>/disk (DiskMiB) of the VM's
//	           scratch disk
//	rootfs/    overlay(lower = template mount, upper = scratch/upper),
//	           nosuid,nodev; /workspace on it is a bind of the quota'd
//	           folder /run/stockade/scratch/<id>/workspace (WorkspaceMiB)
//	           owned by uid 1000. This is the sandbox's / as the agent sees
//	           it: file operations resolve below it.
//	config.json  ociConfig (bundle.go): golden files in testdata/
//	ctl.sock   the control listener (SOCK_SEQPACKET, 0600, root)
//	crun/      crun's state (--root)
//	init.pid, init.log
//
// Scratch disk (scratch.go): the host attaches one sparse XFS disk to every
// VM (label ScratchLabel); the agent mounts it at /run/stockade/scratch
// with project quotas enforced. Each sandbox's two folders are
// quota projects of their own (blocks and inodes, as the tmpfs's were), so
// a full one fails the writer with ENOSPC and costs no guest memory: before,
// both were tmpfs charged to the sandbox's memory.max, and filling
// /workspace OOM-killed the sandbox. statfs of a project folder (and of the
// overlay, through its upper dir) reports the project's limit. The seccomp
// profile refuses FS_IOC_FSSETXATTR and FS_IOC_SETFLAGS: a file's owner
// could otherwise move it out of its project or stop a folder passing the
// project on. Destroy removes the folders and lifts their quotas; a trim
// within a minute (batched: one FITRIM walks every group that freed blocks)
// shrinks the host's sparse file again. A VM without the disk (an older
// host) falls back to the tmpfs.
//
// The container's process is this binary, bound read-only at
// /.stockade/init and run as `sandbox-init --listen-fd 3`: crun hands over
// the control listener the agent made (--preserve-fds 1), so no path inside
// the sandbox leads to it; init also refuses peers inside its PID namespace.
// init is PID 1 of the sandbox: it reaps, ignores every signal sent from
// inside, is not dumpable (its /proc entries are root's) and spawns
// commands in place, passing their pipes or terminal master to the agent
// with SCM_RIGHTS (sandboxinit/initproto.go).
//
// Isolation: namespaces pid, network (only lo, which the agent brings up,
// with the egress proxy listener on it: egress.go),
// ipc, uts, mount and cgroup (the sandbox sees its own memory.max); the
// sandbox user uid 1000 with no capability at all, no_new_privs, the
// seccomp deny list of bundle.go (mounts, modules, kexec, bpf, keyrings,
// ptrace, perf, handles, setns, new user namespaces, packet and raw IP
// sockets, swap, reboot, terminal injection: EPERM), runc's masked and
// read-only paths, a device allow list, its own hostname.
//
// No user namespace. Commands run as a non-root uid with no capabilities
// anywhere, so a user namespace would add no privilege separation inside
// the sandbox, only its own root with namespace capabilities (a large kernel
// surface; the seccomp profile refuses creating one too). It would also
// need idmapped mounts for the template's files (owned by real uids 0 and
// 1000) to keep their owners. Sandboxes of one VM share uid 1000 but no
// namespace: they cannot see or signal each other's processes (pid ns),
// reach each other's sockets (net ns), files (mount ns) or IPC (ipc ns);
// the VM is the tenant boundary.
//
// Address randomization: crun is started with ADDR_NO_RANDOMIZE
// (sandboxinit/personality.go), which halves its start under TCG; init restores
// randomization on every thread before any command starts.
