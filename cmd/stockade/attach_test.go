package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/terminal/terminaltest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// lockedBuffer is a buffer written by the command and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// attachEnv is a server whose terminals run on this machine's
// pseudo-terminals, with one running sandbox.
func attachEnv(t *testing.T) (*webtest.Env, *terminal.Service, tenants.Tenant, string) {
	t.Helper()
	db := dbtest.SQLite(t)
	svc := terminal.New(db, terminaltest.NewLocal(db), terminal.Config{DataDir: t.TempDir(), Shell: []string{"/bin/sh"},
		Env: []string{"PS1=$ ", "ENV="}, Logger: slog.New(slog.DiscardHandler)})
	env := webtest.New(t, webtest.Options{DB: db, Terminals: svc})
	acme := env.TenantNamed(t, "acme", "Acme")
	sb := sandboxtest.Record(t, db, acme.ID, "ada@acme.test")
	return env, svc, acme, sb.ID
}

func attach(t *testing.T, ctx context.Context, url, token string, stdin io.Reader, args ...string) (*lockedBuffer, *lockedBuffer, <-chan error) {
	t.Helper()
	out, errb := &lockedBuffer{}, &lockedBuffer{}
	done := make(chan error, 1)
	getenv := env(map[string]string{"STOCKADE_URL": url, "STOCKADE_TOKEN": token})
	go func() { done <- attachCmd(ctx, args, getenv, stdin, out, errb) }()
	return out, errb, done
}

func waitErr(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Got(attach) still running after 20s; want it to end")
		return nil
	}
}

// TestAttachDrives: an agent's token opens a terminal, types into it from
// stdin and ends with the remote process's exit status.
func TestAttachDrives(t *testing.T) {
	env, _, acme, sb := attachEnv(t)
	token := env.Token(t, acme, tenants.RoleDeveloper)
	stdin := strings.NewReader("echo cli-$((6*7))\nexit 3\n")
	out, errb, done := attach(t, context.Background(), env.URL, token, stdin, sb)
	err := waitErr(t, done)
	var ee exitError
	if !errors.As(err, &ee) || int(ee) != 3 {
		t.Errorf("Got(attach) = %v; want exit status 3, the remote shell's", err)
	}
	if !strings.Contains(out.String(), "cli-42") {
		t.Errorf("Got(stdout) = %q; want the command's output", out.String())
	}
	if e := errb.String(); !strings.Contains(e, "driving") || !strings.Contains(e, "exited with code 3") {
		t.Errorf("Got(stderr) = %q; want the session named and why it ended", e)
	}
}

// TestAttachWatches: --watch follows a live session read-only to its end;
// a role that may only watch cannot open one.
func TestAttachWatches(t *testing.T) {
	env, svc, acme, sb := attachEnv(t)
	// Someone drives.
	u, _ := terminal.SocketURL(env.URL, sb, nil)
	drv, err := terminal.Dial(context.Background(), u, http.Header{"Authorization": {"Bearer " + env.Token(t, acme, tenants.RoleDeveloper)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	go func() {
		for {
			if _, _, err := drv.ReadMessage(); err != nil {
				return
			}
		}
	}()
	var session string
	for deadline := time.Now().Add(10 * time.Second); session == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if live := svc.Live(acme.ID, sb); len(live) == 1 {
			session = live[0].ID
		}
	}
	auditor := env.Token(t, acme, tenants.RoleAuditor)
	out, errb, done := attach(t, context.Background(), env.URL, auditor, strings.NewReader("echo not-typed\n"), "--watch", sb)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, _ := svc.LiveState(acme.ID, session); len(st.Watchers) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Got(watchers) = none; want the attached auditor (stderr %q)", errb.String())
		}
	}
	drv.WriteMessage(websocket.BinaryMessage, []byte("echo seen-$((5*5)); exit 0\n"))
	if err := waitErr(t, done); err != nil {
		t.Errorf("Got(attach --watch) = %v; want nil once the session ended with 0", err)
	}
	if !strings.Contains(out.String(), "seen-25") || strings.Contains(out.String(), "not-typed") {
		t.Errorf("Got(watched output) = %q; want the driver's command and none of the watcher's stdin", out.String())
	}
	if !strings.Contains(errb.String(), "watching") {
		t.Errorf("Got(stderr) = %q; want it to say it watches", errb.String())
	}

	// An auditor may not open a terminal.
	_, _, done = attach(t, context.Background(), env.URL, auditor, strings.NewReader(""), sb)
	var de *terminal.DialError
	if err := waitErr(t, done); !errors.As(err, &de) || de.Status != http.StatusForbidden || !strings.Contains(de.Detail, "watch") {
		t.Errorf("Got(attach as an auditor) = %v; want 403 saying the role may watch", err)
	}
}
