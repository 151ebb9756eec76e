package vmpool

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agent"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// identityAgent dials the real agent server over a pipe; kernel nil is an
// agent without vm.identity (an older image's).
func identityAgent(t *testing.T, kernel *agent.KernelControl) *agentproto.Client {
	t.Helper()
	srv, err := agent.NewServer(agent.Config{PowerOff: func() error { return nil }, Kernel: kernel})
	if err != nil {
		t.Fatal(err)
	}
	hostEnd, agentEnd := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ctx, agentEnd) }()
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	c, err := agentproto.Dial(dctx, hostEnd, agentproto.ClientOptions{Name: "vmpool-test"})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); cancel(); <-done })
	return c
}

// TestIdentify: every call draws a fresh seed of identitySeedBytes (within
// the agent's bounds) and hands over the clock and the VM id; an agent
// without vm.identity fails it with a reason starting "vm identity", which
// fails the boot.
func TestIdentify(t *testing.T) {
	var mu sync.Mutex
	var seeds [][]byte
	var clocks []time.Time
	kernel := &agent.KernelControl{
		Reseed: func(seed []byte) error {
			mu.Lock()
			defer mu.Unlock()
			seeds = append(seeds, bytes.Clone(seed))
			return nil
		},
		SetClock: func(t time.Time) error {
			mu.Lock()
			defer mu.Unlock()
			clocks = append(clocks, t)
			return nil
		},
	}
	c := identityAgent(t, kernel)
	ctx := context.Background()
	now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, gen := range []string{"vm-one", "vm-two"} {
		if _, err := identify(ctx, c, gen, now); err != nil {
			t.Fatalf("identify(%s) = %v", gen, err)
		}
		st, err := c.Stats(ctx)
		if err != nil || st.Generation != gen {
			t.Errorf("Got(Stats().Generation) = %q, %v; want %q", st.Generation, err, gen)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seeds) != 2 {
		t.Fatalf("Got(reseeds) = %d; want 2", len(seeds))
	}
	for i, s := range seeds {
		if len(s) != identitySeedBytes || len(s) < agentproto.MinIdentitySeed || len(s) > agentproto.MaxIdentitySeed {
			t.Errorf("Got(len(seed %d)) = %d; want %d within the agent's bounds", i, len(s), identitySeedBytes)
		}
		if bytes.Equal(s, make([]byte, len(s))) {
			t.Errorf("Got(seed %d) = all zero; want random bytes", i)
		}
	}
	if bytes.Equal(seeds[0], seeds[1]) {
		t.Errorf("Got(two seeds) = the same bytes; want a fresh seed per call")
	}
	if len(clocks) != 2 || !clocks[0].Equal(now) {
		t.Errorf("Got(clock sets) = %v; want %v twice", clocks, now)
	}

	old := identityAgent(t, nil)
	_, err := identify(ctx, old, "vm-three", now)
	if !errors.Is(err, agentproto.ErrNotImplemented) || !strings.HasPrefix(err.Error(), "vm identity: ") {
		t.Errorf("Got(identify(an agent without vm.identity)) = %v; want vm identity: ... %v", err, agentproto.ErrNotImplemented)
	}
}
