package agentproto_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agent"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/agentprototest"
)

// startAgent runs the real agent server on one end of a net.Pipe and returns
// the other end.
func startAgent(t *testing.T, cfg agent.Config) net.Conn {
	t.Helper()
	if cfg.PowerOff == nil {
		cfg.PowerOff = func() error { return nil }
	}
	if cfg.Version == "" {
		cfg.Version = "test-1"
	}
	srv, err := agent.NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer() = %v", err)
	}
	hostEnd, agentEnd := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, agentEnd) }()
	t.Cleanup(func() {
		cancel()
		hostEnd.Close()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Serve() = %v; want nil or context.Canceled", err)
		}
	})
	return hostEnd
}

func dial(t *testing.T, conn net.Conn) *agentproto.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := agentproto.Dial(ctx, conn, agentproto.ClientOptions{Name: "test"})
	if err != nil {
		t.Fatalf("Dial() = %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestHello(t *testing.T) {
	c := dial(t, startAgent(t, agent.Config{Version: "v-hello"}))
	h := c.Hello()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	if h.Protocol != agentproto.Version {
		t.Errorf("Got(Hello().Protocol) = %d; want %d", h.Protocol, agentproto.Version)
	}
	if h.Agent != "v-hello" {
		t.Errorf("Got(Hello().Agent) = %q; want %q", h.Agent, "v-hello")
	}
	if want := unix.ByteSliceToString(u.Release[:]); h.Kernel != want {
		t.Errorf("Got(Hello().Kernel) = %q; want %q", h.Kernel, want)
	}
	for _, op := range []agentproto.Op{agentproto.OpHello, agentproto.OpPing, agentproto.OpStats, agentproto.OpShutdown} {
		if !slices.Contains(h.Capabilities, string(op)) {
			t.Errorf("Got(Hello().Capabilities) = %v; want it to contain %q", h.Capabilities, op)
		}
	}
	if slices.Contains(h.Capabilities, string(agentproto.OpExec)) {
		t.Errorf("Got(Hello().Capabilities) = %v; want no %q before it is implemented", h.Capabilities, agentproto.OpExec)
	}
	if h.SessionNumber != 1 || h.PID1 || h.Uptime <= 0 {
		t.Errorf("Got(Hello()) = session %d, pid1 %v, uptime %v; want 1, false, > 0", h.SessionNumber, h.PID1, h.Uptime)
	}
}

func TestPing(t *testing.T) {
	c := dial(t, startAgent(t, agent.Config{}))
	for i := range 3 {
		rtt, err := c.Ping(context.Background())
		if err != nil {
			t.Fatalf("Ping() #%d = %v", i, err)
		}
		if rtt <= 0 {
			t.Errorf("Got(Ping() #%d) = %v; want > 0", i, rtt)
		}
	}
}

func TestStats(t *testing.T) {
	crunPath, crunErr := exec.LookPath("crun")
	tests := []struct {
		name     string
		crunPath string
		wantCrun string // prefix; "" means empty
	}{
		{"no crun", "/nonexistent/crun", ""},
		{"crun", crunPath, "crun version "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.crunPath == "" {
				if os.Getenv("CI") == "true" {
					t.Fatalf("crun not installed: %v", crunErr)
				}
				t.Skipf("crun not installed: %v", crunErr)
			}
			cgroupDir := t.TempDir()
			if err := os.WriteFile(cgroupDir+"/cgroup.controllers", []byte("cpu memory pids\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			c := dial(t, startAgent(t, agent.Config{CrunPath: tc.crunPath, CgroupDir: cgroupDir}))
			st, err := c.Stats(context.Background())
			if err != nil {
				t.Fatalf("Stats() = %v", err)
			}
			if st.MemTotal == 0 || st.MemAvailable == 0 || st.MemAvailable > st.MemTotal {
				t.Errorf("Got(Stats() memory) = total %d available %d; want 0 < available <= total", st.MemTotal, st.MemAvailable)
			}
			if st.CPUs != runtime.NumCPU() {
				t.Errorf("Got(Stats().CPUs) = %d; want %d", st.CPUs, runtime.NumCPU())
			}
			if st.Uptime <= 0 || st.Load1 < 0 {
				t.Errorf("Got(Stats()) uptime %v load1 %v; want > 0, >= 0", st.Uptime, st.Load1)
			}
			if want := []string{"cpu", "memory", "pids"}; !slices.Equal(st.CgroupControllers, want) {
				t.Errorf("Got(Stats().CgroupControllers) = %v; want %v", st.CgroupControllers, want)
			}
			if tc.wantCrun == "" && st.Crun != "" || !strings.HasPrefix(st.Crun, tc.wantCrun) {
				t.Errorf("Got(Stats().Crun) = %q; want prefix %q", st.Crun, tc.wantCrun)
			}
		})
	}
}

func TestShutdown(t *testing.T) {
	var calls atomic.Int32
	powered := make(chan struct{}, 2)
	c := dial(t, startAgent(t, agent.Config{PowerOff: func() error {
		calls.Add(1)
		powered <- struct{}{}
		return nil
	}}))
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown() = %v", err)
	}
	select {
	case <-powered:
	case <-time.After(5 * time.Second):
		t.Fatal("PowerOff not called within 5 s of Shutdown()")
	}
	// A second request must not power off twice.
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown() = %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := calls.Load(); got != 1 {
		t.Errorf("Got(PowerOff calls) = %d; want 1", got)
	}
}

// rawSession opens a yamux session to the real agent without the Client, to
// send what a well-behaved client never would.
func rawSession(t *testing.T, conn net.Conn) *yamux.Session {
	t.Helper()
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = devNull{}
	link, err := agentproto.NewHostLink(conn)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := yamux.Client(link, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

type devNull struct{}

func (devNull) Write(p []byte) (int, error) { return len(p), nil }

func rawCall(t *testing.T, sess *yamux.Session, req agentproto.Request) agentproto.Response {
	t.Helper()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.SetDeadline(time.Now().Add(10 * time.Second))
	if err := agentproto.WriteMessage(st, req); err != nil {
		t.Fatalf("WriteMessage() = %v", err)
	}
	var resp agentproto.Response
	if err := agentproto.ReadMessage(st, &resp); err != nil {
		t.Fatalf("ReadMessage() = %v", err)
	}
	return resp
}

func helloReq(min, max int) agentproto.Request {
	return agentproto.Request{V: agentproto.Version, Op: agentproto.OpHello,
		Hello: &agentproto.HelloRequest{MinVersion: min, MaxVersion: max}}
}

func TestRequestErrors(t *testing.T) {
	tests := []struct {
		name      string
		hello     bool
		req       agentproto.Request
		wantCode  string
		wantRange bool
	}{
		{"unknown op", true, agentproto.Request{V: 1, Op: "frobnicate"}, agentproto.CodeUnknownOp, false},
		{"exec not implemented", true, agentproto.Request{V: 1, Op: agentproto.OpExec}, agentproto.CodeNotImplemented, false},
		{"sandbox.create without sandboxes", true, agentproto.Request{V: 1, Op: agentproto.OpSandboxCreate}, agentproto.CodeNotImplemented, false},
		{"file.read not implemented", true, agentproto.Request{V: 1, Op: agentproto.OpFileRead}, agentproto.CodeNotImplemented, false},
		{"file.write not implemented", true, agentproto.Request{V: 1, Op: agentproto.OpFileWrite}, agentproto.CodeNotImplemented, false},
		{"egress not implemented", true, agentproto.Request{V: 1, Op: agentproto.OpEgress}, agentproto.CodeNotImplemented, false},
		{"ping before hello", false, agentproto.Request{V: 1, Op: agentproto.OpPing}, agentproto.CodeBadRequest, false},
		{"newer request version", true, agentproto.Request{V: agentproto.Version + 1, Op: agentproto.OpPing}, agentproto.CodeUnsupportedVersion, true},
		{"version zero", true, agentproto.Request{Op: agentproto.OpPing}, agentproto.CodeUnsupportedVersion, true},
		{"hello of newer versions only", false, helloReq(agentproto.Version+1, agentproto.Version+3), agentproto.CodeUnsupportedVersion, true},
		{"hello without body", false, agentproto.Request{V: 1, Op: agentproto.OpHello}, agentproto.CodeBadRequest, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sess := rawSession(t, startAgent(t, agent.Config{}))
			if tc.hello {
				if resp := rawCall(t, sess, helloReq(1, 1)); resp.Error != nil || resp.Hello == nil {
					t.Fatalf("hello = %+v; want a hello", resp)
				}
			}
			resp := rawCall(t, sess, tc.req)
			if resp.Error == nil {
				t.Fatalf("Got(%s) = %+v; want error %s", tc.req.Op, resp, tc.wantCode)
			}
			if resp.Error.Code != tc.wantCode {
				t.Errorf("Got(%s error code) = %q; want %q (%s)", tc.req.Op, resp.Error.Code, tc.wantCode, resp.Error.Message)
			}
			if tc.wantRange && (resp.Error.MinVersion != agentproto.MinVersion || resp.Error.MaxVersion != agentproto.Version) {
				t.Errorf("Got(error range) = %d-%d; want %d-%d", resp.Error.MinVersion, resp.Error.MaxVersion, agentproto.MinVersion, agentproto.Version)
			}
			// The session survives a bad request.
			if resp := rawCall(t, sess, helloReq(1, 1)); resp.Error != nil {
				t.Errorf("hello after %s = %+v; want success", tc.name, resp.Error)
			}
		})
	}
}

func TestHelloPicksCommonVersion(t *testing.T) {
	sess := rawSession(t, startAgent(t, agent.Config{}))
	resp := rawCall(t, sess, helloReq(agentproto.MinVersion, agentproto.Version+5))
	if resp.Error != nil || resp.Hello == nil {
		t.Fatalf("hello = %+v; want a hello", resp)
	}
	if resp.Hello.Protocol != agentproto.Version || resp.V != agentproto.Version {
		t.Errorf("Got(hello protocol, v) = %d, %d; want %d, %d", resp.Hello.Protocol, resp.V, agentproto.Version, agentproto.Version)
	}
}

func TestOversizedRequestRejected(t *testing.T) {
	sess := rawSession(t, startAgent(t, agent.Config{}))
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.SetDeadline(time.Now().Add(10 * time.Second))
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], agentproto.MaxMessageSize+1)
	if _, err := st.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	var resp agentproto.Response
	if err := agentproto.ReadMessage(st, &resp); err != nil {
		t.Fatalf("ReadMessage() = %v", err)
	}
	if resp.Error == nil || resp.Error.Code != agentproto.CodeBadRequest {
		t.Errorf("Got(oversized request) = %+v; want %s", resp.Error, agentproto.CodeBadRequest)
	}
}

// fakeAgent is a hostile or mistaken guest: it answers every stream with reply.
func fakeAgent(t *testing.T, reply func(st net.Conn, req agentproto.Request)) (net.Conn, *yamux.Session) {
	t.Helper()
	hostEnd, agentEnd := net.Pipe()
	sess, err := agentprototest.Serve(agentEnd, reply)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close(); hostEnd.Close() })
	return hostEnd, sess
}

func TestDialRejectsBadAgents(t *testing.T) {
	tests := []struct {
		name  string
		reply func(st net.Conn, req agentproto.Request)
		want  error
	}{
		{"agent picks a newer protocol", func(st net.Conn, req agentproto.Request) {
			agentproto.WriteMessage(st, agentproto.Response{V: 2, Hello: &agentproto.Hello{Protocol: 2}})
		}, agentproto.ErrUnsupportedVersion},
		{"agent speaks no common version", func(st net.Conn, req agentproto.Request) {
			agentproto.WriteMessage(st, agentproto.Response{V: 1, Error: &agentproto.Error{
				Code: agentproto.CodeUnsupportedVersion, Message: "only 7", MinVersion: 7, MaxVersion: 7}})
		}, agentproto.ErrUnsupportedVersion},
		{"hello without body", func(st net.Conn, req agentproto.Request) {
			agentproto.WriteMessage(st, agentproto.Response{V: 1})
		}, agentproto.ErrProtocol},
		{"oversized response", func(st net.Conn, req agentproto.Request) {
			var hdr [4]byte
			binary.BigEndian.PutUint32(hdr[:], 64<<20)
			st.Write(hdr[:])
			st.Write(make([]byte, 1024))
		}, agentproto.ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, _ := fakeAgent(t, tc.reply)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := agentproto.Dial(ctx, conn, agentproto.ClientOptions{})
			if err == nil {
				c.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("Got(Dial()) = %v; want %v", err, tc.want)
			}
		})
	}
}

func TestCallHonoursContext(t *testing.T) {
	conn, _ := fakeAgent(t, func(st net.Conn, req agentproto.Request) {
		if req.Op == agentproto.OpHello {
			agentproto.WriteMessage(st, agentproto.Response{V: 1, Hello: &agentproto.Hello{Protocol: 1}})
			return
		}
		time.Sleep(time.Minute) // a guest that never answers
	})
	c := dial(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Ping(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Got(Ping() on a silent agent) = %v; want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Got(Ping() duration) = %v; want it bounded by the context", d)
	}
}

func TestAgentOpenedStreamRefused(t *testing.T) {
	conn, sess := fakeAgent(t, func(st net.Conn, req agentproto.Request) {
		agentproto.WriteMessage(st, agentproto.Response{V: 1, Hello: &agentproto.Hello{Protocol: 1}})
	})
	dial(t, conn)
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.SetDeadline(time.Now().Add(10 * time.Second))
	req := agentproto.Request{V: 1, Op: agentproto.OpEgress, Egress: &agentproto.EgressRequest{Host: "example.org", Port: 443}}
	if err := agentproto.WriteMessage(st, req); err != nil {
		t.Fatal(err)
	}
	var resp agentproto.Response
	if err := agentproto.ReadMessage(st, &resp); err != nil {
		t.Fatalf("ReadMessage() = %v", err)
	}
	if resp.Error == nil || resp.Error.Code != agentproto.CodeNotImplemented {
		t.Errorf("Got(agent-opened egress) = %+v; want %s", resp.Error, agentproto.CodeNotImplemented)
	}
}

func TestSessionEndsWhenHostLeaves(t *testing.T) {
	srv, err := agent.NewServer(agent.Config{PowerOff: func() error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	hostEnd, agentEnd := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), agentEnd) }()
	c, err := agentproto.Dial(context.Background(), hostEnd, agentproto.ClientOptions{})
	if err != nil {
		t.Fatalf("Dial() = %v", err)
	}
	c.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Got(Serve() after host left) = %v; want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve() did not return after the host closed the connection")
	}
	select {
	case <-c.Done():
	default:
		t.Error("Got(Done()) open after Close(); want closed")
	}
}

// TestDialWaitsForASlowBoot: the guest's agent answers only after the
// host's pings would have timed out (a TCG boot on a loaded host takes more
// than yamux's 15 s keepalive plus 10 s ping timeout): the handshake still
// succeeds, bounded by its context alone, and pings run once it has.
func TestDialWaitsForASlowBoot(t *testing.T) {
	srv, err := agent.NewServer(agent.Config{PowerOff: func() error { return nil }, Version: "slow-boot"})
	if err != nil {
		t.Fatal(err)
	}
	// A socket pair buffers like the virtio-serial channel does while the
	// guest has not opened its port: the host's writes do not wait for it.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	hostEnd, agentEnd := fileConn(t, fds[0]), fileConn(t, fds[1])
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	booted := make(chan struct{})
	go func() {
		// Booting: nothing reads the channel for longer than a ping may wait.
		select {
		case <-time.After(11 * time.Second):
		case <-ctx.Done():
		}
		close(booted)
		done <- srv.Serve(ctx, agentEnd)
	}()
	defer func() {
		cancel()
		hostEnd.Close()
		<-done
	}()
	dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
	defer dcancel()
	c, err := agentproto.Dial(dctx, hostEnd, agentproto.ClientOptions{Name: "test", KeepAliveInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("Got(Dial to an agent that boots for 11 s) = %v; want the handshake to wait for it", err)
	}
	defer c.Close()
	<-booted
	if c.Hello().Agent != "slow-boot" {
		t.Errorf("Got(Hello().Agent) = %q; want slow-boot", c.Hello().Agent)
	}
	// The keepalive runs now: the session stays up across several pings.
	time.Sleep(500 * time.Millisecond)
	if _, err := c.Ping(dctx); err != nil {
		t.Errorf("Got(Ping after the keepalive ran) = %v; want nil", err)
	}
}

func fileConn(t *testing.T, fd int) net.Conn {
	t.Helper()
	f := os.NewFile(uintptr(fd), "socketpair")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
