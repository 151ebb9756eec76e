package agent

import (
	"net"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agent/sandboxinit"
)

// The agent is the client of each sandbox's init (sandbox/agent/sandboxinit):
// its protocol and the helpers both share, under the names this package's
// files use.

type (
	initRequest  = sandboxinit.Request
	fileRequest  = sandboxinit.FileRequest
	fileCommit   = sandboxinit.FileCommit
	spawnRequest = sandboxinit.SpawnRequest
	initReply    = sandboxinit.Reply
	initControl  = sandboxinit.Control
	initExit     = sandboxinit.Exit
)

const (
	initOpHello = sandboxinit.OpHello
	initOpSpawn = sandboxinit.OpSpawn
	initOpFile  = sandboxinit.OpFile
	fileRead    = sandboxinit.FileRead
	fileWrite   = sandboxinit.FileWrite
	fileAppend  = sandboxinit.FileAppend
	defaultPath = sandboxinit.DefaultPath
)

var errInitEOF = sandboxinit.ErrEOF

func sendInit(c *net.UnixConn, v any, fds ...int) error { return sandboxinit.Send(c, v, fds...) }

func recvInit(c *net.UnixConn, v any) ([]int, error) { return sandboxinit.Recv(c, v) }

func closeFDs(fds []int) { sandboxinit.CloseFDs(fds) }

func checkRegular(fd int, p string) (unix.Stat_t, error) { return sandboxinit.CheckRegular(fd, p) }

func fileError(p string, err error) error { return sandboxinit.FileError(p, err) }

func mergeEnv(base, extra []string) []string { return sandboxinit.MergeEnv(base, extra) }

func startWithoutASLR[T any](start func() (T, error)) (T, error) {
	return sandboxinit.StartWithoutASLR(start)
}
