// Package sandboxinit is PID 1 inside each sandbox's crun container
// (`stockade-agent sandbox-init`): it spawns commands in place, with pipes
// or a terminal, and opens files for the agent with openat2 below the
// sandbox's root, as the sandbox user (see sandbox/agent doc.go). It
// serves the init protocol (initproto.go), whose client is the agent
// (sandbox/agent); this file is what the agent uses of it.
package sandboxinit

import (
	"net"

	"golang.org/x/sys/unix"
)

// The init protocol's messages (initproto.go).
type (
	Request      = initRequest
	FileRequest  = fileRequest
	FileCommit   = fileCommit
	SpawnRequest = spawnRequest
	Reply        = initReply
	Control      = initControl
	Exit         = initExit
	FsRequest    = fsRequest
	FsReply      = fsReply
	FsAck        = fsAck
)

// ErrEOF: the peer closed the connection.
var ErrEOF = errEOF

// The init protocol's operations and fileRequest.Op values.
const (
	OpHello    = initOpHello
	OpSpawn    = initOpSpawn
	OpFile     = initOpFile
	FileRead   = fileRead
	FileWrite  = fileWrite
	FileAppend = fileAppend
	OpFs       = initOpFs
	FsStat     = fsStat
	FsList     = fsList
	FsMkdir    = fsMkdir
	FsRemove   = fsRemove
	FsMove     = fsMove
	FsChmod    = fsChmod
	FsWatch    = fsWatch
	FsArchive  = fsArchive
)

const (
	// MaxPathLen bounds a path or working directory from the host.
	MaxPathLen = maxPathLen
	// WorkspaceDir is the sandbox's workspace, commands' default folder.
	WorkspaceDir = workspaceDir
	// DefaultPath is the PATH of commands that set none.
	DefaultPath = defaultPath
)

const (
	maxPathLen   = 4096
	workspaceDir = "/workspace"
)

// Send writes v as one message, with fds attached.
func Send(c *net.UnixConn, v any, fds ...int) error { return sendInit(c, v, fds...) }

// Recv reads one message into v and returns the descriptors it carried.
func Recv(c *net.UnixConn, v any) ([]int, error) { return recvInit(c, v) }

// CloseFDs closes descriptors a message carried.
func CloseFDs(fds []int) { closeFDs(fds) }

// CheckRegular fails unless fd is a regular file outside the kernel's file
// systems; it returns its status.
func CheckRegular(fd int, p string) (unix.Stat_t, error) { return checkRegular(fd, p) }

// FileError maps errno to the agent protocol's sentinels.
func FileError(p string, err error) error { return fileError(p, err) }

// MergeEnv returns base with extra applied: a later KEY= replaces an
// earlier one.
func MergeEnv(base, extra []string) []string { return mergeEnv(base, extra) }

// StartWithoutASLR runs start on a thread without address randomization
// (personality.go).
func StartWithoutASLR[T any](start func() (T, error)) (T, error) { return startWithoutASLR(start) }
