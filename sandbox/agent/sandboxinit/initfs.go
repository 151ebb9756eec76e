package sandboxinit

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// The file system ops of the init protocol ("fs", fsRequest): init runs
// them with its own credentials (the sandbox user's), every path resolved
// below o.Root with openat2 (openInRoot) and every step below a folder it
// opened relative to that folder without following links, so nothing
// leaves the root. Unary ops answer one fsReply. fs list answers fsReply
// messages with Entries and More until one without More. fs archive sends
// one fsReply per entry (a regular file's descriptor attached) and waits
// for an fsAck after each; the last has Done. fs watch is in initwatch.go.

// fsRequest.Op values.
const (
	fsStat    = "stat"
	fsList    = "list"
	fsMkdir   = "mkdir"
	fsRemove  = "remove"
	fsMove    = "move"
	fsChmod   = "chmod"
	fsWatch   = "watch"
	fsArchive = "archive"
)

type fsRequest struct {
	Op string `json:"op"`
	// Path and Dest are absolute in the sandbox and clean.
	Path      string `json:"path"`
	Dest      string `json:"dest,omitempty"`
	Depth     int    `json:"depth,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
}

type fsReply struct {
	// Code is an agentproto error code when the op failed.
	Code      string               `json:"code,omitempty"`
	Error     string               `json:"error,omitempty"`
	Entry     *agentproto.FsEntry  `json:"entry,omitempty"`
	Created   bool                 `json:"created,omitempty"`
	Entries   []agentproto.FsEntry `json:"entries,omitempty"`
	Events    []agentproto.FsEvent `json:"events,omitempty"`
	More      bool                 `json:"more,omitempty"`
	Truncated bool                 `json:"truncated,omitempty"`
	Done      bool                 `json:"done,omitempty"`
}

// fsAck asks fs archive for its next entry.
type fsAck struct {
	Next bool `json:"next"`
}

// maxFsBatch bounds the JSON of one list message, under maxInitMessage.
const maxFsBatch = 128 << 10

func fsFail(c *net.UnixConn, err error) {
	sendInit(c, fsReply{Code: agentproto.ErrorFor(err).Code, Error: err.Error()})
}

// fs serves one fsRequest.
func (si *sandboxInit) fs(c *net.UnixConn, req *fsRequest) {
	for _, p := range []string{req.Path, req.Dest} {
		if p == "" && req.Op != fsMove {
			continue
		}
		if !agentproto.CleanFsPath(p) {
			fsFail(c, fmt.Errorf("path %.64q: %w", p, agentproto.ErrBadRequest))
			return
		}
	}
	if req.Path == "" {
		fsFail(c, fmt.Errorf("path: %w", agentproto.ErrBadRequest))
		return
	}
	root, err := unix.Open(si.o.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		fsFail(c, fmt.Errorf("open the sandbox root: %w", err))
		return
	}
	defer unix.Close(root)
	fx := &fsCtx{root: root, names: newNames(root)}
	switch req.Op {
	case fsStat:
		e, err := fx.statPath(req.Path)
		if err != nil {
			fsFail(c, err)
			return
		}
		sendInit(c, fsReply{Entry: &e})
	case fsMkdir:
		e, created, err := fx.mkdir(req.Path, req.Mode)
		if err != nil {
			fsFail(c, err)
			return
		}
		sendInit(c, fsReply{Entry: &e, Created: created})
	case fsRemove:
		if err := fx.remove(req.Path, req.Recursive); err != nil {
			fsFail(c, err)
			return
		}
		sendInit(c, fsReply{})
	case fsMove:
		e, err := fx.move(req.Path, req.Dest)
		if err != nil {
			fsFail(c, err)
			return
		}
		sendInit(c, fsReply{Entry: &e})
	case fsChmod:
		e, err := fx.chmod(req.Path, req.Mode)
		if err != nil {
			fsFail(c, err)
			return
		}
		sendInit(c, fsReply{Entry: &e})
	case fsList:
		fx.list(c, req.Path, req.Depth)
	case fsArchive:
		fx.archive(c, req.Path)
	case fsWatch:
		si.watch(c, fx, req.Path, req.Recursive)
	default:
		fsFail(c, fmt.Errorf("fs op %q: %w", req.Op, agentproto.ErrBadRequest))
	}
}

type fsCtx struct {
	root  int
	names *names
}

// splitParent opens the folder holding p (resolved in the root) and
// returns it with p's last element; the root itself has no parent.
func (fx *fsCtx) splitParent(p string) (int, string, error) {
	if p == "/" {
		return -1, "", fmt.Errorf("%s is the sandbox's root: %w", p, agentproto.ErrBadRequest)
	}
	dir, base := path.Split(p)
	fd, err := openInRoot(fx.root, path.Clean(dir), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", err
	}
	return fd, base, nil
}

// statPath reports p itself (a symlink as a symlink).
func (fx *fsCtx) statPath(p string) (agentproto.FsEntry, error) {
	if p == "/" {
		return fx.statAt(fx.root, "", p)
	}
	parent, base, err := fx.splitParent(p)
	if err != nil {
		return agentproto.FsEntry{}, err
	}
	defer unix.Close(parent)
	return fx.statAt(parent, base, p)
}

// statAt reports the entry name of the folder dir (name "" is dir itself),
// never following a link; p is its path in the sandbox.
func (fx *fsCtx) statAt(dir int, name, p string) (agentproto.FsEntry, error) {
	var st unix.Stat_t
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	if err := unix.Fstatat(dir, name, &st, flags); err != nil {
		return agentproto.FsEntry{}, fileError(p, err)
	}
	e := agentproto.FsEntry{
		Name: path.Base(p), Path: p, Size: st.Size, Mode: st.Mode & 0o7777, Permissions: agentproto.PermString(st.Mode),
		UID: st.Uid, GID: st.Gid, Owner: fx.names.user(st.Uid), Group: fx.names.group(st.Gid),
		Modified: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = agentproto.FsFile
	case unix.S_IFDIR:
		e.Type = agentproto.FsDir
	case unix.S_IFLNK:
		e.Type = agentproto.FsSymlink
		buf := make([]byte, agentproto.MaxFsPathLen)
		n, err := unix.Readlinkat(dir, name, buf)
		if err == nil && n < len(buf) && utf8.Valid(buf[:n]) {
			e.SymlinkTarget = string(buf[:n])
		}
	default:
		e.Type = agentproto.FsOther
	}
	return e, nil
}

// mkdir makes the folder p with its missing parents; a folder there
// already is no error (created false).
func (fx *fsCtx) mkdir(p string, mode uint32) (agentproto.FsEntry, bool, error) {
	if mode == 0 {
		mode = 0o755
	}
	mode &= 0o7777
	if fd, err := openInRoot(fx.root, p, unix.O_PATH, 0); err == nil {
		var st unix.Stat_t
		err := unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil {
			return agentproto.FsEntry{}, false, fileError(p, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return agentproto.FsEntry{}, false, fmt.Errorf("%s exists and is not a folder: %w", p, agentproto.ErrConflict)
		}
		e, err := fx.statPath(p)
		return e, false, err
	} else if !errors.Is(err, agentproto.ErrNotFound) {
		return agentproto.FsEntry{}, false, err
	}
	parent, err := mkdirAllInRoot(fx.root, path.Dir(p))
	if err != nil {
		return agentproto.FsEntry{}, false, err
	}
	defer unix.Close(parent)
	base := path.Base(p)
	created := true
	if err := unix.Mkdirat(parent, base, mode); err != nil {
		if !errors.Is(err, unix.EEXIST) {
			return agentproto.FsEntry{}, false, fileError(p, err)
		}
		created = false
	}
	if created {
		// The umask took bits off: set them exactly, on the folder made
		// (O_NOFOLLOW: a link planted meanwhile is not followed).
		fd, err := unix.Openat(parent, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return agentproto.FsEntry{}, false, fileError(p, err)
		}
		err = unix.Fchmod(fd, mode)
		unix.Close(fd)
		if err != nil {
			return agentproto.FsEntry{}, false, fileError(p, err)
		}
	}
	e, err := fx.statAt(parent, base, p)
	return e, created, err
}

// remove removes p (a link itself, never what it points at); a folder
// with entries only when recursive, and never past its file system.
func (fx *fsCtx) remove(p string, recursive bool) error {
	parent, base, err := fx.splitParent(p)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	var st unix.Stat_t
	if err := unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fileError(p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(parent, base, 0); err != nil {
			return fileError(p, err)
		}
		return nil
	}
	var pst unix.Stat_t
	if err := unix.Fstat(parent, &pst); err != nil {
		return fileError(p, err)
	}
	if pst.Dev != st.Dev {
		// /workspace, /tmp: emptying one and then failing to remove it
		// would change what the request was refused for.
		return fmt.Errorf("%s is a mount point: %w", p, agentproto.ErrConflict)
	}
	if !recursive {
		if err := unix.Unlinkat(parent, base, unix.AT_REMOVEDIR); err != nil {
			if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("%s is a folder with entries (remove it recursively): %w", p, agentproto.ErrConflict)
			}
			return fileError(p, err)
		}
		return nil
	}
	return removeAllAt(parent, base, p, st.Dev)
}

// removeAllAt removes the folder name of dir with everything in it that is
// on the device dev.
func removeAllAt(dir int, name, p string, dev uint64) error {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fileError(p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	for {
		names, rerr := f.Readdirnames(256)
		for _, n := range names {
			cp := path.Join(p, n)
			var st unix.Stat_t
			if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fileError(cp, err)
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if st.Dev != dev {
					return fmt.Errorf("%s is another file system's mount: %w", cp, agentproto.ErrConflict)
				}
				if err := removeAllAt(fd, n, cp, dev); err != nil {
					return err
				}
				continue
			}
			if err := unix.Unlinkat(fd, n, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				return fileError(cp, err)
			}
		}
		if rerr != nil {
			break
		}
		// Entries removed shift the folder's offsets: read from the start.
		if _, err := f.Seek(0, 0); err != nil {
			return fileError(p, err)
		}
		if len(names) == 0 {
			break
		}
	}
	if err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fileError(p, err)
	}
	return nil
}

// move renames src to dst (replacing a file there), making dst's missing
// parent folders once src is known to exist.
func (fx *fsCtx) move(src, dst string) (agentproto.FsEntry, error) {
	if dst == "/" {
		return agentproto.FsEntry{}, fmt.Errorf("destination %s is the sandbox's root: %w", dst, agentproto.ErrBadRequest)
	}
	if dst == src || strings.HasPrefix(dst, src+"/") {
		return agentproto.FsEntry{}, fmt.Errorf("%s cannot move into itself (%s): %w", src, dst, agentproto.ErrBadRequest)
	}
	sp, sbase, err := fx.splitParent(src)
	if err != nil {
		return agentproto.FsEntry{}, err
	}
	defer unix.Close(sp)
	var st unix.Stat_t
	if err := unix.Fstatat(sp, sbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return agentproto.FsEntry{}, fileError(src, err)
	}
	dp, err := mkdirAllInRoot(fx.root, path.Dir(dst))
	if err != nil {
		return agentproto.FsEntry{}, err
	}
	defer unix.Close(dp)
	dbase := path.Base(dst)
	if err := unix.Renameat(sp, sbase, dp, dbase); err != nil {
		if errors.Is(err, unix.EXDEV) {
			return agentproto.FsEntry{}, fmt.Errorf("%s and %s are on different file systems: %w", src, dst, agentproto.ErrBadRequest)
		}
		return agentproto.FsEntry{}, fileError(dst, err)
	}
	return fx.statAt(dp, dbase, dst)
}

// chmod sets p's permission bits (through a final link, which resolves in
// the root like any path).
func (fx *fsCtx) chmod(p string, mode uint32) (agentproto.FsEntry, error) {
	fd, err := openInRoot(fx.root, p, unix.O_PATH, 0)
	if err != nil {
		return agentproto.FsEntry{}, err
	}
	defer unix.Close(fd)
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return agentproto.FsEntry{}, fileError(p, err)
	}
	if kernelFS(int64(sfs.Type)) {
		return agentproto.FsEntry{}, fmt.Errorf("%s is a kernel interface, not a file: %w", p, agentproto.ErrBadRequest)
	}
	// An O_PATH descriptor takes no fchmod; its /proc link names exactly
	// the inode opened.
	if err := unix.Fchmodat(unix.AT_FDCWD, fdPath(fd), mode&0o7777, 0); err != nil {
		return agentproto.FsEntry{}, fileError(p, err)
	}
	e, err := fx.statAt(fd, "", p)
	if err != nil {
		return e, err
	}
	return e, nil
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// list sends the entries below p, depth levels deep (1: p's own), in
// batches; links are listed, not followed.
func (fx *fsCtx) list(c *net.UnixConn, p string, depth int) {
	if depth < 1 || depth > agentproto.MaxListDepth {
		fsFail(c, fmt.Errorf("depth %d: must be 1 to %d: %w", depth, agentproto.MaxListDepth, agentproto.ErrBadRequest))
		return
	}
	fd, err := openInRoot(fx.root, p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			err = fmt.Errorf("%s is not a folder: %w", p, agentproto.ErrBadRequest)
		}
		fsFail(c, err)
		return
	}
	w := &listWriter{c: c}
	err = fx.walk(fd, p, depth, func(dir int, name, cp string) (bool, error) {
		if w.n >= agentproto.MaxListEntries {
			w.truncated = true
			return false, errStopWalk
		}
		e, err := fx.statAt(dir, name, cp)
		if err != nil {
			return false, nil // gone meanwhile
		}
		return e.Type == agentproto.FsDir, w.add(e)
	})
	unix.Close(fd)
	if err != nil && !errors.Is(err, errStopWalk) {
		fsFail(c, err)
		return
	}
	w.flush(false)
}

var errStopWalk = errors.New("stop walking")

// walk calls visit for each entry of the folder fd (path p), sorted by
// name, and descends into those visit says are folders, depth levels
// deep, opening each relative to its parent without following links.
// Names that are not valid text are skipped (the API speaks JSON).
func (fx *fsCtx) walk(fd int, p string, depth int, visit func(dir int, name, cp string) (bool, error)) error {
	dup, err := unix.Dup(fd)
	if err != nil {
		return fileError(p, err)
	}
	f := os.NewFile(uintptr(dup), p)
	names, err := f.Readdirnames(agentproto.MaxListEntries + 1)
	f.Close()
	if err != nil && len(names) == 0 {
		return nil // empty (io.EOF) or unreadable
	}
	slices.Sort(names)
	for _, n := range names {
		if !utf8.ValidString(n) || strings.ContainsRune(n, '\n') {
			continue
		}
		cp := path.Join(p, n)
		isDir, err := visit(fd, n, cp)
		if err != nil {
			return err
		}
		if !isDir || depth <= 1 {
			continue
		}
		sub, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // unreadable or gone: listed, not entered
		}
		err = fx.walk(sub, cp, depth-1, visit)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

// listWriter batches list entries into messages.
type listWriter struct {
	c         *net.UnixConn
	batch     []agentproto.FsEntry
	size      int
	n         int
	truncated bool
}

func (w *listWriter) add(e agentproto.FsEntry) error {
	sz := len(e.Path) + len(e.Name) + len(e.SymlinkTarget) + len(e.Owner) + len(e.Group) + 256
	if w.size+sz > maxFsBatch {
		if err := w.flush(true); err != nil {
			return err
		}
	}
	w.batch = append(w.batch, e)
	w.size += sz
	w.n++
	return nil
}

func (w *listWriter) flush(more bool) error {
	err := sendInit(w.c, fsReply{Entries: w.batch, More: more, Truncated: w.truncated && !more})
	w.batch, w.size = nil, 0
	return err
}

// archive sends the entries below p (or p itself when it is not a folder)
// one by one, each regular file with its descriptor, waiting for an fsAck
// after each. Links are sent as links; FIFOs, sockets, devices and the
// kernel's file systems are left out.
func (fx *fsCtx) archive(c *net.UnixConn, p string) {
	top, err := fx.statPath(p)
	if err != nil {
		fsFail(c, err)
		return
	}
	send := func(dir int, name string, e agentproto.FsEntry) error {
		var fds []int
		if e.Type == agentproto.FsFile {
			fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil // unreadable for the sandbox user, or gone: left out
			}
			defer unix.Close(fd)
			fds = []int{fd}
		}
		if err := sendInit(c, fsReply{Entry: &e}, fds...); err != nil {
			return err
		}
		var ack fsAck
		got, err := recvInit(c, &ack)
		closeFDs(got)
		if err != nil || !ack.Next {
			return errStopWalk
		}
		return nil
	}
	if top.Type != agentproto.FsDir {
		if top.Type == agentproto.FsFile || top.Type == agentproto.FsSymlink {
			parent, base, err := fx.splitParent(p)
			if err != nil {
				fsFail(c, err)
				return
			}
			err = send(parent, base, top)
			unix.Close(parent)
			if err != nil {
				return
			}
		}
		sendInit(c, fsReply{Done: true})
		return
	}
	fd, err := openInRoot(fx.root, p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		fsFail(c, err)
		return
	}
	defer unix.Close(fd)
	n := 0
	err = fx.walk(fd, p, agentproto.MaxFsPathLen/2, func(dir int, name, cp string) (bool, error) {
		if n++; n > agentproto.MaxArchiveEntries {
			return false, fmt.Errorf("%s: over %d entries: %w", p, agentproto.MaxArchiveEntries, agentproto.ErrFileTooLarge)
		}
		e, err := fx.statAt(dir, name, cp)
		if err != nil || e.Type == agentproto.FsOther {
			return false, nil
		}
		if e.Type == agentproto.FsDir && !fx.plainDir(dir, name) {
			return false, nil
		}
		return e.Type == agentproto.FsDir, send(dir, name, e)
	})
	if errors.Is(err, errStopWalk) {
		return
	}
	if err != nil {
		fsFail(c, err)
		return
	}
	sendInit(c, fsReply{Done: true})
}

// plainDir reports whether the folder name of dir is not on one of the
// kernel's file systems.
func (fx *fsCtx) plainDir(dir int, name string) bool {
	fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var sfs unix.Statfs_t
	return unix.Fstatfs(fd, &sfs) == nil && !kernelFS(int64(sfs.Type))
}

// names maps uids and gids to the names the sandbox's own /etc/passwd and
// /etc/group give them, read once per request (the numbers otherwise).
type names struct {
	root          int
	users, groups map[uint32]string
}

func newNames(root int) *names { return &names{root: root} }

func (n *names) user(id uint32) string {
	if n.users == nil {
		n.users = readIDFile(n.root, "/etc/passwd")
	}
	return nameOr(n.users, id)
}

func (n *names) group(id uint32) string {
	if n.groups == nil {
		n.groups = readIDFile(n.root, "/etc/group")
	}
	return nameOr(n.groups, id)
}

func nameOr(m map[uint32]string, id uint32) string {
	if s, ok := m[id]; ok {
		return s
	}
	return strconv.FormatUint(uint64(id), 10)
}

// readIDFile reads name:x:id lines of a passwd or group file in the root
// (at most 1 MiB; names within MaxFsUserLen).
func readIDFile(root int, p string) map[uint32]string {
	m := map[uint32]string{}
	f, err := openRegular(root, p, unix.O_RDONLY, 0)
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(&limitedFile{f: f, left: 1 << 20})
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), ":", 4)
		if len(fields) < 3 || len(fields[0]) > agentproto.MaxFsUserLen || !utf8.ValidString(fields[0]) {
			continue
		}
		id, err := strconv.ParseUint(fields[2], 10, 32)
		if err != nil {
			continue
		}
		if _, ok := m[uint32(id)]; !ok {
			m[uint32(id)] = fields[0]
		}
	}
	return m
}

type limitedFile struct {
	f    *os.File
	left int
}

func (l *limitedFile) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errors.New("file over its bound")
	}
	p = p[:min(len(p), l.left)]
	n, err := l.f.Read(p)
	l.left -= n
	return n, err
}
