package terminal_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/terminal/terminaltest"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// shell is a plain interactive shell with a prompt that is easy to find.
var shell = []string{"/bin/sh"}

var shellEnv = []string{"PS1=$ ", "TERM=xterm-256color", "ENV="}

func person(email string) audit.Actor {
	return audit.Actor{Kind: audit.ActorUser, ID: "id-" + email, Name: email}
}

// startPTY runs argv on a local pseudo-terminal.
func startPTY(t *testing.T, argv ...string) *terminaltest.PTY {
	t.Helper()
	p, err := terminaltest.StartPTY(argv, shellEnv, 24, 80)
	if err != nil {
		t.Fatalf("StartPTY(%q): %v", argv, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// collector reads one client's queue like a connection would.
type collector struct {
	c    *terminal.Client
	mu   sync.Mutex
	data bytes.Buffer
	ctls []terminal.Control
	done chan struct{}
	// How the client was let go: kicked (cut off) or Out closed.
	kicked bool
	code   int
	reason string
}

func collect(c *terminal.Client) *collector {
	k := &collector{c: c, done: make(chan struct{})}
	go k.run()
	return k
}

func (k *collector) run() {
	defer close(k.done)
	for {
		select {
		case m, ok := <-k.c.Out():
			if !ok {
				k.finish(false)
				return
			}
			k.c.Sent(m)
			k.mu.Lock()
			if m.Control != nil {
				k.ctls = append(k.ctls, *m.Control)
			} else {
				k.data.Write(m.Data)
			}
			k.mu.Unlock()
		case <-k.c.Kicked():
			k.finish(true)
			return
		}
	}
}

func (k *collector) finish(kicked bool) {
	code, reason := k.c.Closing()
	k.mu.Lock()
	k.kicked, k.code, k.reason = kicked, code, reason
	k.mu.Unlock()
}

func (k *collector) output() []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return bytes.Clone(k.data.Bytes())
}

func (k *collector) controls() []terminal.Control {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]terminal.Control(nil), k.ctls...)
}

// hello is the first message every client gets.
func (k *collector) hello(t *testing.T) terminal.Control {
	t.Helper()
	return k.waitControl(t, terminal.MsgHello, func(terminal.Control) bool { return true })
}

func (k *collector) waitControl(t *testing.T, typ string, match func(terminal.Control) bool) terminal.Control {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, c := range k.controls() {
			if c.Type == typ && match(c) {
				return c
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("Got(controls) = %+v; want a %q message", k.controls(), typ)
	return terminal.Control{}
}

func (k *collector) waitOutput(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(string(k.output()), want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("Got(output) = %q; want it to contain %q", k.output(), want)
}

func (k *collector) wait(t *testing.T) {
	t.Helper()
	select {
	case <-k.done:
	case <-time.After(15 * time.Second):
		t.Fatal("Got(client) still connected after 15s; want it let go")
	}
}

func join(t *testing.T, h *terminal.Hub, o terminal.JoinOptions) *collector {
	t.Helper()
	c, err := h.Join(o)
	if err != nil {
		t.Fatalf("Join(%s): %v", o.Actor.Name, err)
	}
	return collect(c)
}

func waitDone(t *testing.T, h *terminal.Hub) terminal.End {
	t.Helper()
	select {
	case <-h.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("Got(session) still live after 20s; want it ended")
	}
	return h.Ended()
}
