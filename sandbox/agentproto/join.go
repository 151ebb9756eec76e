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
// answer or its exit crossed the channel as two messages. A frameJoiner
// holds a data frame's header until its body comes and passes both on as
// one Write. It never waits on a timer: anything but a data header with a
// body (window updates, pings, go-away, flags-only frames) passes at once,
// and a held header goes with the very next Write, which yamux makes right
// away; the receiver could do nothing with the header alone anyway (it
// reads the body next). The bytes on the wire are the same either way, so
// a joining end and a non-joining end speak to each other unchanged.

const (
	yamuxHeaderSize = 12
	// joinBufKeep bounds the buffer a joiner keeps between frames; a
	// larger body gets a buffer of its own.
	joinBufKeep = 64 << 10
)

type frameJoiner struct {
	w    io.Writer
	mu   sync.Mutex
	hdr  [yamuxHeaderSize]byte
	held bool
	buf  []byte
}

// JoinFrames returns a writer for a yamux session over w that passes each
// yamux data frame to w in one Write (header and body together).
func JoinFrames(w io.Writer) io.Writer { return &frameJoiner{w: w} }

// isDataHeader says p is exactly a yamux data frame's header announcing a
// body: version 0, type 0 (data), length > 0.
func isDataHeader(p []byte) bool {
	return len(p) == yamuxHeaderSize && p[0] == 0 && p[1] == 0 && binary.BigEndian.Uint32(p[8:12]) > 0
}

func (j *frameJoiner) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.held {
		j.held = false
		buf := append(append(j.buf[:0], j.hdr[:]...), p...)
		if cap(buf) <= joinBufKeep {
			j.buf = buf
		}
		if _, err := j.w.Write(buf); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if isDataHeader(p) {
		copy(j.hdr[:], p)
		j.held = true
		return len(p), nil
	}
	return j.w.Write(p)
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
