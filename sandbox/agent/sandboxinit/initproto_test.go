package sandboxinit

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func seqpacketPair(t *testing.T) (a, b *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "seqpacket")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// TestRecvInitSizes: recvInit sizes its buffer by the message (peeked),
// so every size up to the bound arrives whole with its descriptors, one
// over the bound is refused, and the next message still arrives.
func TestRecvInitSizes(t *testing.T) {
	a, b := seqpacketPair(t)
	// Room for a message over the bound (the kernel doubles what it gets,
	// up to net.core.wmem_max).
	if err := a.SetWriteBuffer(1 << 20); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 4 << 10, maxInitMessage - 64} {
		want := spawnRequest{Argv: []string{"echo", strings.Repeat("x", n)}}
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := sendInit(a, want, int(r.Fd())); err != nil {
			t.Fatalf("send %d bytes: %v", n, err)
		}
		r.Close()
		var got spawnRequest
		fds, err := recvInit(b, &got)
		if err != nil || len(fds) != 1 || len(got.Argv) != 2 || got.Argv[1] != want.Argv[1] {
			t.Fatalf("Got(recv of %d bytes) = %d argv, %d fds, %v; want it whole with 1 fd", n, len(got.Argv), len(fds), err)
		}
		closeFDs(fds)
		w.Close()
	}
	// Over the bound: written raw, as a hostile peer would.
	if _, err := a.Write(make([]byte, maxInitMessage+10)); err != nil {
		t.Fatal(err)
	}
	var v initReply
	if _, err := recvInit(b, &v); !errors.Is(err, errTruncated) {
		t.Errorf("Got(recv over the bound) = %v; want errTruncated", err)
	}
	if err := sendInit(a, initReply{PID: 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := recvInit(b, &v); err != nil || v.PID != 7 {
		t.Errorf("Got(recv after a refused one) = %+v, %v; want pid 7", v, err)
	}
	a.Close()
	if _, err := recvInit(b, &v); err == nil {
		t.Errorf("Got(recv after the peer closed) = nil error; want one")
	}
}
