package agent

import (
	"context"
	"errors"
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
