package agent

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Files are read and written through the sandbox's root as the agent sees
// it (the overlay, with /workspace mounted on it), every path resolved by
// openat2 with RESOLVE_IN_ROOT: ".." stops at the root and symlinks resolve
// as they would inside the sandbox, so neither leads out of it;
// RESOLVE_NO_MAGICLINKS refuses /proc-style links. Only regular files are
// read or written, opened non-blocking so a FIFO cannot hang the agent.

// resolveFlags are the openat2 rules for every path in a sandbox.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// sandboxPath cleans a path from the host: absolute in the sandbox, or
// relative to /workspace.
func sandboxPath(p string) (string, error) {
	if p == "" || len(p) > maxPathLen || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path %q: %w", p, agentproto.ErrBadRequest)
	}
	if !path.IsAbs(p) {
		p = path.Join(workspaceDir, p)
	}
	return path.Clean(p), nil
}

// openInRoot opens p (absolute in the sandbox) below root.
func openInRoot(root int, p string, flags int, mode uint32) (int, error) {
	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(root, rel, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: resolveFlags,
	})
	if err != nil {
		return -1, fileError(p, err)
	}
	return fd, nil
}

// fileError maps errno to the protocol's sentinels.
func fileError(p string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%s: %w (%w)", p, agentproto.ErrNotFound, err)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return fmt.Errorf("%s: %w (%w)", p, agentproto.ErrExhausted, err)
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP), errors.Is(err, unix.EISDIR),
		errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.ENAMETOOLONG),
		errors.Is(err, unix.EROFS), errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTEMPTY):
		return fmt.Errorf("%s: %w (%w)", p, agentproto.ErrBadRequest, err)
	}
	return fmt.Errorf("%s: %w", p, err)
}

// openRoot opens the sandbox's root for one file operation. Each operation
// holds its own descriptor, so a sandbox stopping underneath only makes it
// fail.
func openRoot(sb *sandbox) (int, error) {
	fd, err := unix.Open(sb.rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open sandbox root: %w", err)
	}
	return fd, nil
}

// openRegular opens p, failing unless it is a regular file.
func openRegular(root int, p string, flags int, mode uint32) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := openInRoot(root, p, flags|unix.O_NONBLOCK|unix.O_NOCTTY, mode)
	if err != nil {
		return nil, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, st, fileError(p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, st, fmt.Errorf("%s is not a regular file: %w", p, agentproto.ErrBadRequest)
	}
	return os.NewFile(uintptr(fd), p), st, nil
}

// serveFileRead streams a file to the host: see agentproto.OpFileRead.
func (m *Manager) serveFileRead(st net.Conn, req *agentproto.FileReadRequest) {
	fail := func(err error) {
		agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version, Error: agentproto.ErrorFor(err)})
	}
	if req == nil || req.Offset < 0 || req.Limit < 0 {
		fail(fmt.Errorf("file.read: %w", agentproto.ErrBadRequest))
		return
	}
	p, err := sandboxPath(req.Path)
	if err != nil {
		fail(fmt.Errorf("file.read: %w", err))
		return
	}
	sb, err := m.get(req.Sandbox)
	if err != nil {
		fail(fmt.Errorf("file.read: %w", err))
		return
	}
	if err := sb.begin(); err != nil {
		fail(fmt.Errorf("file.read: %w", err))
		return
	}
	defer sb.end()
	root, err := openRoot(sb)
	if err != nil {
		fail(err)
		return
	}
	defer unix.Close(root)
	f, fst, err := openRegular(root, p, unix.O_RDONLY, 0)
	if err != nil {
		fail(fmt.Errorf("file.read: %w", err))
		return
	}
	defer f.Close()
	n := max(fst.Size-req.Offset, 0)
	if req.Limit > 0 {
		n = min(n, req.Limit)
	}
	if n > m.cfg.MaxFileBytes {
		fail(fmt.Errorf("file.read %s: %d bytes, the bound is %d: %w", p, n, m.cfg.MaxFileBytes, agentproto.ErrFileTooLarge))
		return
	}
	info := &agentproto.FileInfo{Size: fst.Size, Mode: fst.Mode & 0o7777}
	if err := agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version, File: info}); err != nil {
		return
	}
	// Never more than announced, even if the file grows meanwhile.
	r := io.NewSectionReader(f, req.Offset, n)
	buf := make([]byte, 32<<10)
	for {
		k, rerr := r.Read(buf)
		if k > 0 {
			if err := agentproto.WriteFrame(st, agentproto.ChannelData, buf[:k]); err != nil {
				return
			}
		}
		if errors.Is(rerr, io.EOF) {
			agentproto.WriteFrame(st, agentproto.ChannelData, nil)
			return
		}
		if rerr != nil {
			b, _ := json.Marshal(agentproto.ErrorFor(fileError(p, rerr)))
			agentproto.WriteFrame(st, agentproto.ChannelError, b)
			return
		}
	}
}

// serveFileWrite receives a file from the host: see agentproto.OpFileWrite.
// Unless appending, the bytes go to a new file beside the target that is
// renamed over it at the end, so the file appears whole or not at all.
func (m *Manager) serveFileWrite(st net.Conn, req *agentproto.FileWriteRequest) {
	fail := func(err error) {
		agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version, Error: agentproto.ErrorFor(err)})
	}
	if req == nil || req.MaxBytes < 0 {
		fail(fmt.Errorf("file.write: %w", agentproto.ErrBadRequest))
		return
	}
	p, err := sandboxPath(req.Path)
	if err != nil {
		fail(fmt.Errorf("file.write: %w", err))
		return
	}
	dir, base := path.Split(p)
	if base == "" || base == "." || base == ".." {
		fail(fmt.Errorf("file.write %s: not a file name: %w", p, agentproto.ErrBadRequest))
		return
	}
	mode := req.Mode & 0o777
	if req.Mode == 0 {
		mode = 0o644
	}
	limit := m.cfg.MaxFileBytes
	if req.MaxBytes > 0 {
		limit = min(limit, req.MaxBytes)
	}
	sb, err := m.get(req.Sandbox)
	if err != nil {
		fail(fmt.Errorf("file.write: %w", err))
		return
	}
	if err := sb.begin(); err != nil {
		fail(fmt.Errorf("file.write: %w", err))
		return
	}
	defer sb.end()
	root, err := openRoot(sb)
	if err != nil {
		fail(err)
		return
	}
	defer unix.Close(root)
	parent, err := mkdirAllInRoot(root, dir)
	if err != nil {
		fail(fmt.Errorf("file.write: %w", err))
		return
	}
	defer unix.Close(parent)

	var f *os.File
	var tmp string
	if req.Append {
		f, err = openAppend(root, p, mode)
	} else {
		tmp, f, err = createTemp(parent, mode)
	}
	if err != nil {
		fail(fmt.Errorf("file.write: %w", err))
		return
	}
	defer f.Close()
	// A failed write leaves nothing behind, before the host hears of it.
	abort := func(err error) {
		f.Close()
		if tmp != "" {
			unix.Unlinkat(parent, tmp, 0)
		}
		if err != nil {
			fail(err)
		}
	}
	if err := agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version}); err != nil {
		abort(nil)
		return
	}
	var written int64
	for {
		fr, err := agentproto.ReadFrame(st)
		if err != nil {
			abort(nil) // the host went away: nothing appears
			return
		}
		if fr.Channel != agentproto.ChannelData {
			abort(fmt.Errorf("file.write: frame on channel %d: %w", fr.Channel, agentproto.ErrBadRequest))
			return
		}
		if len(fr.Data) == 0 {
			break
		}
		written += int64(len(fr.Data))
		if written > limit {
			abort(fmt.Errorf("file.write %s: over %d bytes: %w", p, limit, agentproto.ErrFileTooLarge))
			return
		}
		if _, err := f.Write(fr.Data); err != nil {
			abort(fmt.Errorf("file.write: %w", fileError(p, err)))
			return
		}
	}
	if tmp != "" {
		if err := unix.Renameat(parent, tmp, parent, base); err != nil {
			abort(fmt.Errorf("file.write: %w", fileError(p, err)))
			return
		}
	}
	var fst unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &fst); err != nil {
		fail(fmt.Errorf("file.write: %w", fileError(p, err)))
		return
	}
	agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version,
		File: &agentproto.FileInfo{Size: fst.Size, Mode: fst.Mode & 0o7777}})
}

// mkdirAllInRoot opens the folder dir (absolute in the sandbox), making the
// missing ones on the way for the sandbox user. Each step resolves from the
// root again, so no step can leave it.
func mkdirAllInRoot(root int, dir string) (int, error) {
	dir = path.Clean("/" + dir)
	fd, err := openInRoot(root, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err == nil || !errors.Is(err, agentproto.ErrNotFound) {
		return fd, err
	}
	parent, err := mkdirAllInRoot(root, path.Dir(dir))
	if err != nil {
		return -1, err
	}
	defer unix.Close(parent)
	name := path.Base(dir)
	if err := unix.Mkdirat(parent, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, fileError(dir, err)
	} else if err == nil {
		if err := unix.Fchownat(parent, name, sandboxUID, sandboxGID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return -1, fileError(dir, err)
		}
	}
	return openInRoot(root, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
}

// createTemp makes a new file in the folder parent for the sandbox user.
// O_EXCL never follows a link, so the name is ours.
func createTemp(parent int, mode uint32) (string, *os.File, error) {
	var b [8]byte
	rand.Read(b[:])
	name := ".stockade-upload-" + hex.EncodeToString(b[:])
	fd, err := unix.Openat(parent, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, mode)
	if err != nil {
		return "", nil, fileError(name, err)
	}
	if err := ownFile(fd, mode); err != nil {
		unix.Close(fd)
		unix.Unlinkat(parent, name, 0)
		return "", nil, err
	}
	return name, os.NewFile(uintptr(fd), name), nil
}

// openAppend opens p to append to it, making it for the sandbox user when
// missing.
func openAppend(root int, p string, mode uint32) (*os.File, error) {
	f, _, err := openRegular(root, p, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_EXCL, mode)
	if err == nil {
		if err := ownFile(int(f.Fd()), mode); err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
	if !errors.Is(err, unix.EEXIST) {
		return nil, err
	}
	f, _, err = openRegular(root, p, unix.O_WRONLY|unix.O_APPEND, 0)
	return f, err
}

// ownFile gives a file the agent made to the sandbox user, with exactly
// mode (no umask).
func ownFile(fd int, mode uint32) error {
	if err := unix.Fchown(fd, sandboxUID, sandboxGID); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}
