package agent

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agent/sandboxinit"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// The file system ops (agentproto fs.go) are run by the sandbox's init,
// like file.read and file.write (files.go): inside the sandbox's mount
// namespace, as the sandbox user, every path resolved below its root. The
// agent checks everything init answers (it runs in the sandbox) against
// agentproto's bounds before the host sees it.

type (
	fsInitRequest = sandboxinit.FsRequest
	fsReply       = sandboxinit.FsReply
	fsAck         = sandboxinit.FsAck
)

// fsOps are the file system ops a Manager serves.
func fsOps() []agentproto.Op {
	return []agentproto.Op{agentproto.OpFsStat, agentproto.OpFsList, agentproto.OpFsMkdir, agentproto.OpFsRemove,
		agentproto.OpFsMove, agentproto.OpFsChmod, agentproto.OpFsWatch, agentproto.OpFsArchive}
}

// isFsOp reports whether op is one of fsOps.
func isFsOp(op agentproto.Op) bool {
	for _, o := range fsOps() {
		if o == op {
			return true
		}
	}
	return false
}

// initFsOps names each op's init operation.
var initFsOps = map[agentproto.Op]string{
	agentproto.OpFsStat: sandboxinit.FsStat, agentproto.OpFsList: sandboxinit.FsList, agentproto.OpFsMkdir: sandboxinit.FsMkdir,
	agentproto.OpFsRemove: sandboxinit.FsRemove, agentproto.OpFsMove: sandboxinit.FsMove, agentproto.OpFsChmod: sandboxinit.FsChmod,
	agentproto.OpFsWatch: sandboxinit.FsWatch, agentproto.OpFsArchive: sandboxinit.FsArchive,
}

// serveFs serves one file system op.
func (m *Manager) serveFs(st net.Conn, req agentproto.Request) {
	fail := func(err error) {
		agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version, Error: agentproto.ErrorFor(fmt.Errorf("%s: %w", req.Op, err))})
	}
	r := req.Fs
	if r == nil {
		fail(fmt.Errorf("without its body: %w", agentproto.ErrBadRequest))
		return
	}
	ir := fsInitRequest{Op: initFsOps[req.Op], Depth: r.Depth, Recursive: r.Recursive, Mode: r.Mode & 0o7777}
	var err error
	if ir.Path, err = fsPath(r.Path); err != nil {
		fail(err)
		return
	}
	if req.Op == agentproto.OpFsMove {
		if ir.Dest, err = fsPath(r.Dest); err != nil {
			fail(err)
			return
		}
	}
	if req.Op == agentproto.OpFsList && (r.Depth < 1 || r.Depth > agentproto.MaxListDepth) {
		fail(fmt.Errorf("depth %d: must be 1 to %d: %w", r.Depth, agentproto.MaxListDepth, agentproto.ErrBadRequest))
		return
	}
	if r.Mode > 0o7777 || r.MaxBytes < 0 {
		fail(fmt.Errorf("mode or max_bytes out of range: %w", agentproto.ErrBadRequest))
		return
	}
	sb, err := m.get(r.Sandbox)
	if err != nil {
		fail(err)
		return
	}
	if err := sb.begin(); err != nil {
		fail(err)
		return
	}
	if req.Op == agentproto.OpFsWatch {
		// A watch is not activity: it must not hold off the idle timeout.
		sb.end()
	} else {
		defer sb.end()
	}
	ctx, cancel := context.WithTimeout(context.Background(), initFileTimeout)
	c, err := dialInit(ctx, sb)
	cancel()
	if err != nil {
		fail(err)
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(initFileTimeout))
	if err := sendInit(c, initRequest{Op: sandboxinit.OpFs, Fs: &ir}); err != nil {
		fail(err)
		return
	}
	var first fsReply
	fds, err := recvInit(c, &first)
	if err == nil {
		err = fsReplyError(first)
	}
	if err != nil || req.Op != agentproto.OpFsArchive {
		closeFDs(fds)
		fds = nil
	}
	if err != nil {
		fail(fmt.Errorf("sandbox init: %w", err))
		return
	}
	switch req.Op {
	case agentproto.OpFsList:
		m.relayList(st, c, ir, first)
	case agentproto.OpFsArchive:
		limit := m.cfg.MaxFileBytes
		if r.MaxBytes > 0 {
			limit = min(limit, r.MaxBytes)
		}
		m.relayArchive(st, c, ir.Path, limit, first, fds)
	case agentproto.OpFsWatch:
		c.SetDeadline(time.Time{})
		m.relayWatch(st, c, ir.Path, first)
	default:
		res := &agentproto.FsResult{Created: first.Created && req.Op == agentproto.OpFsMkdir}
		if first.Entry != nil {
			if err := agentproto.CheckFsEntry(*first.Entry); err != nil {
				fail(err)
				return
			}
			res.Entry = first.Entry
		}
		if res.Entry == nil && req.Op != agentproto.OpFsRemove {
			fail(fmt.Errorf("sandbox init sent no entry: %w", agentproto.ErrRemote))
			return
		}
		agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version, Fs: res})
	}
}

// fsPath is sandboxPath, within agentproto's path bounds.
func fsPath(p string) (string, error) {
	p, err := sandboxPath(p)
	if err != nil {
		return "", err
	}
	if !agentproto.CleanFsPath(p) {
		return "", fmt.Errorf("path %.64q: %w", p, agentproto.ErrBadRequest)
	}
	return p, nil
}

// recvFsReply reads one fsReply; a refusal comes back as its error. Any
// descriptor it carried is closed.
func recvFsReply(c *net.UnixConn, rep *fsReply) error {
	fds, err := recvInit(c, rep)
	closeFDs(fds)
	if err != nil {
		return fmt.Errorf("sandbox init: %w", err)
	}
	return fsReplyError(*rep)
}

func fsReplyError(rep fsReply) error {
	switch rep.Code {
	case "":
		return nil
	case agentproto.CodeConflict:
		return &initError{msg: rep.Error, sentinel: agentproto.ErrConflict}
	}
	return initFileError(initReply{Code: rep.Code, Error: rep.Error})
}

// under reports whether p is top or below it, at most depth levels.
func under(top, p string, depth int) bool {
	rel := p
	if top != "/" {
		if !strings.HasPrefix(p, top+"/") {
			return false
		}
		rel = p[len(top):]
	}
	n := strings.Count(rel, "/")
	return n >= 1 && n <= depth
}

// relayList forwards fs.list's batches, checked and counted.
func (m *Manager) relayList(st net.Conn, c *net.UnixConn, ir fsInitRequest, rep fsReply) {
	if err := agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version}); err != nil {
		return
	}
	n := 0
	for {
		chunk := agentproto.FsListChunk{Entries: rep.Entries, Truncated: rep.Truncated}
		for _, e := range rep.Entries {
			err := agentproto.CheckFsEntry(e)
			if err == nil && !under(ir.Path, e.Path, ir.Depth) {
				err = fmt.Errorf("entry %.64q outside the listed folder: %w", e.Path, agentproto.ErrRemote)
			}
			if n++; err == nil && n > agentproto.MaxListEntries {
				err = fmt.Errorf("over %d entries: %w", agentproto.MaxListEntries, agentproto.ErrRemote)
			}
			if err != nil {
				writeErrorFrame(st, fmt.Errorf("fs.list: sandbox init: %w", err))
				return
			}
		}
		if len(chunk.Entries) > 0 || chunk.Truncated {
			b, _ := json.Marshal(chunk)
			if err := agentproto.WriteFrame(st, agentproto.ChannelData, b); err != nil {
				return
			}
		}
		if !rep.More {
			agentproto.WriteFrame(st, agentproto.ChannelData, nil)
			return
		}
		c.SetDeadline(time.Now().Add(initFileTimeout))
		rep = fsReply{}
		if err := recvFsReply(c, &rep); err != nil {
			writeErrorFrame(st, fmt.Errorf("fs.list: %w", err))
			return
		}
	}
}

func writeErrorFrame(st net.Conn, err error) {
	b, _ := json.Marshal(agentproto.ErrorFor(err))
	agentproto.WriteFrame(st, agentproto.ChannelError, b)
}

// frameWriter writes ChannelData frames and counts the bytes, failing
// past limit.
type frameWriter struct {
	st    net.Conn
	n     int64
	limit int64
}

func (w *frameWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	if w.n > w.limit {
		return 0, fmt.Errorf("archive over %d bytes: %w", w.limit, agentproto.ErrFileTooLarge)
	}
	done := 0
	for len(p) > 0 {
		k := min(len(p), 32<<10)
		if err := agentproto.WriteFrame(w.st, agentproto.ChannelData, p[:k]); err != nil {
			return done, errHostGone
		}
		done += k
		p = p[k:]
	}
	return done, nil
}

var errHostGone = errors.New("the host closed the stream")

// relayArchive writes the entries init sends as a tar stream of top.
func (m *Manager) relayArchive(st net.Conn, c *net.UnixConn, top string, limit int64, first fsReply, fds []int) {
	if err := agentproto.WriteMessage(st, agentproto.Response{V: agentproto.Version}); err != nil {
		closeFDs(fds)
		return
	}
	fw := &frameWriter{st: st, limit: limit}
	tw := tar.NewWriter(fw)
	err := func() error {
		links := map[string]bool{}
		rep := first
		for n := 0; ; n++ {
			if rep.Done {
				return tw.Close()
			}
			if rep.Entry == nil || n >= agentproto.MaxArchiveEntries {
				closeFDs(fds)
				return fmt.Errorf("sandbox init sent no entry, or too many: %w", agentproto.ErrRemote)
			}
			err := archiveEntry(tw, top, *rep.Entry, fds, links)
			closeFDs(fds)
			if err != nil {
				return err
			}
			c.SetDeadline(time.Now().Add(initFileTimeout))
			if err := sendInit(c, fsAck{Next: true}); err != nil {
				return fmt.Errorf("sandbox init: %w", err)
			}
			rep = fsReply{}
			fds, err = recvInit(c, &rep)
			if err != nil {
				return fmt.Errorf("sandbox init: %w", err)
			}
			if err := fsReplyError(rep); err != nil {
				closeFDs(fds)
				return err
			}
		}
	}()
	if errors.Is(err, errHostGone) {
		return
	}
	if err != nil {
		writeErrorFrame(st, fmt.Errorf("fs.archive %s: %w", top, err))
		return
	}
	agentproto.WriteFrame(st, agentproto.ChannelData, nil)
}

// archiveEntry writes one entry: its name relative to top (a top that is
// not a folder is named by its last element). Nothing may sit below a
// link the archive holds, and a file's bytes come from the descriptor,
// checked here, as many as its own fstat says.
func archiveEntry(tw *tar.Writer, top string, e agentproto.FsEntry, fds []int, links map[string]bool) error {
	bad := func(why string) error {
		return fmt.Errorf("sandbox init sent %.64q: %s: %w", e.Path, why, agentproto.ErrRemote)
	}
	if err := agentproto.CheckFsEntry(e); err != nil {
		return err
	}
	var name string
	switch {
	case e.Path == top:
		if e.Type == agentproto.FsDir {
			return bad("the folder itself")
		}
		name = e.Name
	case under(top, e.Path, agentproto.MaxFsPathLen):
		name = strings.TrimPrefix(strings.TrimPrefix(e.Path, top), "/")
	default:
		return bad("outside the archived folder")
	}
	for d := path.Dir(name); d != "."; d = path.Dir(d) {
		if links[d] {
			return bad("below a link")
		}
	}
	hdr := &tar.Header{Name: name, Mode: int64(e.Mode), ModTime: e.Modified, Uid: int(e.UID), Gid: int(e.GID),
		Uname: e.Owner, Gname: e.Group, Format: tar.FormatPAX}
	switch e.Type {
	case agentproto.FsDir:
		if len(fds) != 0 {
			return bad("a folder with a descriptor")
		}
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		return tw.WriteHeader(hdr)
	case agentproto.FsSymlink:
		if len(fds) != 0 {
			return bad("a link with a descriptor")
		}
		links[name] = true
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.SymlinkTarget
		return tw.WriteHeader(hdr)
	case agentproto.FsFile:
		if len(fds) != 1 {
			return bad("a file without its descriptor")
		}
		fst, err := checkRegular(fds[0], e.Path)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, fst.Size
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		// The descriptor stays the caller's to close.
		k, err := io.Copy(tw, io.NewSectionReader(fileReaderAt{fds[0]}, 0, fst.Size))
		if err != nil {
			return err
		}
		if k < fst.Size { // it shrank meanwhile: pad, as announced
			_, err = io.CopyN(tw, zeros{}, fst.Size-k)
		}
		return err
	}
	return bad("not a file, folder or link")
}

// fileReaderAt reads a descriptor it does not own.
type fileReaderAt struct{ fd int }

func (f fileReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := unix.Pread(f.fd, p, off)
	if n == 0 && err == nil && len(p) > 0 {
		return 0, io.EOF
	}
	if n < 0 {
		n = 0
	}
	return n, err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
