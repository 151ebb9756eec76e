package hypervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"libvirt.org/go/libvirtxml"
)

// The direct channel path: on a libvirtd of this machine, OpenChannel
// connects to the channel's QEMU chardev socket itself (its path is in the
// domain's live XML) instead of relaying every byte through libvirtd's
// stream RPC and its event loop. Each round trip then skips two process
// hops and the event-loop wake-ups on both ends.
//
// QEMU serves one client per chardev socket and lets a second one wait in
// its listen queue without a word, where libvirt's stream answers "Active
// channel stream exists". So the direct path keeps libvirt's rule itself:
// a client holds an exclusive flock(2) on the socket's folder (libvirt
// makes one per running domain, domain-<n>-<name>/, and removes it with
// the domain) for as long as it holds the connection. A second opener of
// any replica on this machine gets ErrConflict at once; a process that dies
// lets go of both with its file descriptors. A client of the libvirt stream
// takes no such lock: every server of an installation on one host must use
// the same path (STOCKADE_CHANNEL_DIRECT), or the later opener waits until
// the other lets go.

// localURI reports whether uri names a QEMU libvirtd of this machine
// reached over its unix socket (qemu:///system, qemu+unix:///session, …):
// the only ones whose chardev sockets this process can reach. A URI naming
// any host, even this one over TCP or SSH, is remote.
func localURI(uri string) bool {
	u, err := url.Parse(uri)
	if err != nil || u.Host != "" {
		return false
	}
	driver, transport, _ := strings.Cut(u.Scheme, "+")
	return driver == "qemu" && (transport == "" || transport == "unix")
}

// channelSocket returns the path of the unix socket QEMU serves domain id's
// channel name on, from its live XML.
func (h *Host) channelSocket(s *session, id, name string) (string, error) {
	dom, _, err := h.lookupOurs(s, id)
	if err != nil {
		return "", err
	}
	defer dom.Free()
	raw, err := dom.GetXMLDesc(0)
	if err != nil {
		return "", h.fail(err)
	}
	var x libvirtxml.Domain
	if err := x.Unmarshal(raw); err != nil {
		return "", fmt.Errorf("parse live xml: %w", err)
	}
	if x.Devices != nil {
		for _, c := range x.Devices.Channels {
			if c.Target == nil || c.Target.VirtIO == nil || c.Target.VirtIO.Name != name ||
				c.Source == nil || c.Source.UNIX == nil {
				continue
			}
			if p := c.Source.UNIX.Path; filepath.IsAbs(p) {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("no unix socket for channel %s in the live xml (is the domain running?)", name)
}

// dialDirect connects to a channel socket under the folder's lock:
// ErrConflict when another client holds it.
func dialDirect(ctx context.Context, path string) (*directChannel, error) {
	lock, err := os.Open(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("open channel lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: another client holds the channel socket %s", ErrConflict, path)
		}
		return nil, fmt.Errorf("lock channel socket %s: %w", path, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("connect channel socket: %w", err)
	}
	return &directChannel{UnixConn: c.(*net.UnixConn), lock: lock, path: path}, nil
}

// directChannel is a connection to a channel's chardev socket and the lock
// that makes it the only one. It has SetWriteDeadline like the libvirt
// stream.
type directChannel struct {
	*net.UnixConn
	lock      *os.File
	path      string
	closeOnce sync.Once
}

// Read and Write report a broken connection (QEMU gone) as
// ErrStreamClosed, like the stream does; io.EOF, net.ErrClosed after Close
// and an expired write deadline stay as they are.
func (c *directChannel) Read(p []byte) (int, error) {
	n, err := c.UnixConn.Read(p)
	return n, c.wrap("read channel socket", err)
}

func (c *directChannel) Write(p []byte) (int, error) {
	n, err := c.UnixConn.Write(p)
	return n, c.wrap("write channel socket", err)
}

func (c *directChannel) wrap(op string, err error) error {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return streamErr(op, err)
}

// ChannelSocket names the chardev socket the channel is connected to: the
// way to tell a direct channel from a libvirt stream.
func (c *directChannel) ChannelSocket() string { return c.path }

// Close hangs up (the guest sees the host side disconnect, as with the
// stream) and then lets go of the lock. Pending Reads and Writes return
// net.ErrClosed.
func (c *directChannel) Close() error {
	var err error
	c.closeOnce.Do(func() {
		err = c.UnixConn.Close()
		c.lock.Close()
	})
	return err
}

var _ io.ReadWriteCloser = (*directChannel)(nil)

// openDirect tries the direct path for OpenChannel. ok false: use the
// libvirt stream instead (the socket is out of this process's reach).
func (h *Host) openDirect(ctx context.Context, s *session, id, name string) (ch io.ReadWriteCloser, ok bool, err error) {
	path, err := h.channelSocket(s, id, name)
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable) {
		return nil, true, err
	}
	if err == nil {
		var dc *directChannel
		dc, err = dialDirect(ctx, path)
		if err == nil {
			return dc, true, nil
		}
		if errors.Is(err, ErrConflict) || ctx.Err() != nil {
			return nil, true, err
		}
	}
	h.log.Debug("direct channel unavailable: using the libvirt stream", "vm", id, "err", err)
	return nil, false, nil
}
