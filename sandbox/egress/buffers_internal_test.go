package egress

import (
	"net"
	"syscall"
	"testing"
)

// tcpPair is a connected loopback TCP pair.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

func sockopt(t *testing.T, c *net.TCPConn, level, opt int) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := raw.Control(func(fd uintptr) { v, serr = syscall.GetsockoptInt(int(fd), level, opt) }); err != nil || serr != nil {
		t.Fatalf("getsockopt %d: %v %v", opt, err, serr)
	}
	return v
}

// TestBufferSockets: the upstream socket's receive window is bounded as
// configured, and a negative setting leaves the kernel's own.
func TestBufferSockets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rcv     int
		wantRcv func(def int) int
	}{
		{"defaults", 0, func(int) int { return 1 << 20 }},
		{"set", 256 << 10, func(int) int { return 256 << 10 }},
		{"kernel", -1, func(def int) int { return def }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := New(Config{Policies: PoliciesFunc(nil), UpstreamWindow: tc.rcv})
			if err != nil {
				t.Fatal(err)
			}
			up, _ := tcpPair(t)
			defRcv := sockopt(t, up, syscall.IPPROTO_TCP, syscall.TCP_WINDOW_CLAMP)
			g.bufferSockets(up)
			if got, want := sockopt(t, up, syscall.IPPROTO_TCP, syscall.TCP_WINDOW_CLAMP), tc.wantRcv(defRcv); got != want {
				t.Errorf("Got(upstream TCP_WINDOW_CLAMP) = %d; want %d", got, want)
			}
		})
	}
}
