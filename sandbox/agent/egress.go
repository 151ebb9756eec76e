package agent

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Egress (egress.go)
//
// A sandbox has no network device, only lo. The agent listens on
// agentproto.EgressProxyAddr inside the sandbox's network namespace (the
// listening socket is made there and served from the agent's own), and every
// command's environment points HTTP(S)_PROXY at it. Each accepted connection
// becomes one OpEgress stream the agent opens towards the host over the
// current session; the bytes cross unchanged. The host's gateway speaks the
// proxy protocol, decides and dials: the agent decides nothing.

// proxyURL is what HTTP(S)_PROXY say inside a sandbox.
const proxyURL = "http://" + agentproto.EgressProxyAddr

// egressEnv is the environment that sends a sandbox's traffic through its
// proxy listener, and caEnv (may be nil) the trust settings for the tenant CA.
func egressEnv(caEnv []string) []string {
	env := []string{
		"HTTP_PROXY=" + proxyURL, "HTTPS_PROXY=" + proxyURL,
		"http_proxy=" + proxyURL, "https_proxy=" + proxyURL,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
	}
	return append(env, caEnv...)
}

// hostLink is the host session egress streams open on. It changes when a
// host reconnects; with none, a sandbox's connection gets a 502 at once.
type hostLink struct {
	mu   sync.Mutex
	open func() (net.Conn, error)
	gen  int
}

func (l *hostLink) stream() (net.Conn, error) {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	if open == nil {
		return nil, errors.New("no host session")
	}
	return open()
}

// SetHostSession makes open the way egress streams reach the host; the
// returned func undoes it when that session ends (unless a newer one
// replaced it already).
func (m *Manager) SetHostSession(open func() (net.Conn, error)) (clear func()) {
	l := &m.link
	l.mu.Lock()
	l.open = open
	l.gen++
	gen := l.gen
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.gen == gen {
			l.open = nil
		}
	}
}

// startEgress opens the sandbox's proxy listener in the network namespace
// of its init (pid) and serves it until the sandbox stops.
func (m *Manager) startEgress(sb *sandbox, pid int) error {
	fd, err := socketInNetns(pid, unix.AF_INET, unix.SOCK_STREAM)
	if err != nil {
		return fmt.Errorf("egress listener: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		unix.Close(fd)
		return fmt.Errorf("egress listener: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: 3128, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("egress listener: bind %s: %w", agentproto.EgressProxyAddr, err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		unix.Close(fd)
		return fmt.Errorf("egress listener: %w", err)
	}
	f := os.NewFile(uintptr(fd), "egress")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("egress listener: %w", err)
	}
	go func() {
		<-sb.stopping
		ln.Close()
	}()
	go m.serveEgress(sb, ln)
	return nil
}

func (m *Manager) serveEgress(sb *sandbox, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		go m.pipeEgress(sb, c.(*net.TCPConn))
	}
}

// pipeEgress carries one connection of the sandbox to the host and back.
func (m *Manager) pipeEgress(sb *sandbox, c *net.TCPConn) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	ec, err := agentproto.OpenEgress(ctx, m.link.stream, sb.hostID())
	cancel()
	if err != nil {
		m.log.Warn("egress", "sandbox", sb.hostID(), "err", err)
		c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"+
			"stockade egress: the gateway is not reachable from this sandbox right now\n")
		return
	}
	defer ec.Close()
	// A stopping sandbox ends its connections too.
	stop := context.AfterFunc(sandboxContext(sb), func() { c.Close(); ec.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := io.Copy(ec, c); err == nil {
			ec.CloseWrite()
		}
	}()
	if _, err := io.Copy(c, ec); err == nil {
		c.CloseWrite()
		// The host is done; a client that never closes its side does not
		// hold the connection forever.
		c.SetReadDeadline(time.Now().Add(time.Minute))
	} else {
		c.Close()
		ec.Close()
	}
	<-done
}

// sandboxContext ends when the sandbox begins to stop.
func sandboxContext(sb *sandbox) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-sb.stopping:
		case <-sb.stopped:
		}
		cancel()
	}()
	return ctx
}

// socketInNetns makes a socket in the network namespace of pid. A socket
// belongs to the namespace it was made in, so only its creation happens
// there, on a thread that leaves with its goroutine if it cannot switch back.
func socketInNetns(pid, domain, typ int) (int, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, fmt.Errorf("sandbox netns: %w", err)}
			return
		}
		defer unix.Close(ns)
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, fmt.Errorf("own netns: %w", err)}
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, fmt.Errorf("enter sandbox netns: %w", err)}
			return
		}
		fd, serr := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, 0)
		if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
			// Stay locked: the thread ends with this goroutine.
			ch <- result{fd, fmt.Errorf("leave sandbox netns: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{fd, serr}
	}()
	r := <-ch
	if r.err != nil {
		if r.fd >= 0 {
			unix.Close(r.fd)
		}
		return -1, r.err
	}
	return r.fd, nil
}

// Where the tenant CA goes in a sandbox.
const (
	caFile         = "/etc/stockade/ca.pem"
	systemCABundle = "/etc/ssl/certs/ca-certificates.crt"
)

// installCA puts the tenant CA (PEM) into the sandbox's root (the fresh
// overlay, before the sandbox runs: nothing in it is the sandbox's yet):
// caFile, and appended to the template's system bundle when it has one. It
// returns the environment that points TLS clients at it; none for no CA.
func installCA(rootfs, caPEM string) ([]string, error) {
	if caPEM == "" {
		return nil, nil
	}
	if b, _ := pem.Decode([]byte(caPEM)); b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("tenant CA: not a PEM certificate: %w", agentproto.ErrBadRequest)
	}
	pemText := caPEM
	if pemText[len(pemText)-1] != '\n' {
		pemText += "\n"
	}
	dir := filepath.Join(rootfs, filepath.Dir(caFile))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tenant CA: %w", err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, caFile), []byte(pemText), 0o644); err != nil {
		return nil, fmt.Errorf("tenant CA: %w", err)
	}
	bundle := caFile
	sys := filepath.Join(rootfs, systemCABundle)
	if fi, err := os.Lstat(sys); err == nil && fi.Mode().IsRegular() {
		old, err := os.ReadFile(sys)
		if err != nil {
			return nil, fmt.Errorf("tenant CA: %w", err)
		}
		if len(old) > 0 && old[len(old)-1] != '\n' {
			old = append(old, '\n')
		}
		if err := os.WriteFile(sys, append(old, pemText...), 0o644); err != nil {
			return nil, fmt.Errorf("tenant CA: %w", err)
		}
		bundle = systemCABundle
	}
	return []string{
		"SSL_CERT_FILE=" + bundle, "REQUESTS_CA_BUNDLE=" + bundle, "CURL_CA_BUNDLE=" + bundle,
		"NODE_EXTRA_CA_CERTS=" + caFile,
	}, nil
}
