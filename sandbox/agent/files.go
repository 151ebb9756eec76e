package agent

import (
	"context"
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
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Files are opened by the sandbox's init, not by the agent: init is
// already inside the sandbox's mount namespace and runs as the sandbox
// user (uid, gids, no capabilities), so a file operation is refused
// exactly where a command of the sandbox would be refused (/etc/shadow,
// a folder of root's), and files it makes belong to the sandbox user.
// Init resolves every path with openat2 below its root: RESOLVE_IN_ROOT
// keeps ".." at the root, RESOLVE_NO_MAGICLINKS refuses /proc-style links,
// and symlinks resolve in the sandbox's own namespace. Only regular files
// are served, opened non-blocking so a FIFO cannot hang anyone, and none on
// the kernel's file systems (/proc, /sys). The agent moves the bytes
// through the descriptor init hands over, after checking it itself:
// init runs in the sandbox, so what it sends is checked, not trusted.

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
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EROFS):
		return fmt.Errorf("%s: %w for the sandbox user (%w)", p, agentproto.ErrPermission, err)
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP), errors.Is(err, unix.EISDIR),
		errors.Is(err, unix.ENAMETOOLONG), errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTEMPTY),
		errors.Is(err, unix.ENXIO):
		return fmt.Errorf("%s: %w (%w)", p, agentproto.ErrBadRequest, err)
	}
	return fmt.Errorf("%s: %w", p, err)
}

// kernelFS reports whether a file system type is one of the kernel's
// interfaces (proc, sysfs, cgroup), which the files API does not serve.
func kernelFS(typ int64) bool {
	switch typ {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC,
		unix.DEBUGFS_MAGIC, unix.SECURITYFS_MAGIC, unix.BPF_FS_MAGIC, unix.TRACEFS_MAGIC:
		return true
	}
	return false
}

// checkRegular fails unless fd is a regular file outside the kernel's file
// systems; it returns its status.
func checkRegular(fd int, p string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return st, fileError(p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return st, fmt.Errorf("%s is not a regular file: %w", p, agentproto.ErrBadRequest)
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return st, fileError(p, err)
	}
	if kernelFS(int64(sfs.Type)) {
		return st, fmt.Errorf("%s is a kernel interface, not a file: %w", p, agentproto.ErrBadRequest)
	}
	return st, nil
}

// openRegular opens p, failing unless it is a regular file.
func openRegular(root int, p string, flags int, mode uint32) (*os.File, error) {
	fd, err := openInRoot(root, p, flags|unix.O_NONBLOCK|unix.O_NOCTTY, mode)
	if err != nil {
		return nil, err
	}
	if _, err := checkRegular(fd, p); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), p), nil
}

// fileFromInit asks the sandbox's init to open a file (see initOpFile) and
// returns the descriptor it sent, checked here, with the connection, which
// a fileWrite still needs for its commit.
func fileFromInit(sb *sandbox, req fileRequest) (*net.UnixConn, *os.File, error) {
	ctx, cancel := context.WithTimeout(context.Background(), initFileTimeout)
	defer cancel()
	c, err := dialInit(ctx, sb)
	if err != nil {
		return nil, nil, err
	}
	c.SetDeadline(time.Now().Add(initFileTimeout))
	if err := sendInit(c, initRequest{Op: initOpFile, File: &req}); err != nil {
		c.Close()
		return nil, nil, err
	}
	var rep initReply
	fds, err := recvInit(c, &rep)
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("sandbox init: %w", err)
	}
	if rep.Code != "" || len(fds) != 1 {
		closeFDs(fds)
		c.Close()
		if rep.Code == "" {
			return nil, nil, fmt.Errorf("sandbox init sent %d descriptors, want 1", len(fds))
		}
		return nil, nil, initFileError(rep)
	}
	if _, err := checkRegular(fds[0], req.Path); err != nil {
		unix.Close(fds[0])
		c.Close()
		return nil, nil, err
	}
	c.SetDeadline(time.Time{})
	return c, os.NewFile(uintptr(fds[0]), req.Path), nil
}

// initFileTimeout bounds each exchange with init about a file (not the
// bytes that go through the descriptor).
const initFileTimeout = 30 * time.Second

// initError is a refusal from init: its message, with the sentinel of its
// code.
type initError struct {
	msg      string
	sentinel error
}

func (e *initError) Error() string { return e.msg }
func (e *initError) Unwrap() error { return e.sentinel }

// initFileError turns init's answer back into an error with its sentinel.
func initFileError(rep initReply) error {
	e := &initError{msg: rep.Error}
	switch rep.Code {
	case agentproto.CodeNotFound:
		e.sentinel = agentproto.ErrNotFound
	case agentproto.CodeBadRequest:
		e.sentinel = agentproto.ErrBadRequest
	case agentproto.CodeExhausted:
		e.sentinel = agentproto.ErrExhausted
	case agentproto.CodePermission:
		e.sentinel = agentproto.ErrPermission
	default:
		e.sentinel = agentproto.ErrRemote
	}
	return e
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
	c, f, err := fileFromInit(sb, fileRequest{Op: fileRead, Path: p})
	if err != nil {
		fail(fmt.Errorf("file.read: %w", err))
		return
	}
	c.Close()
	defer f.Close()
	fst, err := checkRegular(int(f.Fd()), p)
	if err != nil {
		fail(fmt.Errorf("file.read: %w", err))
		return
	}
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
// Unless appending, the bytes go to a new file beside the target that init
// renames over it at the end, so the file appears whole or not at all.
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
	if _, base := path.Split(p); base == "" || base == "." || base == ".." {
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
	op := fileWrite
	if req.Append {
		op = fileAppend
	}
	c, f, err := fileFromInit(sb, fileRequest{Op: op, Path: p, Mode: mode})
	if err != nil {
		fail(fmt.Errorf("file.write: %w", err))
		return
	}
	defer c.Close()
	defer f.Close()
	// A failed write leaves nothing behind, before the host hears of it:
	// init removes the new file and says so.
	abort := func(err error) {
		f.Close()
		if op == fileWrite {
			endInitWrite(c, false)
		}
		c.Close()
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
	if op == fileWrite {
		if err := endInitWrite(c, true); err != nil {
			abort(fmt.Errorf("file.write: %w", err))
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

// endInitWrite asks init to rename a fileWrite's new file over its target
// (commit) or to remove it, and waits until it has.
func endInitWrite(c *net.UnixConn, commit bool) error {
	c.SetDeadline(time.Now().Add(initFileTimeout))
	if err := sendInit(c, fileCommit{Commit: commit}); err != nil {
		return err
	}
	var rep initReply
	fds, err := recvInit(c, &rep)
	closeFDs(fds)
	if err != nil {
		return fmt.Errorf("sandbox init: %w", err)
	}
	if rep.Code != "" {
		return initFileError(rep)
	}
	return nil
}

// mkdirAllInRoot opens the folder dir (absolute in the sandbox), making the
// missing ones on the way. Each step resolves from the root again, so no
// step can leave it.
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
	if err := unix.Mkdirat(parent, path.Base(dir), 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, fileError(dir, err)
	}
	return openInRoot(root, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
}

// createTemp makes a new file in the folder parent, for the file p (named
// in errors). O_EXCL never follows a link, so the name is ours.
func createTemp(parent int, p string, mode uint32) (string, *os.File, error) {
	var b [8]byte
	rand.Read(b[:])
	name := ".stockade-upload-" + hex.EncodeToString(b[:])
	fd, err := unix.Openat(parent, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, mode)
	if err != nil {
		return "", nil, fileError(p, err)
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		unix.Close(fd)
		unix.Unlinkat(parent, name, 0)
		return "", nil, fileError(p, err)
	}
	return name, os.NewFile(uintptr(fd), name), nil
}

// openAppend opens p to append to it, making it when missing.
func openAppend(root int, p string, mode uint32) (*os.File, error) {
	f, err := openRegular(root, p, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_EXCL, mode)
	if err == nil {
		if err := unix.Fchmod(int(f.Fd()), mode); err != nil {
			f.Close()
			return nil, fileError(p, err)
		}
		return f, nil
	}
	if !errors.Is(err, unix.EEXIST) {
		return nil, err
	}
	return openRegular(root, p, unix.O_WRONLY|unix.O_APPEND, 0)
}
