package hypervisor_test

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
)

// socketOf is the chardev socket a direct channel is connected to, "" for
// a libvirt stream.
func socketOf(ch io.ReadWriteCloser) string {
	if d, ok := ch.(interface{ ChannelSocket() string }); ok {
		return d.ChannelSocket()
	}
	return ""
}

// echoRTTs times n shell-echo round trips on ch.
func echoRTTs(t *testing.T, ch io.ReadWriteCloser, n int) []time.Duration {
	t.Helper()
	rtts := make([]time.Duration, 0, n)
	for i := range n {
		msg := "ping-" + strconv.Itoa(i)
		t0 := time.Now()
		if _, err := io.WriteString(ch, msg+"\n"); err != nil {
			t.Fatalf("write: %v", err)
		}
		if got := readLine(t, ch, 10*time.Second); got != msg {
			t.Fatalf("echo of %q = %q; want %q", msg, got, msg)
		}
		rtts = append(rtts, time.Since(t0))
	}
	return rtts
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestChannelDirect: on qemu:///system a VM's channel is a direct
// connection to its QEMU chardev socket (the one in the live XML), held by
// one client at a time like the libvirt stream; ChannelStream gives the
// stream on the same VM. The two are timed interleaved (logged, not
// asserted).
func TestChannelDirect(t *testing.T) {
	t.Parallel()
	guest := systemGuest(t)
	h := hypervisortest.Connect(t, hypervisor.Config{URI: systemURI})
	viaStream := hypervisortest.Connect(t, hypervisor.Config{URI: systemURI, InstallationID: h.InstallationID(), ChannelStream: true})
	ctx := context.Background()
	id := hypervisortest.NewID("direct-")
	if _, err := h.Create(ctx, guest.Spec(id, "tenant-a")); err != nil {
		t.Fatalf("Create(%s) error = %v", id, err)
	}
	ch, err := h.OpenChannel(ctx, id, guest.Channel)
	if err != nil {
		t.Fatalf("OpenChannel(%s) error = %v", id, err)
	}
	if ready := readLine(t, ch, 120*time.Second); !strings.HasPrefix(ready, "READY ") {
		t.Fatalf("first line = %q; want READY <uptime>", ready)
	}
	sock := socketOf(ch)
	if sock == "" {
		t.Fatalf("OpenChannel on %s gave a libvirt stream; want the direct socket", systemURI)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("channel socket %s: %v, %v; want a unix socket", sock, fi, err)
	}
	if !strings.HasSuffix(sock, "/"+guest.Channel) {
		t.Errorf("channel socket = %s; want the chardev of channel %s", sock, guest.Channel)
	}

	d, err := h.Lookup(ctx, id)
	if err != nil {
		t.Fatalf("Lookup(%s) error = %v", id, err)
	}
	if pid := hypervisortest.ChannelHolder(t, d.Name, guest.Channel); pid != os.Getpid() {
		t.Errorf("Got(holder of the channel lock) = pid %d; want this process, %d", pid, os.Getpid())
	}

	// One client at a time, on this Host and any other of this machine.
	other := hypervisortest.Connect(t, hypervisor.Config{URI: systemURI, InstallationID: h.InstallationID()})
	for name, hh := range map[string]*hypervisor.Host{"same host": h, "other host": other} {
		if second, err := hh.OpenChannel(ctx, id, guest.Channel); !errors.Is(err, hypervisor.ErrConflict) {
			if second != nil {
				second.Close()
			}
			t.Errorf("%s: second OpenChannel error = %v; want ErrConflict", name, err)
		}
	}

	// Interleaved: direct, stream, direct, … on the same VM. Closing one
	// frees the VM for the next, whichever path it takes.
	var direct, stream []time.Duration
	for round := range 4 {
		direct = append(direct, echoRTTs(t, ch, 50)...)
		if err := ch.Close(); err != nil {
			t.Fatalf("Close() error = %v", err)
		}
		st, err := viaStream.OpenChannel(ctx, id, guest.Channel)
		if err != nil {
			t.Fatalf("round %d: OpenChannel with ChannelStream error = %v", round, err)
		}
		if s := socketOf(st); s != "" {
			t.Fatalf("ChannelStream: OpenChannel gave the direct socket %s; want the libvirt stream", s)
		}
		if pid := hypervisortest.ChannelHolder(t, d.Name, guest.Channel); pid != 0 {
			t.Errorf("Got(holder of the channel lock with a stream open) = pid %d; want none", pid)
		}
		stream = append(stream, echoRTTs(t, st, 50)...)
		if err := st.Close(); err != nil {
			t.Fatalf("Close() stream error = %v", err)
		}
		if ch, err = other.OpenChannel(ctx, id, guest.Channel); err != nil {
			t.Fatalf("round %d: reopen direct error = %v", round, err)
		}
	}
	ch.Close()
	t.Logf("shell echo round trip p50: direct %s, libvirt stream %s (%d each, interleaved)",
		p50(direct), p50(stream), len(direct))

	// A stopped domain has no socket: the error is the stream path's.
	if err := h.Destroy(ctx, id); err != nil {
		t.Fatalf("Destroy(%s) error = %v", id, err)
	}
	if c, err := h.OpenChannel(ctx, id, guest.Channel); !errors.Is(err, hypervisor.ErrNotFound) {
		if c != nil {
			c.Close()
		}
		t.Errorf("OpenChannel of a destroyed vm error = %v; want ErrNotFound", err)
	}
}

// TestChannelStreamOnRemote: a URI naming a host (here a private libvirtd
// on qemu+tcp://127.0.0.1, whose sockets live in its own mount namespace)
// gets the libvirt stream.
func TestChannelStreamOnRemote(t *testing.T) {
	t.Parallel()
	guest := systemGuest(t)
	h := hypervisortest.Connect(t, hypervisor.Config{URI: hypervisortest.StartLibvirtd(t).URI})
	ctx := context.Background()
	id := hypervisortest.NewID("remote-")
	if _, err := h.Create(ctx, guest.Spec(id, "tenant-a")); err != nil {
		t.Fatalf("Create(%s) error = %v", id, err)
	}
	ch := openChannel(t, h, id, guest.Channel)
	if ready := readLine(t, ch, 120*time.Second); !strings.HasPrefix(ready, "READY ") {
		t.Fatalf("first line = %q; want READY <uptime>", ready)
	}
	if s := socketOf(ch); s != "" {
		t.Errorf("OpenChannel on %s gave the direct socket %s; want the libvirt stream", h.URI(), s)
	}
	t.Logf("remote shell echo round trip p50: %s", p50(echoRTTs(t, ch, 20)))
}
