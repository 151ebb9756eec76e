package sandboxinit

import (
	"fmt"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Under TCG each new process with a randomized address space makes QEMU
// translate the same code again; crun without randomization starts in about
// half the time (GUEST.md). crun is ours, runs briefly and parses nothing of
// the tenant's, so the agent starts it with randomization off; the sandbox's
// init turns it back on before any command of the sandbox starts.

const (
	addrNoRandomize  = 0x0040000
	personalityQuery = 0xffffffff
)

func personality(p uint) (uint, error) {
	r, _, errno := unix.RawSyscall(unix.SYS_PERSONALITY, uintptr(p), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return uint(r), nil
}

// startWithoutASLR runs start, which forks on the calling thread, with
// address randomization off for the child. The personality is per thread:
// a thread that cannot restore its own is never handed back.
func startWithoutASLR[T any](start func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		old, err := personality(personalityQuery)
		if err != nil {
			runtime.UnlockOSThread()
			v, err := start()
			ch <- result{v, err}
			return
		}
		if _, err := personality(old | addrNoRandomize); err != nil {
			runtime.UnlockOSThread()
			v, err := start()
			ch <- result{v, err}
			return
		}
		v, err := start()
		if _, rerr := personality(old); rerr == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}

// restoreASLR turns address randomization back on for the processes this
// one starts. The personality is per thread and a fork copies its thread's:
// every thread of the process must change.
func restoreASLR() error {
	p, err := personality(personalityQuery)
	if err != nil {
		return fmt.Errorf("personality: %w", err)
	}
	if p&addrNoRandomize == 0 {
		return nil
	}
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PERSONALITY, uintptr(p&^addrNoRandomize), 0, 0); errno != 0 {
		return fmt.Errorf("personality on every thread: %w", errno)
	}
	return nil
}
