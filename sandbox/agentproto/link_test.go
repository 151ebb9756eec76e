package agentproto_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agent"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

func TestLinkFrameRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int, zeros bool) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256))
			if !zeros && b[i] == 0 {
				b[i] = 7
			}
		}
		return b
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"one zero", []byte{0}},
		{"zeros", make([]byte, 600)},
		{"253 non-zero", bytes.Repeat([]byte{9}, 253)},
		{"254 non-zero", bytes.Repeat([]byte{9}, 254)},
		{"255 non-zero", bytes.Repeat([]byte{9}, 255)},
		{"254 non-zero then zero", append(bytes.Repeat([]byte{9}, 254), 0)},
		{"random", random(5000, true)},
		{"random without zeros", random(1000, false)},
		{"max random", random(agentproto.MaxLinkData, true)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := agentproto.LinkFrame{Kind: agentproto.LinkData, Session: 0x0102030405060700, Data: tc.data}
			enc := agentproto.AppendLinkFrame(nil, in)
			if i := bytes.IndexByte(enc[1:len(enc)-1], 0); i >= 0 {
				t.Fatalf("Got(encoded frame) with a zero at %d; want zeros only as delimiters", i+1)
			}
			out, err := agentproto.NewLinkReader(bytes.NewReader(enc)).Next()
			if err != nil {
				t.Fatalf("Next() = %v", err)
			}
			if out.Kind != in.Kind || out.Session != in.Session || !bytes.Equal(out.Data, in.Data) {
				t.Errorf("Got(round trip) = kind %d session %x %d bytes; want kind %d session %x %d bytes",
					out.Kind, out.Session, len(out.Data), in.Kind, in.Session, len(in.Data))
			}
		})
	}
}

func TestLinkReaderSkipsDamage(t *testing.T) {
	frame := func(s uint64, data string) []byte {
		return agentproto.AppendLinkFrame(nil, agentproto.LinkFrame{Kind: agentproto.LinkData, Session: s, Data: []byte(data)})
	}
	good := frame(1, "good")
	torn := frame(2, "torn in half by a host that went away")
	corrupt := frame(3, "bit flip")
	corrupt[5] ^= 0x40
	tests := []struct {
		name    string
		stream  []byte
		dropped int
	}{
		{"clean", good, 0},
		{"garbage first", append([]byte("stale bytes \x01\x02"), good...), 1},
		{"torn frame first", append(append([]byte{}, torn[:len(torn)/2]...), good...), 1},
		{"corrupt frame first", append(append([]byte{}, corrupt...), good...), 1},
		{"oversized garbage first", append(bytes.Repeat([]byte{1}, 3*agentproto.MaxLinkData), good...), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lr := agentproto.NewLinkReader(bytes.NewReader(tc.stream))
			f, err := lr.Next()
			if err != nil {
				t.Fatalf("Next() = %v", err)
			}
			if f.Session != 1 || string(f.Data) != "good" {
				t.Errorf("Got(Next()) = session %d %q; want session 1 %q", f.Session, f.Data, "good")
			}
			if lr.Dropped() != tc.dropped {
				t.Errorf("Got(Dropped()) = %d; want %d", lr.Dropped(), tc.dropped)
			}
			if _, err := lr.Next(); !errors.Is(err, io.EOF) {
				t.Errorf("Got(Next() at end) = %v; want io.EOF", err)
			}
		})
	}
}

// eofThenData reads like a virtio-serial port: EOF while no host, then bytes.
type eofThenData struct {
	eofs int
	data []byte
}

func (r *eofThenData) Read(p []byte) (int, error) {
	if r.eofs > 0 {
		r.eofs--
		return 0, io.EOF
	}
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestLinkReaderUsableAfterEOF(t *testing.T) {
	frame := agentproto.AppendLinkFrame(nil, agentproto.LinkFrame{Kind: agentproto.LinkOpen, Session: 9})
	lr := agentproto.NewLinkReader(&eofThenData{eofs: 3, data: frame})
	for i := range 3 {
		if _, err := lr.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("Got(Next() #%d) = %v; want io.EOF", i, err)
		}
	}
	f, err := lr.Next()
	if err != nil || f.Kind != agentproto.LinkOpen || f.Session != 9 {
		t.Errorf("Got(Next() after EOFs) = %+v, %v; want the open frame", f, err)
	}
}

// switchboard lets several host clients take turns on one channel, as
// replicas do on a VM's channel: bytes from the agent go to whichever
// client attached last; every client writes straight through.
type switchboard struct {
	conn net.Conn
	mu   sync.Mutex
	cur  *io.PipeWriter
}

func newSwitchboard(conn net.Conn) *switchboard {
	sb := &switchboard{conn: conn}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			sb.mu.Lock()
			if sb.cur != nil {
				sb.cur.Write(buf[:n])
			}
			sb.mu.Unlock()
		}
	}()
	return sb
}

func (sb *switchboard) attach() io.ReadWriteCloser {
	pr, pw := io.Pipe()
	sb.mu.Lock()
	if sb.cur != nil {
		sb.cur.Close()
	}
	sb.cur = pw
	sb.mu.Unlock()
	return &boardEnd{pr: pr, w: sb.conn}
}

type boardEnd struct {
	pr *io.PipeReader
	w  io.Writer
}

func (e *boardEnd) Read(p []byte) (int, error)  { return e.pr.Read(p) }
func (e *boardEnd) Write(p []byte) (int, error) { return e.w.Write(p) }
func (e *boardEnd) Close() error                { return e.pr.Close() }

func TestHostTakeover(t *testing.T) {
	hostEnd := startAgent(t, agent.Config{})
	sb := newSwitchboard(hostEnd)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	a, err := agentproto.Dial(ctx, sb.attach(), agentproto.ClientOptions{Name: "replica-a"})
	if err != nil {
		t.Fatalf("Dial(a) = %v", err)
	}
	defer a.Close()
	if _, err := a.Ping(ctx); err != nil {
		t.Fatalf("a.Ping() = %v", err)
	}

	// b takes the channel without a disconnect the agent could see.
	b, err := agentproto.Dial(ctx, sb.attach(), agentproto.ClientOptions{Name: "replica-b"})
	if err != nil {
		t.Fatalf("Dial(b) = %v", err)
	}
	defer b.Close()
	if got := b.Hello().SessionNumber; got != 2 {
		t.Errorf("Got(b.Hello().SessionNumber) = %d; want 2", got)
	}
	for i := range 5 {
		if _, err := b.Ping(ctx); err != nil {
			t.Fatalf("b.Ping() #%d = %v", i, err)
		}
	}
	if _, err := b.Stats(ctx); err != nil {
		t.Errorf("b.Stats() = %v", err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer pcancel()
	if _, err := a.Ping(pctx); err == nil {
		t.Errorf("Got(a.Ping() after takeover) = nil; want an error")
	}
}

func TestTornFrameBeforeDial(t *testing.T) {
	hostEnd := startAgent(t, agent.Config{})
	stale := agentproto.AppendLinkFrame(nil, agentproto.LinkFrame{Kind: agentproto.LinkData, Session: 77,
		Data: bytes.Repeat([]byte("x"), 2000)})
	if _, err := hostEnd.Write(stale[:len(stale)/2]); err != nil {
		t.Fatal(err)
	}
	c := dial(t, hostEnd)
	if _, err := c.Ping(context.Background()); err != nil {
		t.Errorf("Ping() after a torn frame = %v", err)
	}
}
