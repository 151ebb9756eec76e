package terminal_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/terminal/terminaltest"
)

// dialVM opens a terminal of the env's sandbox with an API token.
func (e *vmEnv) dial(tb testing.TB, token string, q url.Values) *terminaltest.Conn {
	tb.Helper()
	u, err := terminal.SocketURL(e.web.URL, e.sb.ID, q)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, err := terminal.Dial(ctx, u, http.Header{"Authorization": {"Bearer " + token}}, nil)
	if err != nil {
		tb.Fatalf("open the terminal: %v", err)
	}
	tb.Cleanup(func() { ws.Close() })
	return terminaltest.NewConn(ws, nil)
}

// TestTerminalOnVM runs the acceptance path on a real sandbox in a real
// VM: an agent's token opens a terminal from the sandbox's own devpts and
// types; an auditor watches the same bytes, drops and resumes missing
// nothing; destroying the sandbox through the API ends the session for
// both with the reason; the recording replays the output byte for byte.
func TestTerminalOnVM(t *testing.T) {
	e := newVMEnv(t)
	const wait = 60 * time.Second // TCG
	agent := e.dial(t, e.dev, url.Values{"cols": {"100"}, "rows": {"30"}})
	h := agent.Hello(t)
	if h.Role != terminal.RoleDriver {
		t.Fatalf("Got(hello) = %+v; want the agent driving", h)
	}
	agent.Type(t, "stty size; tty; echo vm-$((6*7))\n")
	agent.WaitOutput(t, "vm-42", wait)
	out := string(agent.Output())
	if !strings.Contains(out, "30 100") || !strings.Contains(out, "/dev/pts/") {
		t.Errorf("Got(stty size; tty) = %q; want a 30x100 terminal from the sandbox's devpts", out)
	}

	aud := e.dial(t, e.aud, url.Values{"session": {h.Session}, "watch": {"1"}, "offset": {"0"}})
	if r := aud.Hello(t).Role; r != terminal.RoleWatcher {
		t.Fatalf("Got(auditor role) = %q; want watcher", r)
	}
	aud.WaitOutput(t, "vm-42", wait)
	agent.Type(t, "stty cols 90 rows 20; stty size\n")
	agent.WaitOutput(t, "20 90", wait)

	seen := aud.Output()
	aud.WS.Close()
	agent.Type(t, "for i in 1 2 3; do echo away-$i; done\n")
	agent.WaitOutput(t, "away-3\r\n", wait)
	back := e.dial(t, e.aud, url.Values{"session": {h.Session}, "watch": {"1"}, "offset": {strconv.Itoa(len(seen))}})
	if bh := back.Hello(t); bh.Offset == nil || *bh.Offset != int64(len(seen)) || bh.Missed != 0 {
		t.Fatalf("Got(resumed hello) = %+v; want offset %d, nothing missed", bh, len(seen))
	}
	agent.Type(t, "echo back-$((3*3))\n")
	back.WaitOutput(t, "back-9", wait)
	agent.WaitOutput(t, "back-9", wait)
	if got := append(seen, back.Output()...); !bytes.Equal(got, agent.Output()) {
		t.Errorf("Got(before + after the drop) = %q; want the whole stream %q", got, agent.Output())
	}

	// Destroy the sandbox through the API.
	api := e.web.WithToken(e.dev)
	if s, body := api.JSON(t, http.MethodDelete, "/api/v1/sandboxes/"+e.sb.ID, nil, nil); s != http.StatusOK {
		t.Fatalf("Got(DELETE sandbox) = %d %s; want 200", s, body)
	}
	for name, c := range map[string]*terminaltest.Conn{"agent": agent, "auditor": back} {
		c.Wait(t, wait)
		end := c.WaitControl(t, terminal.MsgEnd, nil, time.Second)
		// The agent stops the sandbox's processes first: the reason may be
		// seen while the sandbox is recorded stopped (destroyed) or destroyed.
		if !strings.HasPrefix(end.Reason, "the sandbox was") || !strings.Contains(end.Reason, "destroyed") {
			t.Errorf("Got(%s's end reason) = %q; want the sandbox destroyed", name, end.Reason)
		}
	}

	// The recording.
	var sess terminal.Session
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		s, err := e.terms.Session(context.Background(), e.a.ID, h.Session)
		if err != nil {
			t.Fatal(err)
		}
		if sess = s; !s.Live() {
			break
		}
	}
	if sess.Live() || !strings.Contains(sess.EndReason, "destroyed") {
		t.Fatalf("Got(stored session) = %+v; want ended with the sandbox", sess)
	}
	f, _, err := e.terms.OpenRecording(context.Background(), e.a.ID, h.Session)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cast, err := terminal.ReadCast(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := cast.Output(); !bytes.Equal(got, agent.Output()) {
		t.Errorf("Got(recording) = %q; want the agent's output byte for byte: %q", got, agent.Output())
	}
}
