package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/terminal/terminaltest"
)

// failoverTerminal is a terminal driven across a replica's kill -9: it
// prints tick0..tick<n-1>, one a second, and the watcher reconnects
// through the surviving replica from the offset it had.
type failoverTerminal struct {
	token, sandbox, session string
	ticks                   int
	conn                    *terminaltest.Conn
	start                   int64  // offset of conn's first byte
	before                  []byte // output of the connections that dropped
}

// openFailoverTerminal opens a terminal in the sandbox through base and
// starts the ticks.
func openFailoverTerminal(t *testing.T, base, token, sandboxID string, ticks int) *failoverTerminal {
	t.Helper()
	ft := &failoverTerminal{token: token, sandbox: sandboxID, ticks: ticks}
	if err := ft.dial(t, base, url.Values{}); err != nil {
		t.Fatalf("dial the terminal at %s: %v", base, err)
	}
	ft.conn.Type(t, fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo tick$i; i=$((i+1)); sleep 1; done\n", ticks))
	ft.conn.WaitOutput(t, "tick1\r\n", 2*time.Minute)
	return ft
}

func (ft *failoverTerminal) dial(t *testing.T, base string, q url.Values) error {
	t.Helper()
	u, err := terminal.SocketURL(base, ft.sandbox, q)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, err := terminal.Dial(ctx, u, http.Header{"Authorization": {"Bearer " + ft.token}}, nil)
	if err != nil {
		return err
	}
	c := terminaltest.NewConn(ws, nil)
	t.Cleanup(func() { ws.Close() })
	hello := c.Hello(t)
	if hello.Offset == nil || hello.Session == "" || (ft.session != "" && hello.Session != ft.session) {
		ws.Close()
		return fmt.Errorf("hello %+v: want the session %q and an offset", hello, ft.session)
	}
	ft.session, ft.conn, ft.start = hello.Session, c, *hello.Offset
	return nil
}

// resume waits for the connection to drop (its server was killed) and
// reconnects through base from the next byte it had not seen.
func (ft *failoverTerminal) resume(t *testing.T, base string) {
	t.Helper()
	select {
	case <-ft.conn.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("the terminal's connection to the killed replica never dropped")
	}
	out := ft.conn.Output()
	ft.before = append(ft.before, out...)
	next := ft.start + int64(len(out))
	q := url.Values{"session": {ft.session}, "offset": {strconv.FormatInt(next, 10)}}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := ft.dial(t, base, q)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Got(reconnect the terminal through %s at offset %d) = %v; want it resumed", base, next, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if ft.start != next {
		t.Errorf("Got(resumed offset) = %d; want %d, the next byte the watcher had not seen", ft.start, next)
	}
}

var tickRE = regexp.MustCompile(`tick(\d+)\r\n`)

// check waits for the last tick and checks that the watcher saw every
// tick once, in order, across both connections, then that the terminal
// still takes input.
func (ft *failoverTerminal) check(t *testing.T) {
	t.Helper()
	ft.conn.WaitOutput(t, fmt.Sprintf("tick%d\r\n", ft.ticks-1), 3*time.Minute)
	all := append(append([]byte{}, ft.before...), ft.conn.Output()...)
	var got []int
	for _, m := range tickRE.FindAllSubmatch(all, -1) {
		n, _ := strconv.Atoi(string(m[1]))
		got = append(got, n)
	}
	ok := len(got) == ft.ticks
	for i := 0; ok && i < len(got); i++ {
		ok = got[i] == i
	}
	if !ok {
		t.Errorf("Got(ticks the watcher saw across the failover) = %v; want 0..%d once each, in order", got, ft.ticks-1)
	}
	ft.conn.Type(t, "echo after-$((2+1))\n")
	ft.conn.WaitOutput(t, "after-3", 2*time.Minute)
}
