package hypervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"libvirt.org/go/libvirt"
)

// OpenChannel connects to the domain's virtio-serial channel through
// libvirt (virDomainOpenChannel), so it works over remote URIs too. Only one
// client may hold a channel: a second open while the first is still open is
// ErrConflict. Close the returned stream to free it. The stream also has
// SetWriteDeadline(time.Time) error.
//
// Each channel runs over a libvirt connection of its own, not the Host's
// control connection: whatever befalls one VM's stream (its QEMU dying
// mid-transfer can make libvirt's client drop the connection carrying it)
// ends that channel only, never the host connection or other VMs' channels.
// A libvirtd restart still ends them all.
//
// On a libvirtd of this machine it connects to the channel's QEMU socket
// directly instead (channel_direct.go) unless Config.ChannelStream says not:
// no libvirt connection then, and libvirtd no longer relays the bytes.
func (h *Host) OpenChannel(ctx context.Context, id, name string) (io.ReadWriteCloser, error) {
	// The control connection says whether the host is up at all.
	s, release, err := h.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("open channel %s of vm %s: %w", name, id, err)
	}
	if !h.cfg.ChannelStream && localURI(h.cfg.URI) {
		ch, ok, err := h.openDirect(ctx, s, id, name)
		if ok {
			release()
			if err != nil {
				return nil, fmt.Errorf("open channel %s of vm %s: %w", name, id, err)
			}
			return ch, nil
		}
	}
	release()
	conn, err := h.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("open channel %s of vm %s: %w", name, id, err)
	}
	st, err := h.openChannelOn(&session{conn: conn, lifecycle: -1}, id, name)
	if err != nil {
		if _, cerr := conn.Close(); cerr != nil {
			h.log.Debug("close channel connection", "err", cerr)
		}
		return nil, fmt.Errorf("open channel %s of vm %s: %w", name, id, err)
	}
	st.conn = conn // closed with the stream
	return st, nil
}

func (h *Host) openChannelOn(s *session, id, name string) (*stream, error) {
	dom, _, err := h.lookupOurs(s, id)
	if err != nil {
		return nil, err
	}
	defer dom.Free()
	return h.openStream(s, func(ls *libvirt.Stream) error {
		err := dom.OpenChannel(name, ls, 0)
		if libvirtCode(err) == libvirt.ERR_OPERATION_FAILED {
			// libvirt's answer when another stream holds the channel.
			if active, aerr := dom.IsActive(); aerr == nil && active {
				return fmt.Errorf("%w: %w", ErrConflict, err)
			}
		}
		return err
	})
}

// openConsole attaches to the domain's serial console (pty type only).
func (h *Host) openConsole(s *session, dom *libvirt.Domain) (*stream, error) {
	return h.openStream(s, func(ls *libvirt.Stream) error {
		return dom.OpenConsole("", ls, libvirt.DOMAIN_CONSOLE_FORCE)
	})
}

// openStream makes a non-blocking libvirt stream, attaches it with attach and
// drives it from libvirt's event loop. The stream holds its own reference
// on the libvirt connection, so it stays usable (or fails cleanly) even if
// the session is replaced meanwhile.
func (h *Host) openStream(s *session, attach func(*libvirt.Stream) error) (*stream, error) {
	ls, err := s.conn.NewStream(libvirt.STREAM_NONBLOCK)
	if err != nil {
		return nil, h.fail(err)
	}
	if err := attach(ls); err != nil {
		ls.Free()
		return nil, h.fail(err)
	}
	st := &stream{
		ls:        ls,
		readable:  make(chan struct{}, 1),
		writable:  make(chan struct{}, 1),
		closed:    make(chan struct{}),
		wdlChange: make(chan struct{}),
	}
	if err := ls.EventAddCallback(0, st.onEvent); err != nil {
		_ = ls.Abort()
		ls.Free()
		return nil, h.fail(err)
	}
	return st, nil
}

// stream adapts a non-blocking libvirt stream to io.ReadWriteCloser.
//
// libvirt's stream callbacks are level-triggered and re-fire until the
// condition goes away, so interest is armed only while a Read or Write
// waits, and disarmed inside the callback. Blocking streams are avoided on
// purpose: each would pin an OS thread inside a cgo call for as long as the
// VM lives, one per open channel.
type stream struct {
	ls   *libvirt.Stream
	conn *libvirt.Connect // the stream's own connection, closed with it; nil: shared

	mu       sync.Mutex // guards ls calls and interest
	interest libvirt.StreamEventType

	readable, writable chan struct{}
	closed             chan struct{}
	closeOnce          sync.Once

	rmu, wmu sync.Mutex // one Read and one Write at a time

	dlMu      sync.Mutex
	wdeadline time.Time     // zero: none
	wdlChange chan struct{} // closed and replaced when wdeadline changes
}

// SetWriteDeadline bounds Writes, the pending one included: past t they
// fail with os.ErrDeadlineExceeded. The zero time removes the bound. It lets
// the agent link say goodbye on Close without a stalled guest holding it up.
func (st *stream) SetWriteDeadline(t time.Time) error {
	st.dlMu.Lock()
	defer st.dlMu.Unlock()
	st.wdeadline = t
	close(st.wdlChange)
	st.wdlChange = make(chan struct{})
	return nil
}

// writeDeadline returns the deadline, a channel closed when it changes, and
// a timer channel firing at it (nil without one); stop releases the timer.
func (st *stream) writeDeadline() (expired bool, changed <-chan struct{}, fire <-chan time.Time, stop func()) {
	st.dlMu.Lock()
	dl, changed := st.wdeadline, st.wdlChange
	st.dlMu.Unlock()
	if dl.IsZero() {
		return false, changed, nil, func() {}
	}
	d := time.Until(dl)
	if d <= 0 {
		return true, changed, nil, func() {}
	}
	t := time.NewTimer(d)
	return false, changed, t.C, func() { t.Stop() }
}

// onEvent runs on libvirt's event loop; it must not block.
func (st *stream) onEvent(_ *libvirt.Stream, ev libvirt.StreamEventType) {
	st.mu.Lock()
	defer st.mu.Unlock()
	problem := ev&(libvirt.STREAM_EVENT_HANGUP|libvirt.STREAM_EVENT_ERROR) != 0
	if ev&libvirt.STREAM_EVENT_READABLE != 0 || problem {
		st.interest &^= libvirt.STREAM_EVENT_READABLE
		signal(st.readable)
	}
	if ev&libvirt.STREAM_EVENT_WRITABLE != 0 || problem {
		st.interest &^= libvirt.STREAM_EVENT_WRITABLE
		signal(st.writable)
	}
	if st.ls != nil {
		_ = st.ls.EventUpdateCallback(st.interest)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// arm asks for a callback when ev becomes possible.
func (st *stream) arm(ev libvirt.StreamEventType) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ls == nil {
		return net.ErrClosed
	}
	st.interest |= ev
	return st.ls.EventUpdateCallback(st.interest)
}

func (st *stream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	st.rmu.Lock()
	defer st.rmu.Unlock()
	for {
		st.mu.Lock()
		if st.ls == nil {
			st.mu.Unlock()
			return 0, net.ErrClosed
		}
		n, err := st.ls.Recv(p)
		st.mu.Unlock()
		switch {
		case errors.Is(err, io.EOF):
			return 0, io.EOF
		case err != nil:
			return 0, streamErr("read libvirt stream", err)
		case n >= 0:
			return n, nil
		}
		// -2: nothing buffered. Wait for the event loop to say otherwise.
		if err := st.arm(libvirt.STREAM_EVENT_READABLE); err != nil {
			return 0, streamErr("read libvirt stream", err)
		}
		select {
		case <-st.readable:
		case <-st.closed:
			return 0, net.ErrClosed
		}
	}
}

func (st *stream) Write(p []byte) (int, error) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	written := 0
	for written < len(p) {
		if expired, _, _, _ := st.writeDeadline(); expired {
			return written, fmt.Errorf("write libvirt stream: %w", os.ErrDeadlineExceeded)
		}
		st.mu.Lock()
		if st.ls == nil {
			st.mu.Unlock()
			return written, net.ErrClosed
		}
		n, err := st.ls.Send(p[written:])
		st.mu.Unlock()
		if err != nil {
			return written, streamErr("write libvirt stream", err)
		}
		if n >= 0 {
			written += n
			continue
		}
		if err := st.arm(libvirt.STREAM_EVENT_WRITABLE); err != nil {
			return written, streamErr("write libvirt stream", err)
		}
		_, changed, fire, stop := st.writeDeadline()
		select {
		case <-st.writable:
		case <-changed: // look at the new deadline
		case <-fire: // the loop's check reports it
		case <-st.closed:
			stop()
			return written, net.ErrClosed
		}
		stop()
	}
	return written, nil
}

// Close aborts the stream (the guest sees the host side disconnect) and
// frees it. Pending Reads and Writes return net.ErrClosed.
func (st *stream) Close() error {
	var err error
	st.closeOnce.Do(func() {
		close(st.closed)
		st.mu.Lock()
		ls := st.ls
		st.ls = nil
		st.mu.Unlock()
		_ = ls.EventRemoveCallback()
		if aerr := ls.Abort(); aerr != nil && libvirtCode(aerr) != libvirt.ERR_RPC {
			err = streamErr("close libvirt stream", aerr)
		}
		ls.Free()
		if st.conn != nil {
			_, _ = st.conn.Close() // its last reference: the connection ends
		}
	})
	return err
}
