package sandboxinit

import (
	"fmt"
	"net"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// file serves one initOpFile for the agent: it opens the file with this
// process's credentials (the sandbox user's) below o.Root and sends the
// descriptor; a fileWrite then waits for its commit.
func (si *sandboxInit) file(c *net.UnixConn, req *fileRequest) {
	fail := func(err error) {
		sendInit(c, initReply{Code: agentproto.ErrorFor(err).Code, Error: err.Error()})
	}
	p := req.Path
	if p == "" || len(p) > maxPathLen || strings.ContainsRune(p, 0) || !path.IsAbs(p) || path.Clean(p) != p {
		fail(fmt.Errorf("file %q: %w", p, agentproto.ErrBadRequest))
		return
	}
	mode := req.Mode & 0o777
	root, err := unix.Open(si.o.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		fail(fmt.Errorf("open the sandbox root: %w", err))
		return
	}
	defer unix.Close(root)

	switch req.Op {
	case fileRead:
		f, err := openRegular(root, p, unix.O_RDONLY, 0)
		if err != nil {
			fail(err)
			return
		}
		defer f.Close()
		sendInit(c, initReply{}, int(f.Fd()))
	case fileAppend:
		parent, err := mkdirAllInRoot(root, path.Dir(p))
		if err != nil {
			fail(err)
			return
		}
		unix.Close(parent)
		f, err := openAppend(root, p, mode)
		if err != nil {
			fail(err)
			return
		}
		defer f.Close()
		sendInit(c, initReply{}, int(f.Fd()))
	case fileWrite:
		dir, base := path.Split(p)
		if base == "" || base == "." || base == ".." {
			fail(fmt.Errorf("file %s: not a file name: %w", p, agentproto.ErrBadRequest))
			return
		}
		parent, err := mkdirAllInRoot(root, dir)
		if err != nil {
			fail(err)
			return
		}
		defer unix.Close(parent)
		tmp, f, err := createTemp(parent, p, mode)
		if err != nil {
			fail(err)
			return
		}
		committed := false
		defer func() {
			if !committed {
				unix.Unlinkat(parent, tmp, 0)
			}
		}()
		err = sendInit(c, initReply{}, int(f.Fd()))
		f.Close() // the agent writes through its own copy
		if err != nil {
			return
		}
		// The bytes take as long as the host takes to send them: no
		// deadline; the agent closing first is an abort.
		var cm fileCommit
		fds, err := recvInit(c, &cm)
		closeFDs(fds)
		if err != nil {
			return
		}
		if !cm.Commit {
			unix.Unlinkat(parent, tmp, 0)
			sendInit(c, initReply{})
			return
		}
		if err := unix.Renameat(parent, tmp, parent, base); err != nil {
			fail(fileError(p, err))
			return
		}
		committed = true
		sendInit(c, initReply{})
	default:
		fail(fmt.Errorf("file op %q: %w", req.Op, agentproto.ErrBadRequest))
	}
}
