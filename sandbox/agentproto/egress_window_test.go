package agentproto_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// countingWriter counts what the host handler got written into the stream.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// TestEgressLargeTransferSlowReader sends a download much larger than the
// stream window from the host to an agent-side reader that reads a little
// at a time: every byte arrives in order (same digest), the window lets
// StreamWindow through once the reader reads, and the host is never more
// than the window (plus the link's own buffers) ahead of the reader: a
// sandbox that reads slowly costs bounded memory.
func TestEgressLargeTransferSlowReader(t *testing.T) {
	conn, sess := fakeAgent(t, func(st net.Conn, req agentproto.Request) {
		agentproto.WriteMessage(st, agentproto.Response{V: 1, Hello: &agentproto.Hello{Protocol: 1}})
	})
	const size = 6 * agentproto.StreamWindow
	var written atomic.Int64
	sent := make(chan [32]byte, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := agentproto.Dial(ctx, conn, agentproto.ClientOptions{Egress: func(ctx context.Context, sandboxID string, conn net.Conn) {
		defer conn.Close()
		h := sha256.New()
		src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{3}), size), h)
		// conn is the EgressConn: io.Copy goes through its ReadFrom.
		if _, err := io.Copy(countingWriter{conn, &written}, src); err != nil {
			t.Errorf("host copy: %v", err)
		}
		conn.(interface{ CloseWrite() error }).CloseWrite()
		sent <- [32]byte(h.Sum(nil))
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ec, err := agentproto.OpenEgress(ctx, func() (net.Conn, error) { return sess.OpenStream() }, "sb-1")
	if err != nil {
		t.Fatalf("OpenEgress() = %v", err)
	}
	defer ec.Close()
	ec.SetDeadline(time.Now().Add(60 * time.Second))
	ec.CloseWrite()

	// What can sit between the host's writer and this reader besides the
	// window: the host's frame buffer, the link reader's buffer, yamux's
	// read buffer, frame headers.
	const slack = 256 << 10
	h := sha256.New()
	buf := make([]byte, 1<<10)
	var read int64
	readSome := func() error {
		n, err := ec.Read(buf)
		h.Write(buf[:n])
		read += int64(n)
		if ahead := written.Load() - read; ahead > agentproto.StreamWindow+slack {
			t.Fatalf("Got(host ahead of the reader) = %d bytes; want at most the window %d + %d", ahead, agentproto.StreamWindow, slack)
		}
		return err
	}
	if err := readSome(); err != nil {
		t.Fatal(err)
	}
	// The first read opened the window to StreamWindow: the host fills it.
	for written.Load() < agentproto.StreamWindow-slack {
		select {
		case <-ctx.Done():
			t.Fatalf("Got(host written, reader paused) = %d bytes; want about the window %d", written.Load(), agentproto.StreamWindow)
		case <-time.After(5 * time.Millisecond):
		}
	}
	var rerr error
	for rerr == nil {
		rerr = readSome()
	}
	if !errors.Is(rerr, io.EOF) {
		t.Fatalf("Got(read) error %v after %d bytes; want EOF", rerr, read)
	}
	if read != size {
		t.Errorf("Got(bytes read) = %d; want %d", read, size)
	}
	if got, want := [32]byte(h.Sum(nil)), <-sent; got != want {
		t.Errorf("Got(digest of what arrived) = %x; want %x (what the host sent)", got, want)
	}
}

// TestEgressConnCutInsideFrame: a stream that ends inside a data frame is
// an error, never the clean EOF of the peer's CloseWrite (a cut download
// must not look complete).
func TestEgressConnCutInsideFrame(t *testing.T) {
	tests := []struct {
		name   string
		stream []byte
		want   error
	}{
		{"cut in the data", append([]byte{byte(agentproto.ChannelData), 0, 0, 0, 10}, "abc"...), io.ErrUnexpectedEOF},
		{"cut in the header", []byte{byte(agentproto.ChannelData), 0, 0}, io.ErrUnexpectedEOF},
		{"oversized frame", []byte{byte(agentproto.ChannelData), 0xff, 0xff, 0xff, 0xff}, agentproto.ErrTooLarge},
		{"error frame", append([]byte{byte(agentproto.ChannelError), 0, 0, 0, 4}, "boom"...), agentproto.ErrRemote},
		{"other channel", []byte{byte(agentproto.ChannelStdout), 0, 0, 0, 0}, agentproto.ErrProtocol},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			go func() { b.Write(tc.stream); b.Close() }()
			got, err := io.ReadAll(agentproto.NewEgressConn(a))
			if !errors.Is(err, tc.want) {
				t.Errorf("Got(ReadAll) = %q, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestLinkWriterReusesBuffers: frames written one after another through
// one LinkWriter (its buffers reused) decode to exactly what was written,
// large after small and small after large, and the reader's reused buffer
// gives each frame its own bytes.
func TestLinkWriterReusesBuffers(t *testing.T) {
	rng := rand.NewChaCha8([32]byte{4})
	sizes := []int{agentproto.MaxLinkData*3 + 17, 5, 0, agentproto.MaxLinkData, 1, 70000, 12}
	var want [][]byte
	var stream bytes.Buffer
	lw := agentproto.NewLinkWriter(&stream, &sync.Mutex{}, 42)
	for _, n := range sizes {
		p := make([]byte, n)
		rng.Read(p)
		if n > 0 {
			want = append(want, p)
		}
		if _, err := lw.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	lr := agentproto.NewLinkReader(&stream)
	var got []byte
	for {
		f, err := lr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.Session != 42 || f.Kind != agentproto.LinkData || len(f.Data) > agentproto.MaxLinkData {
			t.Fatalf("Got(frame) = kind %d session %d %d bytes; want data of session 42, at most %d", f.Kind, f.Session, len(f.Data), agentproto.MaxLinkData)
		}
		got = append(got, f.Data...)
	}
	if all := bytes.Join(want, nil); !bytes.Equal(got, all) {
		t.Errorf("Got(decoded stream) of %d bytes; want the %d bytes written, in order", len(got), len(all))
	}
	if lr.Dropped() != 0 {
		t.Errorf("Got(Dropped) = %d; want 0", lr.Dropped())
	}
}
