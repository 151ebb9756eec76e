// Package reaper is the child reaper of a PID 1: the VM init and every
// sandbox's init.
package reaper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// Reaper is PID 1's only caller of wait: it reaps every child, including
// orphans the kernel re-parents to init, and hands the exit status of the
// children it started to whoever waits for them. os/exec's Wait would race
// with it, so PID 1 starts processes through Run only.
type Reaper struct {
	log     *slog.Logger
	mu      sync.Mutex // held across start+register and across each wait4 sweep
	waiting map[int]chan unix.WaitStatus
}

// New returns a Reaper; run its Loop.
func New(log *slog.Logger) *Reaper {
	return &Reaper{log: log, waiting: map[int]chan unix.WaitStatus{}}
}

// Loop reaps on every SIGCHLD until ctx ends.
func (r *Reaper) Loop(ctx context.Context) {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, unix.SIGCHLD)
	defer signal.Stop(ch)
	r.reap()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			r.reap()
		}
	}
}

// reap collects every exited child; signals coalesce, so one SIGCHLD may
// stand for many.
func (r *Reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if c, ok := r.waiting[pid]; ok {
			c <- ws
			delete(r.waiting, pid)
		}
	}
}

// Start starts a process whose exit status arrives on done (the reaper
// collects it: never call p.Wait).
func (r *Reaper) Start(path string, argv []string, attr *os.ProcAttr) (*os.Process, <-chan unix.WaitStatus, error) {
	done := make(chan unix.WaitStatus, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := os.StartProcess(path, argv, attr)
	if err != nil {
		return nil, nil, err
	}
	r.waiting[p.Pid] = done
	return p, done, nil
}

// maxOutput bounds what Run keeps of a program's stdout.
const maxOutput = 1 << 20

// Run runs path to completion and returns its stdout (stderr goes to the
// console). It has agent.Config.Run's signature.
func (r *Reaper) Run(ctx context.Context, path string, args ...string) ([]byte, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", path, err)
	}
	defer pr.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		pw.Close()
		return nil, fmt.Errorf("run %s: %w", path, err)
	}
	defer devnull.Close()

	p, done, err := r.Start(path, append([]string{path}, args...), &os.ProcAttr{
		Env:   []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Files: []*os.File{devnull, pw, os.Stderr},
	})
	pw.Close()
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", path, err)
	}
	defer p.Release()

	stop := context.AfterFunc(ctx, func() { p.Kill() })
	defer stop()
	out, rerr := io.ReadAll(io.LimitReader(pr, maxOutput))
	io.Copy(io.Discard, pr) // a child must not block on a full pipe
	ws := <-done
	if cerr := ctx.Err(); cerr != nil {
		return nil, fmt.Errorf("run %s: %w", path, cerr)
	}
	if rerr != nil {
		return nil, fmt.Errorf("run %s: read output: %w", path, rerr)
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return out, fmt.Errorf("run %s: exit status %d (signal %v)", path, ws.ExitStatus(), ws.Signal())
	}
	return out, nil
}
