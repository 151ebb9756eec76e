package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/term"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/terminal"
)

// detachKey ends `sandbox attach` without ending the session: Ctrl-],
// as telnet has it (every other key goes to the sandbox).
const detachKey = 0x1d

// attachCmd is `stockade sandbox attach [--watch] [--session ID] ID
// [-- CMD...]`: a terminal in a sandbox, in raw mode when stdin is a
// terminal, resized with it. A dropped connection resumes where it left
// off. The exit status is the remote process's.
func attachCmd(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sandbox attach", flag.ContinueOnError)
	fs.SetOutput(stderr)
	watch := fs.Bool("watch", false, "watch read-only: a live session (--session) or the sandbox's only one")
	session := fs.String("session", "", "join this live session instead of opening a new terminal")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: stockade sandbox attach [--watch] [--session ID] SANDBOX [-- CMD [ARG...]]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	if fs.NArg() < 1 {
		fs.Usage()
		return exitError(2)
	}
	c, err := newAPIClient(getenv)
	if err != nil {
		return err
	}
	a := &attacher{base: c.base, token: c.token, sandbox: fs.Arg(0), session: *session, watch: *watch, cmd: fs.Args()[1:],
		stdout: stdout, stderr: stderr, offset: -1}
	if a.watch && a.session == "" {
		if a.session, err = a.onlyLive(ctx, c); err != nil {
			return err
		}
	}

	// Raw mode while driving from a terminal: every key goes to the sandbox.
	var restore func()
	inFile, isFile := stdin.(*os.File)
	if isFile && term.IsTerminal(int(inFile.Fd())) && !a.watch {
		old, err := term.MakeRaw(int(inFile.Fd()))
		if err != nil {
			return fmt.Errorf("raw mode: %w", err)
		}
		restore = func() { _ = term.Restore(int(inFile.Fd()), old) }
		defer restore()
		a.raw = true
	}
	if f, ok := stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		a.sizeOf = func() (int, int, error) { return term.GetSize(int(f.Fd())) }
	}
	if !a.watch {
		a.keys = readKeys(stdin)
	}
	return a.run(ctx)
}

// onlyLive finds the sandbox's one live session to watch.
func (a *attacher) onlyLive(ctx context.Context, c *apiClient) (string, error) {
	var out api.TerminalList
	if err := c.json(ctx, "GET", "/api/v1/terminals?sandbox="+url.QueryEscape(a.sandbox), nil, &out); err != nil {
		return "", err
	}
	var live []string
	for _, t := range out.Terminals {
		if t.Live {
			live = append(live, t.ID)
		}
	}
	switch len(live) {
	case 0:
		return "", fmt.Errorf("sandbox %s has no live terminal to watch", a.sandbox)
	case 1:
		return live[0], nil
	}
	return "", fmt.Errorf("sandbox %s has %d live terminals: pick one with --session (%v)", a.sandbox, len(live), live)
}

// attacher is one `sandbox attach`: it connects, and reconnects from the
// offset it reached until the session ends or the person detaches.
type attacher struct {
	base, token      string
	sandbox, session string
	watch, raw       bool
	cmd              []string
	stdout, stderr   io.Writer
	sizeOf           func() (int, int, error)
	keys             <-chan []byte // nil when watching
	offset           int64         // output bytes seen from the session's start; -1 before the first hello
	greeted          bool
}

// errDetached: the person pressed the detach key.
var errDetached = errors.New("detached")

func (a *attacher) say(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if a.raw {
		msg = string(bytes.ReplaceAll([]byte(msg), []byte("\n"), []byte("\r\n")))
	}
	fmt.Fprint(a.stderr, msg)
}

func (a *attacher) run(ctx context.Context) error {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	for attempt := 0; ; attempt++ {
		conn, err := a.dial(ctx)
		if err != nil {
			var de *terminal.DialError
			retry := a.session != "" && a.offset >= 0 && !(errors.As(err, &de) && de.Status < 500) && attempt < 20
			if !retry || ctx.Err() != nil {
				return err
			}
			a.say("stockade: %v; reconnecting\n", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(min(time.Duration(attempt+1)*500*time.Millisecond, 5*time.Second)):
			}
			continue
		}
		end, err := a.pump(ctx, conn, winch)
		conn.Close()
		switch {
		case end != nil:
			a.say("\nstockade: the session ended: %s\n", end.Reason)
			if end.ExitCode != nil && *end.ExitCode != 0 {
				return exitError(*end.ExitCode)
			}
			return nil
		case errors.Is(err, errDetached):
			a.say("\nstockade: detached; the session goes on: stockade sandbox attach --session %s %s\n", a.session, a.sandbox)
			return nil
		case ctx.Err() != nil:
			return nil
		}
		attempt = 0
		a.say("\r\nstockade: connection lost (%v); resuming\r\n", err)
	}
}

func (a *attacher) dial(ctx context.Context) (*websocket.Conn, error) {
	q := url.Values{}
	switch {
	case a.session != "":
		q.Set("session", a.session)
		if a.offset >= 0 {
			q.Set("offset", strconv.FormatInt(a.offset, 10))
		}
	default:
		if a.sizeOf != nil {
			if w, h, err := a.sizeOf(); err == nil {
				q.Set("cols", strconv.Itoa(w))
				q.Set("rows", strconv.Itoa(h))
			}
		}
		q["cmd"] = a.cmd
	}
	if a.watch {
		q.Set("watch", "1")
	}
	u, err := terminal.SocketURL(a.base, a.sandbox, q)
	if err != nil {
		return nil, err
	}
	return terminal.Dial(ctx, u, http.Header{"Authorization": {"Bearer " + a.token}}, nil)
}

// pump runs one connection: output to stdout, keys and resizes to the
// server. It returns the end message once the session ended, or why the
// connection stopped.
func (a *attacher) pump(ctx context.Context, conn *websocket.Conn, winch <-chan os.Signal) (*terminal.Control, error) {
	type frame struct {
		ctl  *terminal.Control
		data []byte
	}
	frames := make(chan frame, 64)
	readErr := make(chan error, 1)
	go func() {
		for {
			mt, b, err := conn.ReadMessage()
			if err != nil {
				readErr <- err
				close(frames)
				return
			}
			if mt == websocket.BinaryMessage {
				frames <- frame{data: b}
				continue
			}
			var c terminal.Control
			if json.Unmarshal(b, &c) == nil {
				frames <- frame{ctl: &c}
			}
		}
	}()
	send := func(mt int, b []byte) error {
		_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		return conn.WriteMessage(mt, b)
	}
	resize := func() error {
		if a.sizeOf == nil || a.watch {
			return nil
		}
		w, h, err := a.sizeOf()
		if err != nil {
			return nil
		}
		b, _ := json.Marshal(terminal.Control{Type: terminal.MsgResize, Cols: uint16(w), Rows: uint16(h)})
		return send(websocket.TextMessage, b)
	}
	var end *terminal.Control
	keys := a.keys
	for {
		select {
		case <-ctx.Done():
			_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(time.Second))
			return nil, ctx.Err()
		case <-winch:
			if err := resize(); err != nil {
				return nil, err
			}
		case k, ok := <-keys:
			if !ok {
				keys = nil // stdin ended: keep showing output until the session ends
				continue
			}
			if i := bytes.IndexByte(k, detachKey); i >= 0 && a.raw {
				if i > 0 {
					_ = send(websocket.BinaryMessage, k[:i])
				}
				return nil, errDetached
			}
			if err := send(websocket.BinaryMessage, k); err != nil {
				return nil, err
			}
		case f, ok := <-frames:
			if !ok {
				if end != nil {
					return end, nil
				}
				return nil, <-readErr
			}
			if f.ctl == nil {
				a.offset += int64(len(f.data))
				if _, err := a.stdout.Write(f.data); err != nil {
					return nil, fmt.Errorf("write output: %w", err)
				}
				continue
			}
			switch c := f.ctl; c.Type {
			case terminal.MsgHello:
				a.session = c.Session
				if c.Offset != nil {
					a.offset = *c.Offset
				}
				if !a.greeted {
					a.greeted = true
					how := "watching (read-only; Ctrl-C quits)"
					if c.Role == terminal.RoleDriver {
						how = "driving (Ctrl-] detaches)"
					}
					a.say("stockade: terminal %s in sandbox %s, %s\n", c.Session, a.sandbox, how)
				}
				if c.Missed > 0 {
					a.say("\r\nstockade: %d bytes went by while disconnected and are lost\r\n", c.Missed)
				}
				if c.Role == terminal.RoleDriver {
					if err := resize(); err != nil {
						return nil, err
					}
				}
			case terminal.MsgRole:
				if c.Role == terminal.RoleWatcher && c.By != "" {
					a.say("\r\nstockade: %s took control; you are watching\r\n", c.By)
				}
			case terminal.MsgRequested:
				a.say("\r\nstockade: %s asks for control\r\n", c.By)
			case terminal.MsgError:
				a.say("\r\nstockade: %s\r\n", c.Message)
			case terminal.MsgEnd:
				end = c
			}
		}
	}
}

// readKeys copies stdin into a channel, so that a blocked read never holds
// up a reconnect; it closes at EOF.
func readKeys(r io.Reader) <-chan []byte {
	ch := make(chan []byte, 16)
	go func() {
		defer close(ch)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				ch <- bytes.Clone(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}
