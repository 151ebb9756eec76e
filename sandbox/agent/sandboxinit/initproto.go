package sandboxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// The agent and each sandbox's init talk over a SOCK_SEQPACKET unix socket
// whose listener the agent makes and hands to crun (--preserve-fds), so
// nothing inside the sandbox has a path to it. One message is one JSON
// object, possibly carrying file descriptors. Every connection starts with
// an initRequest:
//
//   - "hello": init answers initReply{PID} and keeps the connection open; it
//     reads EOF when init dies, which is how the agent learns it.
//   - "spawn": init starts a command and answers initReply{PID} with the
//     agent's ends of its stdio (stdin writer or none, stdout and stderr
//     readers; or a terminal's master) as SCM_RIGHTS. Then the agent may send
//     initControl messages (signals); init sends one initExit when the
//     command ends, then closes. If the agent closes first, init kills the
//     command's process group. With spawnRequest.Reuse, init stops reading
//     controls once the command ended and, when initExit.Reuse says so,
//     the connection takes another request after the exit (a message
//     without an op there is a late control of the ended command, and is
//     dropped); between requests either side may close it, so the agent
//     dials anew when a reused connection turns out closed.
//   - "file": init opens a file for the agent (fileRequest), resolved in
//     the sandbox's own mount namespace with the sandbox user's
//     credentials (its own), and answers initReply with the descriptor.
//     For fileWrite the descriptor is a new file beside the target: init
//     then waits for one fileCommit and renames it over the target, or
//     removes it, and answers initReply; it removes it as well when the
//     agent closes first.

const (
	initOpHello = "hello"
	initOpSpawn = "spawn"
	initOpFile  = "file"
	initOpFs    = "fs" // file system ops: initfs.go
	// maxInitMessage bounds one message (argv and env included).
	maxInitMessage = 256 << 10
	// maxInitFDs bounds the descriptors one message may carry.
	maxInitFDs = 3
)

type initRequest struct {
	Op    string        `json:"op"`
	Spawn *spawnRequest `json:"spawn,omitempty"`
	File  *fileRequest  `json:"file,omitempty"`
	Fs    *fsRequest    `json:"fs,omitempty"`
}

// fileRequest.Op values.
const (
	fileRead   = "read"   // open for reading
	fileWrite  = "write"  // a new file to rename over Path on commit
	fileAppend = "append" // open for appending, made when missing
)

type fileRequest struct {
	Op string `json:"op"`
	// Path is absolute in the sandbox and clean.
	Path string `json:"path"`
	// Mode of a file made (permission bits, no umask).
	Mode uint32 `json:"mode,omitempty"`
}

// fileCommit ends a fileWrite: Commit renames the new file over the
// target; anything else removes it.
type fileCommit struct {
	Commit bool `json:"commit"`
}

type spawnRequest struct {
	Argv  []string           `json:"argv"`
	Env   []string           `json:"env,omitempty"`
	Dir   string             `json:"dir,omitempty"`
	Stdin bool               `json:"stdin,omitempty"`
	TTY   bool               `json:"tty,omitempty"`
	Size  agentproto.Winsize `json:"size,omitempty"`
	// Reuse asks for the connection to take another request after the
	// exit (an init that does not know it closes it, and says no Reuse).
	Reuse bool `json:"reuse,omitempty"`
}

type initReply struct {
	PID int `json:"pid,omitempty"`
	// Code is an agentproto error code when the request failed.
	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
}

type initControl struct {
	Signal int `json:"signal"`
}

type initExit struct {
	Code   int `json:"code"`
	Signal int `json:"signal,omitempty"`
	// Reuse: the connection takes another request (spawnRequest.Reuse).
	Reuse bool `json:"reuse,omitempty"`
}

// errTruncated: a message over maxInitMessage.
var errTruncated = errors.New("init message over the size bound")

// sendInit writes v as one message, with fds attached.
func sendInit(c *net.UnixConn, v any, fds ...int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode init message: %w", err)
	}
	if len(b) > maxInitMessage {
		return fmt.Errorf("send init message: %w", errTruncated)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("send init message: %w", err)
	}
	return nil
}

// recvInit reads one message into v and returns the descriptors it carried
// (close-on-exec). EOF arrives as io.EOF-like net errors.
func recvInit(c *net.UnixConn, v any) ([]int, error) {
	// A buffer the size of the message, not of the bound: a connection
	// waiting (every sandbox's hello, and the agent's end of it) holds no
	// 256 KiB buffer, and a command's spawn touches a few KiB.
	size, err := nextMessageSize(c)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, min(size, maxInitMessage)+1)
	oob := make([]byte, unix.CmsgSpace(4*maxInitFDs)+64)
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	fds, ferr := parseRights(oob[:oobn])
	if n == 0 && oobn == 0 {
		return nil, fmt.Errorf("recv init message: %w", errEOF)
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n > maxInitMessage || len(fds) > maxInitFDs {
		closeFDs(fds)
		return nil, fmt.Errorf("recv init message: %w", errTruncated)
	}
	if ferr != nil {
		closeFDs(fds)
		return nil, fmt.Errorf("recv init message: %w", ferr)
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		closeFDs(fds)
		return nil, fmt.Errorf("decode init message: %w", err)
	}
	return fds, nil
}

// errEOF: the peer closed the connection (a zero-length seqpacket read).
var errEOF = errors.New("connection closed")

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// nextMessageSize waits for the next message and returns its length
// without reading it (MSG_PEEK|MSG_TRUNC answers a seqpacket message's
// full length); read deadlines apply. 0 is end of file, or an empty
// message: the read that follows tells which.
func nextMessageSize(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("recv init message: %w", err)
	}
	var n int
	var serr error
	if err := raw.Read(func(fd uintptr) bool {
		for {
			n, _, serr = unix.Recvfrom(int(fd), nil, unix.MSG_PEEK|unix.MSG_TRUNC)
			if serr != unix.EINTR {
				return serr != unix.EAGAIN
			}
		}
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("recv init message: %w", serr)
	}
	return n, nil
}
