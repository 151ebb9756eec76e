package sandboxinit

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// An idle sandbox hands PID 1 to the stub init (hypervisor/image/stubinit):
// when init has served no connection but the agent's hello ones, and has
// had no child, for InitOptions.IdleAfter, it execs the stub in place with
// the listener and the hello connections; the stub execs this init again
// on the next connection, handing it over unread (InitOptions.Conn). The
// idle check and the exec run on the accept loop itself, so no connection
// is accepted meanwhile: one arriving waits in the listener's backlog,
// which the exec keeps.

// idleState counts what keeps init from going idle.
type idleState struct {
	mu     sync.Mutex
	active int // connections being served; hello ones held open do not count
	held   map[*net.UnixConn]struct{}
	last   time.Time // when active last dropped to 0
	// after is the idle time before the stub (InitOptions.IdleAfter, then
	// initOpIdle); 0 never.
	after atomic.Int64
	ln    *net.UnixListener
}

func (st *idleState) begin() {
	st.mu.Lock()
	st.active++
	st.mu.Unlock()
}

func (st *idleState) end() {
	st.mu.Lock()
	st.active--
	if st.active == 0 {
		st.last = time.Now()
	}
	st.mu.Unlock()
}

// holdOpen keeps the agent's hello connection c open, dropping whatever
// it sends, until it closes: the agent reads EOF when PID 1 is gone. Held,
// c does not keep init from going idle (counted, it is one of active).
func (si *sandboxInit) holdOpen(c *net.UnixConn, counted bool) {
	st := &si.idle
	st.mu.Lock()
	st.held[c] = struct{}{}
	if counted {
		st.active--
		if st.active == 0 {
			st.last = time.Now()
		}
	}
	st.mu.Unlock()
	for {
		var req initRequest
		fds, err := recvInit(c, &req)
		closeFDs(fds)
		if err != nil {
			break
		}
		if req.Op == initOpIdle && req.IdleMillis >= 0 && req.IdleMillis <= maxIdleMillis {
			st.after.Store(int64(req.IdleMillis) * int64(time.Millisecond))
			st.ln.SetDeadline(time.Now()) // the accept loop takes the new time
		}
	}
	st.mu.Lock()
	delete(st.held, c)
	if counted {
		st.active++ // the caller's end balances it
	}
	st.mu.Unlock()
}

// maxIdleMillis bounds initOpIdle's time (a day).
const maxIdleMillis = 24 * 3600 * 1000

// idleDeadline is when init may next go idle; zero when it never does.
func (si *sandboxInit) idleDeadline() time.Time {
	after := time.Duration(si.idle.after.Load())
	if after <= 0 || si.o.Stub == "" {
		return time.Time{}
	}
	si.idle.mu.Lock()
	defer si.idle.mu.Unlock()
	if si.idle.active > 0 {
		return time.Now().Add(after)
	}
	return si.idle.last.Add(after)
}

// maybeStub execs the stub when init is idle; it returns nil when it is
// not (yet), and an error when the exec failed (init serves on).
func (si *sandboxInit) maybeStub(ln *net.UnixListener) error {
	after := time.Duration(si.idle.after.Load())
	if after <= 0 || si.o.Stub == "" {
		return nil
	}
	st := &si.idle
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.active > 0 || time.Since(st.last) < after {
		return nil
	}
	if hasChildren() {
		// A process of the sandbox left running: look again later.
		st.last = time.Now()
		return nil
	}
	fds := []int{rawFD(ln)}
	for c := range st.held {
		fds = append(fds, rawFD(c))
	}
	outside := "0"
	if si.o.OutsideOnly {
		outside = "1"
	}
	argv := []string{si.o.Stub, si.o.InitPath, strconv.Itoa(fds[0]),
		strconv.FormatInt(after.Milliseconds(), 10), outside}
	for _, fd := range fds[1:] {
		argv = append(argv, strconv.Itoa(fd))
	}
	for _, fd := range fds {
		if fd < 0 {
			return fmt.Errorf("go idle: a descriptor of the listener or a hello connection is gone")
		}
	}
	for _, fd := range fds {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("go idle: keep fd %d across exec: %w", fd, err)
		}
	}
	runtime.LockOSThread()
	err := unix.Exec(si.o.Stub, argv, os.Environ())
	runtime.UnlockOSThread()
	for _, fd := range fds {
		unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
	}
	return fmt.Errorf("go idle: exec stub init %s: %w", si.o.Stub, err)
}

// hasChildren reports whether init has a child, running or not yet
// reaped. A process of the sandbox has a parent in it or is init's own
// (orphans come to init): no child means none is left.
func hasChildren() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != unix.ECHILD
}

// rawFD is the descriptor of a socket of this process; -1 when it has none.
func rawFD(c interface {
	SyscallConn() (syscall.RawConn, error)
}) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	if err := raw.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return -1
	}
	return fd
}

// InheritedConn is a connection this process inherited as fd (the stub's
// hand-over: the accepted connection and the agent's hello ones).
func InheritedConn(fd int) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), "conn")
	if f == nil {
		return nil, fmt.Errorf("inherited connection fd %d: bad descriptor", fd)
	}
	defer f.Close() // FileConn holds its own copy, close-on-exec
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("inherited connection fd %d: %w", fd, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("inherited connection fd %d is not a unix socket", fd)
	}
	return uc, nil
}

// prewarmThreads makes the runtime start the thread it otherwise makes
// later, serving: exec'd back from the stub, init starts just as a command
// may begin to fork up to the sandbox's pids.max, which counts init's
// threads too, and a thread the runtime cannot make then is a fatal error
// (the sandbox would die of its own fork bomb). A goroutine locked to its
// thread and blocked makes the scheduler start another for the rest; the
// runtime keeps both once it is unlocked: 7 threads, as many as an init
// that has served a while (6 without).
func prewarmThreads() {
	locked, release := make(chan struct{}), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		close(locked)
		<-release
		runtime.UnlockOSThread()
	}()
	<-locked
	close(release)
}
