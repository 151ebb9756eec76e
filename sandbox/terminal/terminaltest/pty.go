// Package terminaltest runs terminals on this machine's own pseudo-terminals,
// behind the same terminal.Sandboxes interface the sandboxes implement, so
// that the hub, the WebSocket path and the pages can be tested (and the VM
// hop measured against) without a VM; and it stores recorded sessions for
// route tests.
package terminaltest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/terminal"
)

// PTY is a process on a pseudo-terminal of this machine.
type PTY struct {
	master *os.File
	cmd    *exec.Cmd

	once sync.Once
	exit terminal.Exit
	err  error
	done chan struct{}
}

var _ terminal.PTY = (*PTY)(nil)

// StartPTY starts argv (env added to this process's) on a new
// pseudo-terminal of rows x cols.
func StartPTY(argv, env []string, rows, cols uint16) (*PTY, error) {
	if len(argv) == 0 {
		return nil, errors.New("start pty: no command")
	}
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("start pty: %w", err)
	}
	slave, err := openSlave(master)
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("start pty: %w", err)
	}
	defer slave.Close()
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		master.Close()
		return nil, fmt.Errorf("start pty: size: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// Its own session with the terminal as controlling terminal: ^C, job
	// control and SIGHUP work as on any terminal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		master.Close()
		return nil, fmt.Errorf("start pty: %w", err)
	}
	p := &PTY{master: master, cmd: cmd, done: make(chan struct{})}
	go p.wait()
	return p, nil
}

func openSlave(master *os.File) (*os.File, error) {
	var n uint32
	sc, err := master.SyscallConn()
	if err != nil {
		return nil, err
	}
	var ierr error
	err = sc.Control(func(fd uintptr) {
		if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr != nil {
			return
		}
		var v int
		v, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		n = uint32(v)
	})
	if err == nil {
		err = ierr
	}
	if err != nil {
		return nil, fmt.Errorf("unlock pty: %w", err)
	}
	return os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
}

func (p *PTY) wait() {
	defer close(p.done)
	err := p.cmd.Wait()
	st := p.cmd.ProcessState
	if st == nil {
		p.err = err
		return
	}
	p.exit = terminal.Exit{Code: st.ExitCode(), Reason: "exited"}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		p.exit.Code = 128 + int(ws.Signal())
		p.exit.Signal = strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")
		p.exit.Reason = "killed"
	}
}

// Read reads what the process printed; io.EOF once its terminal closed.
func (p *PTY) Read(b []byte) (int, error) {
	n, err := p.master.Read(b)
	if err != nil && (errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrClosed)) {
		// Linux says EIO once the last holder of the other side is gone.
		err = io.EOF
	}
	return n, err
}

// Write types b.
func (p *PTY) Write(b []byte) (int, error) { return p.master.Write(b) }

// Resize sets the terminal's size (the process gets SIGWINCH).
func (p *PTY) Resize(rows, cols uint16) error {
	sc, err := p.master.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := sc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return err
	}
	return ierr
}

// Close kills the process's group if it still runs and closes the terminal.
func (p *PTY) Close() error {
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	var err error
	p.once.Do(func() { err = p.master.Close() })
	return err
}

// Wait waits for the process to end.
func (p *PTY) Wait() (terminal.Exit, error) {
	<-p.done
	return p.exit, p.err
}

// Pid is the process's id.
func (p *PTY) Pid() int { return p.cmd.Process.Pid }
