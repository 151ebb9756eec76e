package terminal_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// TestHubFanOut: what the driver types reaches the shell, and its output
// reaches the driver and every watcher, in the same bytes.
func TestHubFanOut(t *testing.T) {
	h := terminal.NewHub(startPTY(t, shell...), terminal.HubConfig{ID: "s1"})
	driver := join(t, h, terminal.JoinOptions{Actor: person("ada@x.test"), CanDrive: true, Drive: true})
	w1 := join(t, h, terminal.JoinOptions{Actor: person("grace@x.test"), Offset: 0})
	w2 := join(t, h, terminal.JoinOptions{Actor: person("linus@x.test"), Offset: 0})
	if r := driver.hello(t).Role; r != terminal.RoleDriver {
		t.Fatalf("Got(driver role) = %q; want driver", r)
	}
	for _, w := range []*collector{w1, w2} {
		if r := w.hello(t).Role; r != terminal.RoleWatcher {
			t.Fatalf("Got(watcher role) = %q; want watcher", r)
		}
	}
	if err := driver.c.Input([]byte("echo fan-$((6*7))\n")); err != nil {
		t.Fatalf("Input: %v", err)
	}
	for _, k := range []*collector{driver, w1, w2} {
		k.waitOutput(t, "fan-42")
	}
	// Watchers read only.
	if err := w1.c.Input([]byte("echo no\n")); err == nil {
		t.Errorf("Got(watcher Input) = nil; want refused")
	}
	if err := driver.c.Input([]byte("exit 3\n")); err != nil {
		t.Fatalf("Input: %v", err)
	}
	end := waitDone(t, h)
	if end.Exit == nil || end.Exit.Code != 3 || !strings.Contains(end.Reason, "exited with code 3") {
		t.Errorf("Got(end) = %+v; want exit code 3", end)
	}
	for _, k := range []*collector{driver, w1, w2} {
		k.wait(t)
		e := k.waitControl(t, terminal.MsgEnd, func(terminal.Control) bool { return true })
		if e.ExitCode == nil || *e.ExitCode != 3 || k.code != terminal.CloseNormal {
			t.Errorf("Got(end message, close) = %+v, %d; want exit code 3, close 1000", e, k.code)
		}
	}
	// Everyone got the same stream, from offset 0.
	if a, b := driver.output(), w2.output(); !bytes.Equal(a, b) || int64(len(a)) != end.BytesOut {
		t.Errorf("Got(driver %d bytes, watcher %d bytes, hub %d); want the same stream", len(a), len(b), end.BytesOut)
	}
}

// TestHubLateJoiner: someone who joins later gets the current screen, and
// the hello says at which offset it starts.
func TestHubLateJoiner(t *testing.T) {
	h := terminal.NewHub(startPTY(t, shell...), terminal.HubConfig{ID: "s2"})
	driver := join(t, h, terminal.JoinOptions{Actor: person("ada@x.test"), CanDrive: true, Drive: true})
	driver.c.Input([]byte("echo before-$((1+1))\n"))
	driver.waitOutput(t, "before-2")
	late := join(t, h, terminal.JoinOptions{Actor: person("late@x.test"), Offset: -1})
	hello := late.hello(t)
	if hello.Offset == nil || *hello.Offset != 0 {
		t.Errorf("Got(hello offset) = %v; want 0 (everything is still held)", hello.Offset)
	}
	late.waitOutput(t, "before-2")
	driver.c.Input([]byte("echo after-$((2+2))\n"))
	late.waitOutput(t, "after-4")
	driver.waitOutput(t, "after-4")
	if !bytes.Equal(late.output(), driver.output()) {
		t.Errorf("Got(late joiner) = %q; want what the driver saw: %q", late.output(), driver.output())
	}
	h.End("test over")
	waitDone(t, h)
}

// TestHubLateJoinerSmallRing: with more output than the ring holds, a late
// joiner gets the most recent bytes, and the hello says where they start.
func TestHubLateJoinerSmallRing(t *testing.T) {
	h := terminal.NewHub(startPTY(t, "sh", "-c", "seq 1 20000; echo done; sleep 30"), terminal.HubConfig{ID: "s3", RingBytes: 4096})
	first := join(t, h, terminal.JoinOptions{Actor: person("ada@x.test"), Offset: 0})
	first.waitOutput(t, "done")
	late := join(t, h, terminal.JoinOptions{Actor: person("late@x.test"), Offset: 0})
	hello := late.hello(t)
	late.waitOutput(t, "done")
	all := first.output()
	if hello.Offset == nil || *hello.Offset != int64(len(all))-4096 || hello.Missed != *hello.Offset {
		t.Fatalf("Got(hello) offset %v missed %d; want offset %d (the ring's start), missed as much", hello.Offset, hello.Missed, len(all)-4096)
	}
	if got := late.output(); !bytes.Equal(got, all[*hello.Offset:]) {
		t.Errorf("Got(late joiner) = %d bytes; want the last %d of the stream", len(got), len(all)-int(*hello.Offset))
	}
	h.End("test over")
}

// TestHubResume: a watcher whose connection drops comes back with the
// offset it saw up to and misses nothing, while output went on meanwhile.
func TestHubResume(t *testing.T) {
	h := terminal.NewHub(startPTY(t, shell...), terminal.HubConfig{ID: "s4"})
	driver := join(t, h, terminal.JoinOptions{Actor: person("ada@x.test"), CanDrive: true, Drive: true})
	w := join(t, h, terminal.JoinOptions{Actor: person("grace@x.test"), Offset: 0})
	driver.c.Input([]byte("echo one-$((0+1))\n"))
	w.waitOutput(t, "one-1")
	w.c.Leave()
	w.wait(t)
	seen := w.output()
	// Output while it is away.
	driver.c.Input([]byte("for i in 1 2 3 4 5; do echo away-$i; done\n"))
	driver.waitOutput(t, "away-5\r\n")
	back := join(t, h, terminal.JoinOptions{Actor: person("grace@x.test"), Offset: int64(len(seen))})
	hello := back.hello(t)
	if hello.Offset == nil || *hello.Offset != int64(len(seen)) || hello.Missed != 0 {
		t.Fatalf("Got(hello) = offset %v missed %d; want offset %d, nothing missed", hello.Offset, hello.Missed, len(seen))
	}
	driver.c.Input([]byte("echo back-$((1+2))\n"))
	back.waitOutput(t, "back-3")
	driver.waitOutput(t, "back-3")
	got := append(seen, back.output()...)
	if want := driver.output(); !bytes.Equal(got, want) {
		t.Errorf("Got(before drop + after resume) = %q; want the whole stream %q", got, want)
	}
	// The driver resumes driving too.
	driver.c.Leave()
	again := join(t, h, terminal.JoinOptions{Actor: person("ada@x.test"), CanDrive: true, Drive: true, Offset: int64(len(driver.output()))})
	if r := again.hello(t).Role; r != terminal.RoleDriver {
		t.Errorf("Got(resumed driver role) = %q; want driver (control stays with a driver who drops)", r)
	}
	h.End("test over")
}

// TestHubSlowWatcher: a watcher that stops reading is cut off once its
// queue is full; the terminal keeps flowing to the driver at full speed.
func TestHubSlowWatcher(t *testing.T) {
	h := terminal.NewHub(startPTY(t, "sh", "-c", "sleep 0.3; seq 1 400000; echo all-done"), terminal.HubConfig{ID: "s5", QueueBytes: 64 << 10})
	driver := join(t, h, terminal.JoinOptions{Actor: person("ada@x.test"), CanDrive: true, Drive: true, Offset: 0})
	stuck, err := h.Join(terminal.JoinOptions{Actor: person("slow@x.test"), Offset: 0}) // never read
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-stuck.Kicked():
	case <-time.After(15 * time.Second):
		t.Fatal("Got(slow watcher) still connected; want it cut off")
	}
	code, reason := stuck.Closing()
	if code != terminal.CloseTryAgain || !strings.HasPrefix(reason, "too slow") {
		t.Errorf("Got(close) = %d %q; want 1013 too slow", code, reason)
	}
	end := waitDone(t, h)
	driver.wait(t)
	out := driver.output()
	if !bytes.HasSuffix(bytes.TrimRight(out, "\r\n"), []byte("all-done")) || end.Cut != 1 || end.Exit == nil || end.Exit.Code != 0 {
		t.Errorf("Got(driver got %d bytes ending %q, cut %d, exit %+v); want the whole output, one cut, exit 0", len(out), out[max(0, len(out)-20):], end.Cut, end.Exit)
	}
	if int64(len(out)) != end.BytesOut {
		t.Errorf("Got(driver bytes) = %d; want all %d", len(out), end.BytesOut)
	}
}

// TestHubRecordingReplays: the recording's output is byte for byte what
// the terminal printed, multi-byte characters split between reads
// included.
func TestHubRecordingReplays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s6.cast")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rec, err := terminal.NewRecorder(f, terminal.CastHeader{Width: 80, Height: 24}, start, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	script := `i=0; while [ $i -lt 3000 ]; do printf 'héllo wörld ✓ 世界 %d\n' $i; i=$((i+1)); done; printf '\033[1;32mgreen\033[0m\n'`
	h := terminal.NewHub(startPTY(t, "sh", "-c", "sleep 0.2; "+script), terminal.HubConfig{ID: "s6", Recorder: rec, RecordInput: true})
	driver := join(t, h, terminal.JoinOptions{Actor: person("ada@x.test"), CanDrive: true, Drive: true, Offset: 0})
	end := waitDone(t, h)
	driver.wait(t)
	if end.RecErr != nil || end.Record.Dropped != 0 {
		t.Fatalf("Got(recording) err %v, dropped %d; want none", end.RecErr, end.Record.Dropped)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(raw)) != end.Record.Bytes {
		t.Errorf("Got(recording size) = %d; want %d as reported", len(raw), end.Record.Bytes)
	}
	cast, err := terminal.ReadCast(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("ReadCast: %v", err)
	}
	if cast.Header.Version != 2 || cast.Header.Width != 80 {
		t.Errorf("Got(header) = %+v; want asciicast v2, 80 wide", cast.Header)
	}
	got, want := cast.Output(), driver.output()
	if !bytes.Equal(got, want) || len(want) < 50000 {
		t.Errorf("Got(replayed output) = %d bytes; want the %d bytes printed, identical", len(got), len(want))
	}
	var last float64
	for _, ev := range cast.Events {
		if ev.Time < last {
			t.Fatalf("Got(event times) going back: %v after %v; want in order", ev.Time, last)
		}
		last = ev.Time
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("Got(recording mode) = %v; want 0600", fi.Mode().Perm())
	}
}

// blockedWriter never returns from Write until released: a disk that
// stopped.
type blockedWriter struct {
	release chan struct{}
	buf     bytes.Buffer
}

func (b *blockedWriter) Write(p []byte) (int, error) { <-b.release; return b.buf.Write(p) }
func (b *blockedWriter) Close() error                { return nil }

// TestRecorderNeverBlocks: with the disk stuck, writing to the recorder
// returns at once; what does not fit in the spool is counted as dropped and
// marked in the recording once the disk comes back.
func TestRecorderNeverBlocks(t *testing.T) {
	w := &blockedWriter{release: make(chan struct{})}
	// The header goes through the buffer; nothing reaches w yet.
	rec, err := terminal.NewRecorder(w, terminal.CastHeader{Width: 80, Height: 24}, time.Now(), nil, 8)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("x"), 70<<10) // over the 64 KiB buffer: the writer blocks on w
	begin := time.Now()
	for i := 0; i < 100; i++ {
		if n, err := rec.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("Got(Write) = %d, %v; want %d, nil", n, err, len(chunk))
		}
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Got(100 writes) took %v; want no waiting on the stuck disk", d)
	}
	rec.Write([]byte("after")) // queued once there is room again? Not yet: still stuck.
	close(w.release)
	time.Sleep(100 * time.Millisecond)
	rec.Write([]byte("tail"))
	st, err := rec.Close()
	if err != nil {
		t.Fatal(err)
	}
	if st.Dropped < 80 || st.DroppedBytes < 80*int64(len(chunk)) {
		t.Errorf("Got(stats) = %+v; want most of the 100 chunks dropped", st)
	}
	cast, err := terminal.ReadCast(&w.buf)
	if err != nil {
		t.Fatal(err)
	}
	var marker bool
	for _, ev := range cast.Events {
		if ev.Kind == terminal.CastMarker && strings.Contains(ev.Data, "dropped") {
			marker = true
		}
	}
	if !marker || !strings.HasSuffix(string(cast.Output()), "tail") {
		t.Errorf("Got(recording) marker %v, output ends %q; want a drop marker and the tail", marker, string(cast.Output())[max(0, len(cast.Output())-10):])
	}
}

// TestHubHandover: control changes hands only by an explicit request
// followed by take; a role that may only watch can do neither.
func TestHubHandover(t *testing.T) {
	var took []string
	h := terminal.NewHub(startPTY(t, shell...), terminal.HubConfig{ID: "s7", Driver: person("agent"),
		OnControl: func(by audit.Actor, from string) { took = append(took, by.Name+"<-"+from) }})
	agent := join(t, h, terminal.JoinOptions{Actor: person("agent"), CanDrive: true, Drive: true})
	dev := join(t, h, terminal.JoinOptions{Actor: person("dev@x.test"), CanDrive: true, Drive: true})
	mgr := join(t, h, terminal.JoinOptions{Actor: person("manager@x.test")})
	if r := dev.hello(t).Role; r != terminal.RoleWatcher {
		t.Fatalf("Got(dev role while the agent drives) = %q; want watcher", r)
	}
	steps := []struct {
		who     *collector
		msg     string
		wantErr bool
	}{
		{mgr, terminal.MsgRequest, true}, // may only watch
		{dev, terminal.MsgTake, true},    // must request first
		{dev, terminal.MsgRequest, false},
		{dev, terminal.MsgTake, false},
	}
	for _, s := range steps {
		err := s.who.c.Control(terminal.Control{Type: s.msg})
		if (err != nil) != s.wantErr {
			t.Fatalf("Got(%s by %s) = %v; want error %v", s.msg, s.who.c.Actor.Name, err, s.wantErr)
		}
	}
	mgr.waitControl(t, terminal.MsgRequested, func(c terminal.Control) bool { return c.By == "dev@x.test" })
	agent.waitControl(t, terminal.MsgRole, func(c terminal.Control) bool { return c.Role == terminal.RoleWatcher && c.By == "dev@x.test" })
	mgr.waitControl(t, terminal.MsgPresence, func(c terminal.Control) bool { return c.Driver == "dev@x.test" })
	if err := agent.c.Input([]byte("echo agent\n")); err == nil {
		t.Errorf("Got(input from the former driver) = nil; want refused")
	}
	if err := dev.c.Input([]byte("echo dev-$((2*5))\n")); err != nil {
		t.Fatalf("Got(input from the new driver) = %v; want nil", err)
	}
	mgr.waitOutput(t, "dev-10")
	if len(took) != 1 || took[0] != "dev@x.test<-agent" {
		t.Errorf("Got(OnControl) = %q; want dev took from agent", took)
	}
	if err := dev.c.Control(terminal.Control{Type: terminal.MsgRelease}); err != nil {
		t.Fatal(err)
	}
	mgr.waitControl(t, terminal.MsgPresence, func(c terminal.Control) bool { return c.Driver == "" })
	h.End("test over")
}

// TestHubEnd: ending a session (its sandbox destroyed) tells every client
// why and lets them go; nobody can join it after.
func TestHubEnd(t *testing.T) {
	p := startPTY(t, shell...)
	h := terminal.NewHub(p, terminal.HubConfig{ID: "s8"})
	a := join(t, h, terminal.JoinOptions{Actor: person("ada@x.test"), CanDrive: true, Drive: true})
	b := join(t, h, terminal.JoinOptions{Actor: person("grace@x.test")})
	a.hello(t)
	b.hello(t)
	h.End("the sandbox was destroyed (requested)")
	for _, k := range []*collector{a, b} {
		k.wait(t)
		e := k.waitControl(t, terminal.MsgEnd, func(terminal.Control) bool { return true })
		if e.Reason != "the sandbox was destroyed (requested)" || k.reason != e.Reason || k.code != terminal.CloseNormal {
			t.Errorf("Got(end) = %q, close %d %q; want the reason in both", e.Reason, k.code, k.reason)
		}
	}
	if _, err := h.Join(terminal.JoinOptions{Actor: person("late@x.test")}); !errors.Is(err, terminal.ErrEnded) || !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Got(Join after end) = %v; want ErrEnded (a conflict)", err)
	}
	if _, err := p.Wait(); err != nil {
		t.Errorf("Got(process) not ended: %v", err)
	}
	if _, err := p.Read(make([]byte, 10)); !errors.Is(err, io.EOF) {
		t.Errorf("Got(read after end) = %v; want EOF", err)
	}
}

// TestHubReleasedControl: control released by its driver is not picked up
// by whoever connects next: it is requested and taken, as any handover.
func TestHubReleasedControl(t *testing.T) {
	h := terminal.NewHub(startPTY(t, shell...), terminal.HubConfig{ID: "s9", Driver: person("ada@x.test")})
	ada := join(t, h, terminal.JoinOptions{Actor: person("ada@x.test"), CanDrive: true, Drive: true})
	if r := ada.hello(t).Role; r != terminal.RoleDriver {
		t.Fatalf("Got(opener's role) = %q; want driver", r)
	}
	if err := ada.c.Control(terminal.Control{Type: terminal.MsgRelease}); err != nil {
		t.Fatal(err)
	}
	bob := join(t, h, terminal.JoinOptions{Actor: person("bob@x.test"), CanDrive: true, Drive: true})
	if r := bob.hello(t).Role; r != terminal.RoleWatcher {
		t.Errorf("Got(role of a joiner after a release) = %q; want watcher", r)
	}
	for _, msg := range []string{terminal.MsgRequest, terminal.MsgTake} {
		if err := bob.c.Control(terminal.Control{Type: msg}); err != nil {
			t.Fatalf("%s: %v", msg, err)
		}
	}
	if r := bob.c.Role(); r != terminal.RoleDriver {
		t.Errorf("Got(role after request and take) = %q; want driver", r)
	}
	h.End("test over")
}
