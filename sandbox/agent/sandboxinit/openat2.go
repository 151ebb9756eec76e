package sandboxinit

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Paths in a sandbox are resolved with openat2 below its root (see
// sandbox/agent files.go): init opens files with these, and the agent
// checks what init hands over with checkRegular.

// resolveFlags are the openat2 rules for every path in a sandbox.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

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
