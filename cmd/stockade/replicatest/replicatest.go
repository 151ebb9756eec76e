// Package replicatest runs real `stockade serve` processes (bin/stockade,
// which make test builds) for tests of several replicas on one PostgreSQL
// database: each with its own STOCKADE_ADDR, killable with SIGKILL as a
// crashed replica would be.
package replicatest

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binary returns bin/stockade of the module (make test builds it), or
// builds one into a temporary directory when it is missing.
func Binary(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("replicatest: no go.mod above the test's directory")
		}
		dir = parent
	}
	bin := filepath.Join(dir, "bin", "stockade")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin
	}
	bin = filepath.Join(tb.TempDir(), "stockade")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/stockade")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("replicatest: build stockade: %v\n%s", err, out)
	}
	return bin
}

// Proc is one running `stockade serve`.
type Proc struct {
	Base string // http://ADDR
	cmd  *exec.Cmd
	logs *buffer
	done chan struct{}
	err  error
	once sync.Once
}

// Start runs `bin serve` with env (STOCKADE_* settings; STOCKADE_ADDR
// required) added to this process's environment without its own STOCKADE_*
// variables, and waits until its /readyz answers 200. It is stopped at the
// end of the test (its log printed if the test failed).
func Start(tb testing.TB, bin string, env map[string]string) *Proc {
	tb.Helper()
	addr := env["STOCKADE_ADDR"]
	if addr == "" {
		tb.Fatal("replicatest: STOCKADE_ADDR is required")
	}
	cmd := exec.Command(bin, "serve")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STOCKADE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &Proc{Base: "http://" + addr, cmd: cmd, logs: &buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		tb.Fatalf("replicatest: start %s serve: %v", bin, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(func() {
		p.Stop(tb)
		if tb.Failed() {
			tb.Logf("serve at %s (pid %d) logged:\n%s", p.Base, cmd.Process.Pid, p.logs.tail(16<<10))
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for {
		select {
		case <-p.done:
			tb.Fatalf("replicatest: serve at %s ended before it was ready: %v\n%s", p.Base, p.err, p.logs.tail(8<<10))
		default:
		}
		if resp, err := http.Get(p.Base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("replicatest: serve at %s never became ready\n%s", p.Base, p.logs.tail(8<<10))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// PID is the server's process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Logs is what the server logged so far.
func (p *Proc) Logs() string { return p.logs.String() }

// Kill9 kills the server with SIGKILL, as a crash would: nothing is
// released, its leases expire by themselves.
func (p *Proc) Kill9(tb testing.TB) {
	tb.Helper()
	p.once.Do(func() {
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			tb.Errorf("replicatest: kill -9 %d: %v", p.PID(), err)
		}
		<-p.done
	})
}

// Stop ends the server cleanly (SIGTERM) and waits for it, at most a
// minute (then SIGKILL).
func (p *Proc) Stop(tb testing.TB) {
	tb.Helper()
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(time.Minute):
			tb.Errorf("replicatest: serve %d did not stop within a minute: killed", p.PID())
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	})
}

type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *buffer) tail(n int) string {
	s := b.String()
	if len(s) > n {
		return fmt.Sprintf("[...]\n%s", s[len(s)-n:])
	}
	return s
}
