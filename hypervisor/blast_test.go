package hypervisor_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
)

// TestOneVMCrashKeepsTheConnection boots two tenants' VMs on one
// connection, holds both agent channels open, kills tenant A's QEMU and
// checks the blast radius: A's stream ends, the connection stays up (no
// KindDisconnected), and tenant B's channel keeps echoing.
// Both channel paths: the direct socket and the libvirt stream (whose
// client may drop the connection carrying a dying QEMU's stream).
func TestOneVMCrashKeepsTheConnection(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "stream"}[stream], func(t *testing.T) {
			oneVMCrashKeepsTheConnection(t, hypervisor.Config{URI: systemURI, ChannelStream: stream})
		})
	}
}

func oneVMCrashKeepsTheConnection(t *testing.T, cfg hypervisor.Config) {
	guest := systemGuest(t)
	h := hypervisortest.Connect(t, cfg)
	ctx := context.Background()
	idA, idB := hypervisortest.NewID("blast-a-"), hypervisortest.NewID("blast-b-")
	dA, err := h.Create(ctx, guest.Spec(idA, "tenant-a"))
	if err != nil {
		t.Fatalf("Create(%s) error = %v", idA, err)
	}
	if _, err := h.Create(ctx, guest.Spec(idB, "tenant-b")); err != nil {
		t.Fatalf("Create(%s) error = %v", idB, err)
	}
	chA := openChannel(t, h, idA, guest.Channel)
	chB := openChannel(t, h, idB, guest.Channel)
	for _, ch := range []io.ReadWriter{chA, chB} {
		if got := readLine(t, ch, 120*time.Second); !strings.HasPrefix(got, "READY ") {
			t.Fatalf("first line = %q; want READY", got)
		}
	}
	echo := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(chB, msg+"\n"); err != nil {
			t.Fatalf("write to B's channel: %v", err)
		}
		if got := readLine(t, chB, 30*time.Second); got != msg {
			t.Fatalf("B's echo of %q = %q", msg, got)
		}
	}
	echo("before")

	raw, err := os.ReadFile("/run/libvirt/qemu/" + dA.Name + ".pid")
	if err != nil {
		t.Fatalf("read QEMU pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("pid file = %q", raw)
	}
	drain(h.Events())
	// A's stream is busy both ways when its QEMU dies, as an agent
	// session is: the host keeps writing, the guest keeps echoing.
	readEnd := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, chA)
		readEnd <- err
	}()
	writeEnd := make(chan error, 1)
	go func() {
		line := strings.Repeat("y", 1000) + "\n"
		for {
			if _, err := io.WriteString(chA, line); err != nil {
				writeEnd <- err
				return
			}
		}
	}()
	time.Sleep(time.Second) // traffic flowing
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill QEMU %d: %v", pid, err)
	}
	var events []hypervisor.Event
	crashed := false
	deadline := time.After(30 * time.Second)
	for !crashed {
		select {
		case ev := <-h.Events():
			events = append(events, ev)
			crashed = ev.ID == idA && ev.Kind == hypervisor.KindCrashed
		case <-deadline:
			t.Fatalf("no crash event for A within 30 s; saw %+v", events)
		}
	}
	select {
	case err := <-readEnd:
		t.Logf("A's stream ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("A's channel read still blocked 30 s after its QEMU died")
	}
	// What A's dead stream answers is about that stream only.
	select {
	case err := <-writeEnd:
		t.Logf("write to A's dead stream: %v", err)
		if errors.Is(err, hypervisor.ErrUnavailable) || !errors.Is(err, hypervisor.ErrStreamClosed) {
			t.Errorf("Got(write to a dead VM's stream) = %v; want ErrStreamClosed, not ErrUnavailable (that is the host's)", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("writes to A's channel still succeed 30 s after its QEMU died")
	}
	// Closing A's dead stream is what the pool does next.
	if err := chA.Close(); err != nil {
		t.Logf("Close of A's dead stream: %v", err)
	}
	// B is untouched: several round trips over a few seconds, then the
	// connection itself answers.
	for i := range 5 {
		echo("after-" + strconv.Itoa(i))
		time.Sleep(500 * time.Millisecond)
	}
	if _, err := h.List(ctx); err != nil {
		t.Errorf("List() after A's crash error = %v; want the connection up", err)
	}
	for {
		select {
		case ev := <-h.Events():
			events = append(events, ev)
			continue
		default:
		}
		break
	}
	for _, ev := range events {
		if ev.Kind == hypervisor.KindDisconnected || ev.Kind == hypervisor.KindReconnected {
			t.Errorf("Got(event after one VM's crash) = %+v; want the connection untouched", ev)
		}
	}
}

// libvirtClientsOf lists the ids libvirtd gives the client connections of
// process pid (virt-admin; only reading).
func libvirtClientsOf(t *testing.T, pid int) map[string]bool {
	t.Helper()
	out, err := exec.Command("virt-admin", "srv-clients-list", "libvirtd").Output()
	if err != nil {
		t.Fatalf("virt-admin srv-clients-list: %v", err)
	}
	ids := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "Id" || strings.HasPrefix(f[0], "-") {
			continue
		}
		info, err := exec.Command("virt-admin", "client-info", "libvirtd", f[0]).Output()
		if err != nil {
			continue // gone meanwhile
		}
		if strings.Contains(string(info), "unix_process_id: "+strconv.Itoa(pid)+"\n") {
			ids[f[0]] = true
		}
	}
	return ids
}

// TestChannelOutlivesControlConnection: libvirtd drops the Host's control
// connection (virt-admin client-disconnect, as its own error handling
// would), the Host reconnects, and a VM's channel opened before goes on
// answering: channels do not share that connection's fate.
func TestChannelOutlivesControlConnection(t *testing.T) {
	guest := systemGuest(t)
	if _, err := exec.LookPath("virt-admin"); err != nil {
		hypervisortest.Unavailable(t, "virt-admin is needed to drop one client connection")
	}
	before := libvirtClientsOf(t, os.Getpid())
	h := hypervisortest.Connect(t, hypervisor.Config{URI: systemURI, ReconnectMax: time.Second})
	var control string
	for id := range libvirtClientsOf(t, os.Getpid()) {
		if !before[id] {
			if control != "" {
				t.Fatalf("Connect opened several libvirt clients (%s, %s); want one control connection", control, id)
			}
			control = id
		}
	}
	if control == "" {
		t.Fatal("no libvirt client of this process appeared at Connect")
	}
	ctx := context.Background()
	id := hypervisortest.NewID("isolate-")
	if _, err := h.Create(ctx, guest.Spec(id, "tenant-a")); err != nil {
		t.Fatalf("Create(%s) error = %v", id, err)
	}
	ch := openChannel(t, h, id, guest.Channel)
	if got := readLine(t, ch, 120*time.Second); !strings.HasPrefix(got, "READY ") {
		t.Fatalf("first line = %q; want READY", got)
	}
	echo := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(ch, msg+"\n"); err != nil {
			t.Fatalf("write to the channel: %v", err)
		}
		if got := readLine(t, ch, 30*time.Second); got != msg {
			t.Fatalf("echo of %q = %q", msg, got)
		}
	}
	echo("before")

	drain(h.Events())
	if out, err := exec.Command("virt-admin", "client-disconnect", "libvirtd", control).CombinedOutput(); err != nil {
		t.Fatalf("virt-admin client-disconnect %s: %v: %s", control, err, out)
	}
	waitFor(t, h.Events(), 30*time.Second, func(ev hypervisor.Event) bool { return ev.Kind == hypervisor.KindDisconnected })
	waitFor(t, h.Events(), 60*time.Second, func(ev hypervisor.Event) bool { return ev.Kind == hypervisor.KindReconnected })
	echo("after")
	if _, err := h.Lookup(ctx, id); err != nil {
		t.Errorf("Lookup(%s) after the reconnect error = %v", id, err)
	}
}
