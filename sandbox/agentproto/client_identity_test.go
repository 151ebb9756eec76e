package agentproto_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agent"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/agentprototest"
)

// fakeKernel records what vm.identity asked of the kernel: the real agent
// server runs on the test host here, whose clock it must never step.
type fakeKernel struct {
	mu       sync.Mutex
	seeds    [][]byte
	clocks   []time.Time
	reseedOK error
}

func (k *fakeKernel) control() *agent.KernelControl {
	return &agent.KernelControl{
		Reseed: func(seed []byte) error {
			k.mu.Lock()
			defer k.mu.Unlock()
			if k.reseedOK != nil {
				return k.reseedOK
			}
			k.seeds = append(k.seeds, bytes.Clone(seed))
			return nil
		},
		SetClock: func(t time.Time) error {
			k.mu.Lock()
			defer k.mu.Unlock()
			k.clocks = append(k.clocks, t)
			return nil
		},
	}
}

func (k *fakeKernel) calls() (seeds [][]byte, clocks []time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.seeds), slices.Clone(k.clocks)
}

func seedOf(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }

// TestSetIdentity: the real agent server takes a seed of MinIdentitySeed to
// MaxIdentitySeed bytes and a wall clock, reseeds and sets the clock in that
// order, reports the step and the kernel's boot id, and keeps the generation
// for Stats; anything out of bounds is bad_request and changes nothing.
func TestSetIdentity(t *testing.T) {
	hostBootID, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Hour).Truncate(time.Second)
	tests := []struct {
		name    string
		req     agentproto.IdentityRequest
		wantErr error
	}{
		{"shortest seed", agentproto.IdentityRequest{Seed: seedOf(agentproto.MinIdentitySeed, 1), Now: now, Generation: "vm-a"}, nil},
		{"longest seed", agentproto.IdentityRequest{Seed: seedOf(agentproto.MaxIdentitySeed, 2), Now: now, Generation: "vm-b"}, nil},
		{"no generation", agentproto.IdentityRequest{Seed: seedOf(64, 3), Now: now}, nil},
		{"seed one byte short", agentproto.IdentityRequest{Seed: seedOf(agentproto.MinIdentitySeed-1, 4), Now: now, Generation: "vm-c"}, agentproto.ErrBadRequest},
		{"seed one byte long", agentproto.IdentityRequest{Seed: seedOf(agentproto.MaxIdentitySeed+1, 5), Now: now, Generation: "vm-d"}, agentproto.ErrBadRequest},
		{"no seed", agentproto.IdentityRequest{Now: now, Generation: "vm-e"}, agentproto.ErrBadRequest},
		{"no clock", agentproto.IdentityRequest{Seed: seedOf(64, 6), Generation: "vm-f"}, agentproto.ErrBadRequest},
		{"clock in 1970", agentproto.IdentityRequest{Seed: seedOf(64, 7), Now: time.Unix(5, 0), Generation: "vm-g"}, agentproto.ErrBadRequest},
		{"generation too long", agentproto.IdentityRequest{Seed: seedOf(64, 8), Now: now, Generation: strings.Repeat("v", 129)}, agentproto.ErrBadRequest},
		{"generation with a newline", agentproto.IdentityRequest{Seed: seedOf(64, 9), Now: now, Generation: "vm-h\nforged log line"}, agentproto.ErrBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := &fakeKernel{}
			c := dial(t, startAgent(t, agent.Config{Kernel: k.control()}))
			if !slices.Contains(c.Hello().Capabilities, string(agentproto.OpVMIdentity)) {
				t.Fatalf("Got(capabilities) = %v; want %s", c.Hello().Capabilities, agentproto.OpVMIdentity)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			before := time.Now()
			res, err := c.SetIdentity(ctx, tc.req)
			after := time.Now()
			seeds, clocks := k.calls()
			stats, serr := c.Stats(ctx)
			if serr != nil {
				t.Fatalf("Stats() = %v", serr)
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Got(SetIdentity()) = %+v, %v; want %v", res, err, tc.wantErr)
				}
				if len(seeds) != 0 || len(clocks) != 0 || stats.Generation != "" {
					t.Errorf("Got(after a refused identity) = %d reseeds, %d clock sets, generation %q; want none", len(seeds), len(clocks), stats.Generation)
				}
				return
			}
			if err != nil {
				t.Fatalf("SetIdentity() = %v", err)
			}
			if len(seeds) != 1 || !bytes.Equal(seeds[0], tc.req.Seed) {
				t.Errorf("Got(seeds the kernel got) = %d; want exactly the request's %d bytes", len(seeds), len(tc.req.Seed))
			}
			if len(clocks) != 1 || !clocks[0].Equal(tc.req.Now) {
				t.Errorf("Got(clock sets) = %v; want [%v]", clocks, tc.req.Now)
			}
			if !res.Reseeded {
				t.Errorf("Got(Reseeded) = false; want true")
			}
			// The step is Now minus the agent's clock when it set it.
			if lo, hi := tc.req.Now.Sub(after), tc.req.Now.Sub(before); res.ClockStepped < lo || res.ClockStepped > hi {
				t.Errorf("Got(ClockStepped) = %v; want between %v and %v", res.ClockStepped, lo, hi)
			}
			if res.BootID != strings.TrimSpace(string(hostBootID)) {
				t.Errorf("Got(BootID) = %q; want the kernel's %q", res.BootID, strings.TrimSpace(string(hostBootID)))
			}
			if stats.Generation != tc.req.Generation {
				t.Errorf("Got(Stats().Generation) = %q; want %q", stats.Generation, tc.req.Generation)
			}
		})
	}
}

// TestSetIdentityAgain: a second identity replaces the first (the host
// gives a new one after every handshake of a restored VM).
func TestSetIdentityAgain(t *testing.T) {
	k := &fakeKernel{}
	c := dial(t, startAgent(t, agent.Config{Kernel: k.control()}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, second := seedOf(32, 0xaa), seedOf(48, 0xbb)
	if _, err := c.SetIdentity(ctx, agentproto.IdentityRequest{Seed: first, Now: time.Now(), Generation: "vm-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetIdentity(ctx, agentproto.IdentityRequest{Seed: second, Now: time.Now(), Generation: "vm-2"}); err != nil {
		t.Fatal(err)
	}
	seeds, clocks := k.calls()
	if len(seeds) != 2 || !bytes.Equal(seeds[0], first) || !bytes.Equal(seeds[1], second) || len(clocks) != 2 {
		t.Errorf("Got(kernel calls) = %d seeds, %d clocks; want both seeds in order and two clock sets", len(seeds), len(clocks))
	}
	if st, err := c.Stats(ctx); err != nil || st.Generation != "vm-2" {
		t.Errorf("Got(Stats().Generation) = %q, %v; want vm-2", st.Generation, err)
	}
}

// TestSetIdentityKernelFails: a reseed that fails is the op's error; the
// clock is not touched and the generation not kept.
func TestSetIdentityKernelFails(t *testing.T) {
	k := &fakeKernel{reseedOK: errors.New("RNDADDENTROPY: operation not permitted")}
	c := dial(t, startAgent(t, agent.Config{Kernel: k.control()}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.SetIdentity(ctx, agentproto.IdentityRequest{Seed: seedOf(64, 1), Now: time.Now(), Generation: "vm-x"})
	var re *agentproto.RemoteError
	if !errors.As(err, &re) || re.Err.Code != agentproto.CodeInternal || !strings.Contains(err.Error(), "not permitted") {
		t.Fatalf("Got(SetIdentity()) = %v; want the agent's internal error naming the cause", err)
	}
	_, clocks := k.calls()
	st, serr := c.Stats(ctx)
	if len(clocks) != 0 || serr != nil || st.Generation != "" {
		t.Errorf("Got(after a failed reseed) = %d clock sets, generation %q (%v); want none", len(clocks), st.Generation, serr)
	}
}

// TestSetIdentityNeedsTheMachine: an agent that is not the VM's init and
// was given no KernelControl (an agent run on a host) neither offers
// vm.identity nor serves it when asked anyway, so it never steps the clock
// of the machine it runs on.
func TestSetIdentityNeedsTheMachine(t *testing.T) {
	conn := startAgent(t, agent.Config{})
	c := dial(t, conn)
	if slices.Contains(c.Hello().Capabilities, string(agentproto.OpVMIdentity)) {
		t.Errorf("Got(capabilities) = %v; want no %s", c.Hello().Capabilities, agentproto.OpVMIdentity)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := agentproto.IdentityRequest{Seed: seedOf(64, 1), Now: time.Now().Add(time.Hour), Generation: "vm-x"}
	if _, err := c.SetIdentity(ctx, req); !errors.Is(err, agentproto.ErrNotImplemented) || !strings.HasPrefix(err.Error(), "vm identity: ") {
		t.Errorf("Got(SetIdentity()) = %v; want vm identity: ... %v", err, agentproto.ErrNotImplemented)
	}
	sess := rawSession(t, startAgent(t, agent.Config{}))
	if resp := rawCall(t, sess, helloReq(1, 1)); resp.Error != nil {
		t.Fatalf("hello = %+v", resp.Error)
	}
	resp := rawCall(t, sess, agentproto.Request{V: agentproto.Version, Op: agentproto.OpVMIdentity, Identity: &req})
	if resp.Error == nil || resp.Error.Code != agentproto.CodeNotImplemented || resp.Identity != nil {
		t.Errorf("Got(raw vm.identity) = %+v, %+v; want %s", resp.Error, resp.Identity, agentproto.CodeNotImplemented)
	}
}

// TestSetIdentityDistrustsTheAgent: what the agent answers is its claim:
// no result, no reseed, or a boot id that is not one is a protocol error.
func TestSetIdentityDistrustsTheAgent(t *testing.T) {
	const goodBootID = "6f1c2a44-8b0e-4d3a-9c5e-0123456789ab"
	tests := []struct {
		name string
		res  *agentproto.IdentityResult
	}{
		{"no result", nil},
		{"not reseeded", &agentproto.IdentityResult{Reseeded: false, BootID: goodBootID}},
		{"empty boot id", &agentproto.IdentityResult{Reseeded: true}},
		{"boot id with a newline", &agentproto.IdentityResult{Reseeded: true, BootID: goodBootID + "\n"}},
		{"long boot id", &agentproto.IdentityResult{Reseeded: true, BootID: strings.Repeat("a", 60000)}},
		{"upper-case boot id", &agentproto.IdentityResult{Reseeded: true, BootID: strings.ToUpper(goodBootID)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := answeringIdentity(t, tc.res)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := c.SetIdentity(ctx, agentproto.IdentityRequest{Seed: seedOf(64, 1), Now: time.Now(), Generation: "vm-x"})
			if !errors.Is(err, agentproto.ErrProtocol) || len(err.Error()) > 300 {
				t.Errorf("Got(SetIdentity()) = %+v, %.300v; want a short %v", res, err, agentproto.ErrProtocol)
			}
		})
	}
	t.Run("a good answer", func(t *testing.T) {
		c := answeringIdentity(t, &agentproto.IdentityResult{Reseeded: true, BootID: goodBootID, ClockStepped: time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := c.SetIdentity(ctx, agentproto.IdentityRequest{Seed: seedOf(64, 1), Now: time.Now(), Generation: "vm-x"})
		if err != nil || res.BootID != goodBootID || res.ClockStepped != time.Minute {
			t.Errorf("Got(SetIdentity()) = %+v, %v; want the agent's answer", res, err)
		}
	})
}

// answeringIdentity is a client of a guest that answers every vm.identity
// with res.
func answeringIdentity(t *testing.T, res *agentproto.IdentityResult) *agentproto.Client {
	t.Helper()
	conn, stop, err := agentprototest.Pipe(func(st net.Conn, req agentproto.Request) {
		switch req.Op {
		case agentproto.OpHello:
			agentprototest.Hello(st, agentproto.OpVMIdentity)
		case agentproto.OpVMIdentity:
			agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version, Identity: res})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return dial(t, conn)
}
