package terminaltest

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/stockade-dev/stockade/sandbox/terminal"
)

// Conn is a client's end of a terminal WebSocket, read the way a browser
// reads it: output collected, control messages kept in order.
type Conn struct {
	WS *websocket.Conn

	mu     sync.Mutex
	data   bytes.Buffer
	ctls   []terminal.Control
	onData func([]byte)
	done   chan struct{}
	code   int // the close frame the server sent
	text   string
}

// NewConn reads ws until it closes. onData (may be nil) sees every output
// frame as it arrives, before it is collected.
func NewConn(ws *websocket.Conn, onData func([]byte)) *Conn {
	c := &Conn{WS: ws, onData: onData, done: make(chan struct{})}
	go c.read()
	return c
}

func (c *Conn) read() {
	defer close(c.done)
	for {
		mt, b, err := c.WS.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				c.mu.Lock()
				c.code, c.text = ce.Code, ce.Text
				c.mu.Unlock()
			}
			return
		}
		if mt == websocket.BinaryMessage {
			if c.onData != nil {
				c.onData(b)
			}
			c.mu.Lock()
			c.data.Write(b)
			c.mu.Unlock()
			continue
		}
		var ctl terminal.Control
		if json.Unmarshal(b, &ctl) == nil {
			c.mu.Lock()
			c.ctls = append(c.ctls, ctl)
			c.mu.Unlock()
		}
	}
}

// Output is the output received so far.
func (c *Conn) Output() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.data.Bytes())
}

// Controls are the control messages received so far.
func (c *Conn) Controls() []terminal.Control {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]terminal.Control(nil), c.ctls...)
}

// Closed is the close frame's code and reason, once Done.
func (c *Conn) Closed() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.code, c.text
}

// Done is closed when the connection ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// WaitOutput waits until the output holds want.
func (c *Conn) WaitOutput(tb testing.TB, want string, timeout time.Duration) {
	tb.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(string(c.Output()), want) {
			return
		}
	}
	tb.Fatalf("Got(output) = %q; want %q in it", c.Output(), want)
}

// WaitControl waits for a control message of type typ that match (nil:
// any) accepts.
func (c *Conn) WaitControl(tb testing.TB, typ string, match func(terminal.Control) bool, timeout time.Duration) terminal.Control {
	tb.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, ctl := range c.Controls() {
			if ctl.Type == typ && (match == nil || match(ctl)) {
				return ctl
			}
		}
	}
	tb.Fatalf("Got(control messages) = %+v; want a %q", c.Controls(), typ)
	return terminal.Control{}
}

// Hello waits for the first message.
func (c *Conn) Hello(tb testing.TB) terminal.Control {
	tb.Helper()
	return c.WaitControl(tb, terminal.MsgHello, nil, 30*time.Second)
}

// Type sends keystrokes.
func (c *Conn) Type(tb testing.TB, s string) {
	tb.Helper()
	if err := c.WS.WriteMessage(websocket.BinaryMessage, []byte(s)); err != nil {
		tb.Fatalf("type: %v", err)
	}
}

// Send sends a control message.
func (c *Conn) Send(tb testing.TB, ctl terminal.Control) {
	tb.Helper()
	if err := c.WS.WriteJSON(ctl); err != nil {
		tb.Fatalf("send %s: %v", ctl.Type, err)
	}
}

// Wait waits until the server closed the connection.
func (c *Conn) Wait(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	select {
	case <-c.done:
	case <-time.After(timeout):
		tb.Fatalf("Got(connection) still open after %v; want the server to close it", timeout)
	}
}
