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
// may open streams: the host opens one per request; the agent will open
// streams towards the host for egress connections.
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
// # Trust
//
// The guest runs tenant code and may be hostile. The host bounds every message
// and frame, times out every call through its context, and treats everything
// in Hello and Stats as the guest's claim: never as identity. Which tenant and
// VM a session belongs to is known only from which channel the host opened.
package agentproto
