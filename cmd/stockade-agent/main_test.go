package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

func TestRunListen(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-listen", "unix:" + sock}, &stderr) }()

	var conn net.Conn
	for conn == nil {
		c, err := net.Dial("unix", sock)
		if err == nil {
			conn = c
		} else if ctx.Err() != nil {
			t.Fatalf("dial %s: %v", sock, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, err := agentproto.Dial(ctx, conn, agentproto.ClientOptions{Name: "main-test"})
	if err != nil {
		t.Fatalf("Dial() = %v", err)
	}
	defer c.Close()
	if h := c.Hello(); h.Agent != version || h.PID1 {
		t.Errorf("Got(Hello()) = agent %q pid1 %v; want %q false", h.Agent, h.PID1, version)
	}
	// Not PID 1, "power off" ends the process: run returns.
	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown() = %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Got(run() after shutdown) = %v; want nil", err)
		}
	case <-ctx.Done():
		t.Fatalf("run() did not return after shutdown; log:\n%s", stderr.String())
	}
}

func TestRunNeedsListen(t *testing.T) {
	if err := run(context.Background(), nil, &bytes.Buffer{}); err == nil {
		t.Error("Got(run() without -listen) = nil; want an error")
	}
}

func TestSandboxInitNeedsAListener(t *testing.T) {
	// runSandboxInit takes the descriptor over (and closes it).
	devnull, err := syscall.Open(os.DevNull, syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
	}{
		{"no listener", nil},
		{"not a socket", []string{"--listen-fd", strconv.Itoa(devnull)}},
		{"bad flag", []string{"--frobnicate"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := runSandboxInit(tc.args, &bytes.Buffer{}); err == nil {
				t.Errorf("Got(runSandboxInit(%q)) = nil; want an error", tc.args)
			}
		})
	}
}
