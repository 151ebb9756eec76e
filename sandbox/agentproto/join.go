package agentproto

import (
	"encoding/binary"
	"io"
	"sync"
)

// yamux's send loop writes each data frame in two Writes, back to back from
// its one goroutine: the 12-byte header, then the body. Over the link every
// Write is a link frame of its own, and each of those costs a write to the
// virtio-serial port (a VM exit in the guest), a message through libvirt
// and a wake-up of the reader at the other end. So a keystroke, an exec's
// answer or its exit crossed the channel as two messages, and a request as
// three (the new stream's SYN, then its header and body). A frameJoiner
// holds a data frame's header until its body comes, and a new stream's SYN
// until the frame after it, and passes what it holds on with that next
// Write. It never waits on a timer. What it holds is always followed at
// once: yamux writes a body right after its header, and whoever opens a
// stream here writes its Request right away (doc.go: every stream starts
// with one), or closes it (a FIN); the receiver could do nothing with a
// header alone anyway, and sees the stream no later than its first
// message. Everything else (window updates, ACKs, pings, go-away,
// flags-only frames) passes at once. The bytes on the wire are the same
// either way, so a joining end and a non-joining end speak to each other
// unchanged.

const (
	yamuxHeaderSize = 12
	// joinBufKeep bounds the buffer a joiner keeps between frames; a
	// larger body gets a buffer of its own.
	joinBufKeep = 64 << 10
)

type frameJoiner struct {
	w  io.Writer
	mu sync.Mutex
	// held is what waits for the next Write: a SYN, a data header, or a
	// SYN and then a data header. needBody: the next Write is a body.
	held     []byte
	needBody bool
}

// JoinFrames returns a writer for a yamux session over w that passes each
// yamux data frame to w in one Write (header and body together), a new
// stream's SYN with the frame after it.
func JoinFrames(w io.Writer) io.Writer {
	return &frameJoiner{w: w, held: make([]byte, 0, 2*yamuxHeaderSize)}
}

// yamux's header: version, type, flags (uint16), stream id, length.
const (
	yamuxTypeData   = 0
	yamuxTypeWindow = 1
	yamuxFlagSYN    = 1
)

// isDataHeader says p is exactly a yamux data frame's header announcing a
// body: version 0, type data, length > 0.
func isDataHeader(p []byte) bool {
	return len(p) == yamuxHeaderSize && p[0] == 0 && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:12]) > 0
}

// isSYN says p is exactly a window update opening a stream.
func isSYN(p []byte) bool {
	return len(p) == yamuxHeaderSize && p[0] == 0 && p[1] == yamuxTypeWindow && binary.BigEndian.Uint16(p[2:4])&yamuxFlagSYN != 0
}

func (j *frameJoiner) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.needBody && len(j.held) <= yamuxHeaderSize && (isDataHeader(p) || (len(j.held) == 0 && isSYN(p))) {
		j.held = append(j.held, p...)
		j.needBody = isDataHeader(p)
		return len(p), nil
	}
	if len(j.held) == 0 {
		return j.w.Write(p)
	}
	buf := append(j.held, p...)
	j.held, j.needBody = j.held[:0], false
	if cap(buf) <= joinBufKeep {
		j.held = buf[:0]
	}
	if _, err := j.w.Write(buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// joinedConn is a yamux session's connection whose writes go through a
// frameJoiner.
type joinedConn struct {
	io.ReadWriteCloser
	w io.Writer
}

func joinConn(c io.ReadWriteCloser) joinedConn {
	return joinedConn{ReadWriteCloser: c, w: JoinFrames(c)}
}

func (c joinedConn) Write(p []byte) (int, error) { return c.w.Write(p) }
