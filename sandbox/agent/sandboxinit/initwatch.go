package sandboxinit

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// watch serves fs watch: inotify on the folder p (and, recursive, every
// folder below it, new ones too, up to MaxWatchDirs), inside the sandbox's
// mount namespace. Each folder is opened in the root first and watched
// through its descriptor's /proc link, so a watch lands on exactly the
// folder resolved. Init answers fsReply{} once it watches, then fsReply
// messages with Events, until the agent closes the connection or the
// watched folder goes (an error reply).
func (si *sandboxInit) watch(c *net.UnixConn, fx *fsCtx, p string, recursive bool) {
	ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		fsFail(c, fmt.Errorf("watch %s: %w", p, fileError(p, err)))
		return
	}
	in := os.NewFile(uintptr(ifd), "inotify")
	defer in.Close()
	w := &watcher{fx: fx, ifd: ifd, top: p, recursive: recursive, dirs: map[int32]string{}}
	if err := w.add(""); err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			err = fmt.Errorf("%s is not a folder: %w", p, agentproto.ErrBadRequest)
		}
		fsFail(c, err)
		return
	}
	if recursive {
		if err := w.addBelow(""); err != nil {
			fsFail(c, err)
			return
		}
	}
	if err := sendInit(c, fsReply{}); err != nil {
		return
	}
	// The agent closing the connection ends the watch.
	go func() {
		var ignored fsAck
		for {
			fds, err := recvInit(c, &ignored)
			closeFDs(fds)
			if err != nil {
				in.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := in.Read(buf)
		if err != nil {
			return
		}
		evs, gone := w.parse(buf[:n])
		for len(evs) > 0 {
			k := min(len(evs), agentproto.MaxWatchBatch)
			if err := sendInit(c, fsReply{Events: evs[:k]}); err != nil {
				return
			}
			evs = evs[k:]
		}
		if gone {
			fsFail(c, fmt.Errorf("watched folder %s was removed or moved: %w", p, agentproto.ErrNotFound))
			return
		}
	}
}

type watcher struct {
	fx        *fsCtx
	ifd       int
	top       string
	recursive bool
	// dirs maps a watch descriptor to its folder, relative to top ("" is top).
	dirs map[int32]string
}

const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// add watches the folder rel (relative to top).
func (w *watcher) add(rel string) error {
	if len(w.dirs) >= agentproto.MaxWatchDirs {
		return fmt.Errorf("watch %s: over %d folders: %w", w.top, agentproto.MaxWatchDirs, agentproto.ErrExhausted)
	}
	p := path.Join(w.top, rel)
	flags := unix.O_PATH | unix.O_DIRECTORY
	if rel != "" {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := openInRoot(w.fx.root, p, flags, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return fileError(p, err)
	}
	if kernelFS(int64(sfs.Type)) {
		return fmt.Errorf("%s is a kernel interface: %w", p, agentproto.ErrBadRequest)
	}
	wd, err := unix.InotifyAddWatch(w.ifd, fdPath(fd), watchMask)
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("watch %s: the guest's inotify watches are used up: %w", p, agentproto.ErrExhausted)
		}
		return fileError(p, err)
	}
	w.dirs[int32(wd)] = rel
	return nil
}

// addBelow watches every folder below rel (links not followed).
func (w *watcher) addBelow(rel string) error {
	p := path.Join(w.top, rel)
	fd, err := openInRoot(w.fx.root, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil // gone meanwhile
	}
	defer unix.Close(fd)
	return w.fx.walk(fd, p, agentproto.MaxFsPathLen/2, func(dir int, name, cp string) (bool, error) {
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return false, nil
		}
		r := strings.TrimPrefix(strings.TrimPrefix(cp, w.top), "/")
		if err := w.add(r); err != nil {
			if errors.Is(err, agentproto.ErrExhausted) {
				return false, err
			}
			return false, nil
		}
		return true, nil
	})
}

// parse turns inotify records into events; gone says the top folder went.
func (w *watcher) parse(b []byte) (evs []agentproto.FsEvent, gone bool) {
	for len(b) >= unix.SizeofInotifyEvent {
		raw := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		size := unix.SizeofInotifyEvent + int(raw.Len)
		if size > len(b) {
			break
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:size]), "\x00")
		b = b[size:]
		mask := raw.Mask
		if mask&unix.IN_Q_OVERFLOW != 0 {
			evs = append(evs, agentproto.FsEvent{Type: agentproto.FsEventOverflow})
			continue
		}
		dir, ok := w.dirs[raw.Wd]
		if !ok {
			continue
		}
		if mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, raw.Wd)
			if dir == "" {
				gone = true
			}
			continue
		}
		if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
			if dir == "" {
				gone = true
			}
			continue
		}
		if name == "" {
			continue
		}
		rel := path.Join(dir, name)
		var typ string
		switch {
		case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			typ = agentproto.FsEventCreate
		case mask&unix.IN_MODIFY != 0:
			typ = agentproto.FsEventWrite
		case mask&unix.IN_DELETE != 0:
			typ = agentproto.FsEventRemove
		case mask&unix.IN_MOVED_FROM != 0:
			typ = agentproto.FsEventRename
		case mask&unix.IN_ATTRIB != 0:
			typ = agentproto.FsEventChmod
		default:
			continue
		}
		evs = append(evs, agentproto.FsEvent{Name: rel, Type: typ})
		if w.recursive && mask&unix.IN_ISDIR != 0 && mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
			if err := w.add(rel); err == nil {
				w.addBelow(rel)
			} else if errors.Is(err, agentproto.ErrExhausted) {
				evs = append(evs, agentproto.FsEvent{Type: agentproto.FsEventOverflow})
			}
		}
	}
	return evs, gone
}
