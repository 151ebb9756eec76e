package agent

import (
	"context"
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
