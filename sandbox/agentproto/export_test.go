package agentproto

import "io"

// NewHostLink exposes the host end of the link layer to the external tests,
// which speak raw yamux over it.
func NewHostLink(conn io.ReadWriteCloser) (io.ReadWriteCloser, error) { return newHostLink(conn) }
