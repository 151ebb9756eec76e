package agent

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// sandbox.upper (agentproto UpperDoc): the writable layer of a paused
// sandbox, as a tar stream, for a template build to bring back what its
// setup commands changed. The agent walks the overlay's upper dir itself
// (as root, outside the sandbox); the sandbox must be paused, so none of
// its processes can swap a folder for a symlink during the walk, and still
// nothing is followed: entries are Lstat'ed, files opened O_NOFOLLOW and
// copied as many bytes as their fstat says.

// upperOps are the ops of this file.
func upperOps() []agentproto.Op { return []agentproto.Op{agentproto.OpSandboxUpper} }

// serveUpper answers OpSandboxUpper.
func (m *Manager) serveUpper(st net.Conn, req agentproto.Request) {
	fail := func(err error) {
		agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version, Error: agentproto.ErrorFor(fmt.Errorf("%s: %w", req.Op, err))})
	}
	r := req.Fs
	if r == nil || r.MaxBytes <= 0 {
		fail(fmt.Errorf("needs the sandbox and max_bytes: %w", agentproto.ErrBadRequest))
		return
	}
	sb, err := m.get(r.Sandbox)
	if err != nil {
		fail(err)
		return
	}
	sb.mu.Lock()
	ok := sb.state == agentproto.SandboxRunning && sb.pause.paused
	sb.mu.Unlock()
	if !ok {
		fail(fmt.Errorf("sandbox %s must be running and paused: %w", sb.id, agentproto.ErrConflict))
		return
	}
	upper := filepath.Join(sb.dir, "scratch", "upper")
	if err := agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version}); err != nil {
		return
	}
	fw := &frameWriter{st: st, limit: r.MaxBytes}
	tw := tar.NewWriter(fw)
	err = writeUpper(tw, upper)
	if err == nil {
		err = tw.Close()
	}
	if errors.Is(err, errHostGone) {
		return
	}
	if err != nil {
		writeErrorFrame(st, fmt.Errorf("sandbox.upper %s: %w", sb.id, err))
		return
	}
	agentproto.WriteFrame(st, agentproto.ChannelData, nil)
}

// writeUpper writes the entries below upper (UpperDoc), at most
// agentproto.MaxArchiveEntries of them.
func writeUpper(tw *tar.Writer, upper string) error {
	n := 0
	return filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == upper {
			return nil
		}
		if n++; n > agentproto.MaxArchiveEntries {
			return fmt.Errorf("more than %d entries: %w", agentproto.MaxArchiveEntries, agentproto.ErrFileTooLarge)
		}
		rel, err := filepath.Rel(upper, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		var sys unix.Stat_t
		if err := unix.Lstat(p, &sys); err != nil {
			return err
		}
		hdr := &tar.Header{Name: rel, Mode: int64(sys.Mode & 0o7777), Uid: int(sys.Uid), Gid: int(sys.Gid),
			ModTime: time.Unix(sys.Mtim.Unix()), Format: tar.FormatPAX}
		switch sys.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if opaque(p) {
				return tw.WriteHeader(&tar.Header{Name: rel + "/.wh..wh..opq", Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX})
			}
			return nil
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case unix.S_IFCHR:
			if sys.Rdev != 0 {
				return nil // a device: left out
			}
			dir, base := path.Split(rel)
			return tw.WriteHeader(&tar.Header{Name: dir + ".wh." + base, Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX})
		case unix.S_IFREG:
			return upperFile(tw, p, hdr)
		}
		return nil // FIFOs, sockets, block devices: left out
	})
}

// upperFile writes one regular file: opened without following a link,
// its bytes as many as its own fstat says.
func upperFile(tw *tar.Writer, p string, hdr *tar.Header) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", hdr.Name, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var sys unix.Stat_t
	if err := unix.Fstat(fd, &sys); err != nil {
		return err
	}
	if sys.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s changed during the walk: %w", hdr.Name, agentproto.ErrConflict)
	}
	hdr.Typeflag, hdr.Size, hdr.Mode = tar.TypeReg, sys.Size, int64(sys.Mode&0o7777)
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, sys.Size); err != nil {
		return fmt.Errorf("read %s: %w", hdr.Name, err)
	}
	return nil
}

// opaque reports whether the overlay marked folder p opaque (its lower
// contents hidden).
func opaque(p string) bool {
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(p, "trusted.overlay.opaque", buf)
	return err == nil && n == 1 && buf[0] == 'y'
}
