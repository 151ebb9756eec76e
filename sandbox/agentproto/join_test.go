package agentproto_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/hashicorp/yamux"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// writeLog is the wire under a joiner: it keeps every Write whole and
// passes it on.
type writeLog struct {
	mu     sync.Mutex
	writes [][]byte
	w      io.Writer
}

func (l *writeLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.writes = append(l.writes, append([]byte(nil), p...))
	l.mu.Unlock()
	return l.w.Write(p)
}

func (l *writeLog) log() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]byte(nil), l.writes...)
}

// wholeFrames reports whether b is a run of whole yamux frames (a data
// frame's header followed by all of its body), and how many.
func wholeFrames(b []byte) (int, bool) {
	n := 0
	for len(b) > 0 {
		if len(b) < 12 {
			return n, false
		}
		size := 0
		if b[1] == 0 { // data: the length is the body's
			size = int(binary.BigEndian.Uint32(b[8:12]))
		}
		if len(b) < 12+size {
			return n, false
		}
		b = b[12+size:]
		n++
	}
	return n, true
}

type pipeConn struct {
	io.Reader
	io.Writer
	io.Closer
}

// joinedPair is a yamux session whose client writes through JoinFrames
// onto a logged wire.
func joinedPair(t *testing.T) (*yamux.Session, *yamux.Session, *writeLog) {
	t.Helper()
	c1, c2 := net.Pipe()
	wire := &writeLog{w: c1}
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.EnableKeepAlive = false
	client, err := yamux.Client(pipeConn{Reader: c1, Writer: agentproto.JoinFrames(wire), Closer: c1}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	server, err := yamux.Server(c2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server, wire
}

// Every Write on the wire is whole yamux frames, and what was sent arrives
// intact, for small and large writes.
func TestJoinFramesWholeFrames(t *testing.T) {
	client, server, wire := joinedPair(t)
	sizes := []int{1, 12, 100, 4096, 300 << 10}
	accepted := make(chan []byte, 1)
	go func() {
		st, err := server.AcceptStream()
		if err != nil {
			accepted <- nil
			return
		}
		b, _ := io.ReadAll(st)
		accepted <- b
	}()
	st, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	// A body that looks like a header (a SYN, a data header) is a body.
	bodies := [][]byte{{0, 1, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 5}}
	for i, n := range sizes {
		bodies = append(bodies, bytes.Repeat([]byte{byte(i + 1)}, n))
	}
	for _, p := range bodies {
		n := len(p)
		if _, err := st.Write(p); err != nil {
			t.Fatalf("write %d bytes: %v", n, err)
		}
		want = append(want, p...)
	}
	st.Close()
	if got := <-accepted; !bytes.Equal(got, want) {
		t.Fatalf("Got(received) = %d bytes; want the %d sent", len(got), len(want))
	}
	for i, w := range wire.log() {
		if n, ok := wholeFrames(w); !ok || n == 0 {
			t.Errorf("Got(write %d on the wire) = %d bytes, not whole frames (% x...); want whole yamux frames", i, len(w), w[:min(len(w), 16)])
		}
	}
}

// A lone small write (a keystroke) is on the wire, whole, by the time
// yamux's Write returns: the joiner never holds it for later. A new
// stream's SYN goes with its first message (the request).
func TestJoinFramesLoneWriteGoesAtOnce(t *testing.T) {
	client, server, wire := joinedPair(t)
	go func() {
		st, err := server.AcceptStream()
		if err == nil {
			io.Copy(io.Discard, st)
		}
	}()
	st, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if got := wire.log(); len(got) != 0 {
		t.Fatalf("Got(wire after OpenStream) = %q; want the SYN held for the request", got)
	}
	for i, key := range []string{"request", "a", "b", "\r"} {
		before := len(wire.log())
		if _, err := st.Write([]byte(key)); err != nil {
			t.Fatal(err)
		}
		got := wire.log()[before:]
		frames := 1
		if i == 0 {
			frames = 2 // the SYN and the request
		}
		if n, whole := wholeFrames(bytes.Join(got, nil)); len(got) != 1 || !whole || n != frames || !bytes.HasSuffix(got[0], []byte(key)) {
			t.Fatalf("Got(wire after writing %q) = %q; want one write of %d whole frames ending in %q", key, got, frames, key)
		}
	}
}

// A stream closed before it wrote anything still opens and closes on the
// wire: its SYN goes with its FIN.
func TestJoinFramesSYNThenClose(t *testing.T) {
	client, server, wire := joinedPair(t)
	accepted := make(chan error, 1)
	go func() {
		st, err := server.AcceptStream()
		if err == nil {
			_, err = io.ReadAll(st)
		}
		accepted <- err
	}()
	st, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := <-accepted; err != nil {
		t.Fatalf("Got(server accept and read to EOF) = %v; want nil", err)
	}
	if got := wire.log(); len(got) != 1 {
		t.Errorf("Got(wire) = %q; want one write: SYN and FIN", got)
	}
}

// Frames without a body (a window update, a ping) pass at once, alone.
func TestJoinFramesPassesOtherFrames(t *testing.T) {
	var out bytes.Buffer
	j := agentproto.JoinFrames(&out)
	tests := []struct {
		name string
		hdr  []byte
	}{
		{"window update", []byte{0, 1, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0}},
		{"ACK of a new stream", []byte{0, 1, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0}},
		{"ping", []byte{0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9}},
		{"empty data frame with FIN", []byte{0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out.Reset()
			if n, err := j.Write(tc.hdr); n != len(tc.hdr) || err != nil {
				t.Fatalf("Got(Write) = %d, %v; want %d, nil", n, err, len(tc.hdr))
			}
			if !bytes.Equal(out.Bytes(), tc.hdr) {
				t.Errorf("Got(wire) = % x; want % x at once", out.Bytes(), tc.hdr)
			}
		})
	}
}
