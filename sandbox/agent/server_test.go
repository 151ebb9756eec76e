package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// TestOnHello: init starts its later boot work from OnHello, so it must run
// once per answered hello and not for other requests.
func TestOnHello(t *testing.T) {
	calls := make(chan struct{}, 8)
	srv, err := NewServer(Config{PowerOff: func() error { return nil }, OnHello: func() { calls <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	hostEnd, agentEnd := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, agentEnd) }()
	defer func() {
		cancel()
		hostEnd.Close()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Serve() = %v; want nil or context.Canceled", err)
		}
	}()

	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	c, err := agentproto.Dial(dctx, hostEnd, agentproto.ClientOptions{Name: "test"})
	if err != nil {
		t.Fatalf("Dial() = %v", err)
	}
	defer c.Close()
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("Got(OnHello calls after Dial) = 0 in 10 s; want 1")
	}
	for range 3 {
		if _, err := c.Ping(dctx); err != nil {
			t.Fatalf("Ping() = %v", err)
		}
	}
	if n := len(calls); n != 0 {
		t.Errorf("Got(OnHello calls after 3 pings) = %d more; want 0", n)
	}
}

// lateNoticePort is a virtio-serial port as the guest sees it when the
// host's connect notice lags its data: the new host's first frames arrive,
// then one read reports no host (EOF), then the rest of its frames.
type lateNoticePort struct {
	fromHost *io.PipeReader
	toHost   *io.PipeWriter
	reads    int
	eofAfter int
}

func (p *lateNoticePort) Read(b []byte) (int, error) {
	p.reads++
	if p.reads == p.eofAfter+1 {
		return 0, io.EOF
	}
	return p.fromHost.Read(b)
}

func (p *lateNoticePort) Write(b []byte) (int, error) { return p.toHost.Write(b) }

func (p *lateNoticePort) Close() error {
	p.fromHost.Close()
	return p.toHost.Close()
}

type hostEnd struct {
	*io.PipeReader
	w *io.PipeWriter
}

func (h hostEnd) Write(b []byte) (int, error) { return h.w.Write(b) }
func (h hostEnd) Close() error {
	h.PipeReader.Close()
	return h.w.Close()
}

// TestPortEOFAfterHostFrames: an EOF read from the port after the host's
// LinkOpen (the disconnect notice of the previous host, or the connect
// notice of this one, arriving late) must not end this host's session.
func TestPortEOFAfterHostFrames(t *testing.T) {
	for _, eofAfter := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("eof after read %d", eofAfter), func(t *testing.T) {
			srv, err := NewServer(Config{PowerOff: func() error { return nil }})
			if err != nil {
				t.Fatal(err)
			}
			agentR, hostW := io.Pipe()
			hostR, agentW := io.Pipe()
			port := &lateNoticePort{fromHost: agentR, toHost: agentW, eofAfter: eofAfter}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.ServeLink(ctx, port, time.Millisecond) }()
			defer func() {
				cancel()
				port.Close()
				<-done
			}()

			dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
			defer dcancel()
			c, err := agentproto.Dial(dctx, hostEnd{PipeReader: hostR, w: hostW}, agentproto.ClientOptions{Name: "test"})
			if err != nil {
				t.Fatalf("Got(Dial() with an EOF after read %d) = %v; want a session", eofAfter, err)
			}
			defer c.Close()
			if _, err := c.Ping(dctx); err != nil {
				t.Errorf("Got(Ping()) = %v; want nil", err)
			}
		})
	}
}
