// Package agentproto holds the versioned wire protocol between the host and
// stockade-agent (PID 1 inside every VM), plus the host-side client.
//
// # Transport
//
// The VM's virtio-serial channel (ChannelName) carries link frames (see
// link.go): delimited, checksummed, each naming the host session it belongs
// to, because the port does not reliably tell the guest that one host left
// and another arrived. Over one host session runs one hashicorp/yamux
// session: the host is the yamux client, the agent the server. Either side
// may open streams: the host opens one per request; the agent opens one
// towards the host per connection a sandbox makes to its egress proxy
// listener (OpEgress, egress.go), which the host serves with
// ClientOptions.Egress. Both ends pass each yamux data frame (header and
// body), and a new stream's SYN with its request, to the link in one write
// (join.go), so a small message crosses the channel as one link frame; the
// bytes are the same as without it.
//
// # Streams
//
// Every stream starts with one message, a Request: a 4-byte big-endian length
// followed by that many bytes of JSON, {"v":1,"op":"...", ...}. Messages are
// bounded by MaxMessageSize; a larger length is rejected before anything is
// allocated.
//
// Unary ops (hello, ping, stats, shutdown) get exactly one Response message
// and the stream is closed.
//
// Streaming ops (exec, pty, file.read, file.write, egress) get one Response
// (accepted or error) and then continue on the same stream as frames:
//
//	channel uint8 | length uint32 big-endian | length bytes of data
//
// bounded by MaxFrameSize. Channels are listed with the Channel type; each
// streaming op documents which channels flow in which direction.
//
// # Versions
//
// hello is always the first request of a session. The host sends the range of
// protocol versions it speaks; the agent answers with the version it picked
// (or an unsupported_version error naming its own range). Every later request
// carries "v" and an agent answers a version it does not speak with
// unsupported_version.
//
// Which ops an agent implements is in Hello.Capabilities; the client
// refuses an op the agent did not list, without a round trip.
//
// # Sandboxes
//
// A sandbox is a crun container in the guest; the agent (sandbox/agent)
// documents the details. What the host needs to know:
//
// Templates. The host attaches each template image read-only as a virtio
// disk, in any slot (vdb, vdc, ...). The agent recognises a template disk
// by its ext4 label, "stockade-" followed by (a prefix of) the name, reads
// the full name and version from /etc/stockade-template.json inside it and
// mounts it read-only (noload) at /run/stockade/templates/<name>.
// `stockade image build` writes both. sandbox.list reports what it found.
//
// Limits. Limits are enforced with cgroup v2 (cpu.max, memory.max with no
// swap, pids.max, io.max reads of the template disk). The writable layer
// over the template and /workspace are size-bounded tmpfs in guest memory:
// filling them is ENOSPC in that sandbox only, and what they hold counts
// against the sandbox's memory.
//
// Lifetime. A sandbox whose LifetimeSeconds pass, which idles for
// IdleSeconds, or whose init dies (OOM) stops: its processes and mounts are
// gone, its record stays (state "stopped", with the reason) until the host
// destroys it, so the host always learns why. sandbox.destroy leaves
// nothing in the guest: Stats counts mounts, sandbox cgroups and bundles.
//
// Exec. A command runs as the sandbox user (uid 1000) in its own session
// and process group, spawned by the sandbox's init (no crun call per
// command). A timeout or a KILL from the host kills the process group;
// processes that left it (setsid) live until the sandbox ends. Output is
// read until the command exits and briefly after, so a background child
// holding stdout open does not hold the exec. The reason in ExitStatus is
// "exited" (including death by a signal of its own), "timeout" (its own
// timeout or the sandbox's lifetime), "oom" (SIGKILL while the sandbox's
// oom_kill count rose) or "killed" (a signal from the host, or the sandbox
// stopped). A terminal (TTY) comes from the sandbox's own devpts.
//
// Surviving the host. An exec with an ID (ExecRequest.ID; the host uses
// its record's id) outlives its host session: when the session ends
// without the exec's stream being closed first (the host crashed or
// dropped the channel, a new host opened its session, LinkClose), the
// agent detaches the exec instead of killing it. A detached exec keeps
// running, its output goes to a bounded buffer (the latest 1 MiB; older
// bytes are dropped), and after the grace (HelloRequest.ExecGraceSeconds
// of the newest hello, counted from the detach; DefaultExecGrace) it is
// killed and forgotten. exec.list names what the agent holds; exec.attach
// re-attaches from an output offset (stdout and stderr bytes together),
// taking over any earlier stream. While attached the agent never drops
// output the host has not been sent: a host that does not read holds the
// command (backpressure). The host closing an exec's stream still kills
// it, and an exec without an ID still dies with its stream. Both sides
// count the same offset, so a re-attach misses nothing the buffer held.
//
// Files. Paths resolve inside the sandbox's root only (openat2 with
// RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS): ".." stops at the root and
// symlinks resolve as they would inside the sandbox. Only regular files are
// read or written; writes create missing folders, give new files to the
// sandbox user and appear whole or not at all.
// The file system ops (fs.go: stat, list, mkdir, remove, move, chmod,
// watch, archive) resolve the same way and never follow a link below the
// path they name; everything they report is bounded (MaxListEntries,
// MaxFsPathLen, MaxWatchRate ...) and checked again by the host.
//
// # Trust
//
// The guest runs tenant code and may be hostile. The host bounds every message
// and frame, times out every call through its context, and treats everything
// in Hello and Stats as the guest's claim: never as identity. Which tenant and
// VM a session belongs to is known only from which channel the host opened.
package agentproto
