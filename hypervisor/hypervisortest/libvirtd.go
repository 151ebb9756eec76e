package hypervisortest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// EnvSecondHost names the qemu+tcp URI of a second libvirtd that `make test`
// started (scripts/libvirtd-private.sh with a port); SecondHost uses it when
// set, else starts one of its own.
const EnvSecondHost = "STOCKADE_TEST_LIBVIRT_URI2"

// Libvirtd is a private libvirtd of a test (scripts/libvirtd-private.sh): its
// own mount namespace (own /run/libvirt, /var/lib/libvirt, /etc/libvirt),
// its own domains, listening on qemu+tcp://127.0.0.1:Port/system. The guest
// files it boots are the machine's own paths (the data dir is shared).
type Libvirtd struct {
	Dir  string
	Port int
	URI  string // qemu+tcp://127.0.0.1:Port/system

	script string
}

// libvirtdUnavailable says why a private libvirtd cannot run here, "" when
// it can.
func libvirtdUnavailable() string {
	if os.Geteuid() != 0 {
		return "a private libvirtd needs root"
	}
	for _, tool := range []string{"unshare", "nsenter", "tini", "virsh", "/usr/sbin/libvirtd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("a private libvirtd needs %s: %v", tool, err)
		}
	}
	if out, err := exec.Command("unshare", "-m", "true").CombinedOutput(); err != nil {
		return fmt.Sprintf("a private libvirtd needs mount namespaces: unshare -m: %v: %s", err, out)
	}
	return ""
}

// script is scripts/libvirtd-private.sh of this checkout.
func script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts", "libvirtd-private.sh")
}

// freePort is a TCP port on 127.0.0.1 nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startLibvirtd starts a private libvirtd on a free port.
func startLibvirtd() (*Libvirtd, error) {
	// A short path: the unix socket's must fit sun_path.
	dir, err := os.MkdirTemp("", "lvd-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("free port: %w", err)
	}
	l := &Libvirtd{Dir: dir, Port: port, script: script()}
	out, err := l.run("start", strconv.Itoa(port))
	if err != nil {
		l.stop()
		return nil, err
	}
	l.URI = out
	if want := fmt.Sprintf("qemu+tcp://127.0.0.1:%d/system", port); out != want {
		l.stop()
		return nil, fmt.Errorf("libvirtd-private.sh start printed %q; want %q", out, want)
	}
	return l, nil
}

func (l *Libvirtd) run(args ...string) (string, error) {
	args = append([]string{args[0], l.Dir}, args[1:]...)
	out, err := exec.Command(l.script, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("libvirtd-private.sh %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

func (l *Libvirtd) stop() error {
	_, err := l.run("stop")
	os.RemoveAll(l.Dir)
	return err
}

// StartLibvirtd starts a private libvirtd for this test alone (one it may
// kill); it is stopped, its domains destroyed, at cleanup. Without root or
// the tools it is Unavailable (a failure under CI=true).
func StartLibvirtd(tb testing.TB) *Libvirtd {
	tb.Helper()
	if reason := libvirtdUnavailable(); reason != "" {
		Unavailable(tb, reason)
	}
	l, err := startLibvirtd()
	if err != nil {
		tb.Fatalf("start a private libvirtd: %v", err)
	}
	tb.Cleanup(func() {
		if err := l.stop(); err != nil {
			tb.Errorf("cleanup: %v", err)
		}
	})
	return l
}

// Kill kills the daemon and every QEMU it runs with SIGKILL: the host dies
// without a word.
func (l *Libvirtd) Kill(tb testing.TB) {
	tb.Helper()
	if _, err := l.run("kill"); err != nil {
		tb.Fatal(err)
	}
}

// Restart starts the daemon again after Kill (same port, same state dir).
func (l *Libvirtd) Restart(tb testing.TB) {
	tb.Helper()
	if _, err := l.run("start"); err != nil {
		tb.Fatal(err)
	}
}

// Second is the second libvirt host of a test binary.
type Second struct {
	once sync.Once
	l    *Libvirtd
	uri  string
	err  error
}

// URI returns the qemu+tcp URI of the test binary's second libvirt host:
// $STOCKADE_TEST_LIBVIRT_URI2 when `make test` started one, else a private
// libvirtd started on first use and stopped by Stop (call it from TestMain
// after m.Run). Tests must not kill it (StartLibvirtd gives one to kill).
// Without root or the tools it is Unavailable (a failure under CI=true); a
// daemon that fails to start fails the test.
func (s *Second) URI(tb testing.TB) string {
	tb.Helper()
	s.once.Do(func() {
		if u := os.Getenv(EnvSecondHost); u != "" {
			s.uri = u
			return
		}
		if reason := libvirtdUnavailable(); reason != "" {
			s.err = errUnavailable(reason)
			return
		}
		s.l, s.err = startLibvirtd()
		if s.l != nil {
			s.uri = s.l.URI
		}
	})
	var ue errUnavailable
	if errors.As(s.err, &ue) {
		Unavailable(tb, string(ue))
	}
	if s.err != nil {
		tb.Fatalf("start the second libvirtd: %v", s.err)
	}
	return s.uri
}

// Stop stops the second libvirtd if this binary started it.
func (s *Second) Stop() error {
	if s.l == nil {
		return nil
	}
	return s.l.stop()
}

type errUnavailable string

func (e errUnavailable) Error() string { return string(e) }
