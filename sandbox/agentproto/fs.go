package agentproto

import (
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"
	"unicode/utf8"
)

// The file system ops (OpFsStat ... OpFsArchive) resolve every path like
// file.read and file.write: inside the sandbox's root (openat2
// RESOLVE_IN_ROOT), by the sandbox's init, with the sandbox user's rights.
// A path is absolute in the sandbox or relative to /workspace. Symlinks are
// never followed by list, remove, move, chmod, archive or watch below the
// path they name; stat reports a symlink itself (with its target).

// Entry types (FsEntry.Type).
const (
	FsFile    = "file"
	FsDir     = "dir"
	FsSymlink = "symlink"
	// FsOther is a FIFO, socket or device.
	FsOther = "other"
)

// Watch event types (FsEvent.Type), E2B's EventType names in lower case.
const (
	FsEventCreate = "create"
	FsEventWrite  = "write"
	FsEventRemove = "remove"
	FsEventRename = "rename"
	FsEventChmod  = "chmod"
	// FsEventOverflow: events were dropped (the kernel's queue or the
	// agent's rate bound overflowed); Name is empty.
	FsEventOverflow = "overflow"
)

// Bounds on what the file system ops carry. The agent enforces them and the
// host checks them again: the guest may be hostile.
const (
	// MaxFsNameLen bounds one name in a folder (NAME_MAX).
	MaxFsNameLen = 255
	// MaxFsPathLen bounds a path (PATH_MAX).
	MaxFsPathLen = 4096
	// MaxFsUserLen bounds an owner or group name.
	MaxFsUserLen = 64
	// MaxListDepth bounds FsRequest.Depth of fs.list.
	MaxListDepth = 16
	// MaxListEntries bounds the entries one fs.list returns; more set
	// FsListChunk.Truncated.
	MaxListEntries = 10000
	// MaxArchiveEntries bounds the entries of one fs.archive.
	MaxArchiveEntries = 100000
	// MaxWatchDirs bounds the folders one recursive fs.watch watches.
	MaxWatchDirs = 1024
	// MaxWatchBatch bounds the events of one fs.watch frame.
	MaxWatchBatch = 256
	// MaxWatchRate bounds the events per second one fs.watch forwards;
	// beyond it they are dropped and one FsEventOverflow says so.
	MaxWatchRate = 1000
)

// FsRequest is the body of the file system ops (Request.Fs). Which fields
// an op reads is in its Op's comment.
type FsRequest struct {
	Sandbox string `json:"sandbox"`
	// Path is absolute in the sandbox, or relative to /workspace.
	Path string `json:"path"`
	// Dest is where fs.move moves Path to (same rules as Path).
	Dest string `json:"dest,omitempty"`
	// Depth is how deep fs.list goes: 1 lists Path's own entries; at most
	// MaxListDepth.
	Depth int `json:"depth,omitempty"`
	// Recursive removes a folder with what it holds (fs.remove) or
	// watches the folders below Path too (fs.watch).
	Recursive bool `json:"recursive,omitempty"`
	// Mode is the permission bits of fs.chmod, and of the folders fs.mkdir
	// makes (0 means 0755).
	Mode uint32 `json:"mode,omitempty"`
	// MaxBytes bounds the tar stream of fs.archive (headers included): more
	// fails it with CodeTooLarge; 0 means the agent's file bound.
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// FsEntry is one file, folder or link as fs.stat, fs.list, fs.mkdir and
// fs.move report it: what E2B's EntryInfo carries.
type FsEntry struct {
	// Name is the last element of Path ("/" for the root).
	Name string `json:"name"`
	// Type is FsFile, FsDir, FsSymlink or FsOther.
	Type string `json:"type"`
	// Path is absolute in the sandbox and clean.
	Path string `json:"path"`
	Size int64  `json:"size"`
	// Mode is the permission bits with setuid, setgid and sticky (07777).
	Mode uint32 `json:"mode"`
	// Permissions is the mode as Go's fs.FileMode prints it ("-rw-r--r--").
	Permissions string `json:"permissions"`
	UID         uint32 `json:"uid"`
	GID         uint32 `json:"gid"`
	// Owner and Group are the names the sandbox's /etc/passwd and
	// /etc/group give UID and GID (the numbers when they give none).
	Owner    string    `json:"owner"`
	Group    string    `json:"group"`
	Modified time.Time `json:"modified"`
	// SymlinkTarget is what a symlink points at, as stored (not resolved).
	SymlinkTarget string `json:"symlink_target,omitempty"`
}

// FsResult answers the unary file system ops (Response.Fs).
type FsResult struct {
	// Entry is what fs.stat found, what fs.mkdir made (or found), what
	// fs.move moved (at its new path) or what fs.chmod changed.
	Entry *FsEntry `json:"entry,omitempty"`
	// Created says fs.mkdir made the folder (false: it was there).
	Created bool `json:"created,omitempty"`
}

// FsListChunk is the JSON of one ChannelData frame of fs.list.
type FsListChunk struct {
	Entries []FsEntry `json:"entries"`
	// Truncated says entries were left out (MaxListEntries).
	Truncated bool `json:"truncated,omitempty"`
}

// FsEvent is one change fs.watch saw.
type FsEvent struct {
	// Name is the path of what changed, relative to the watched folder.
	Name string `json:"name"`
	// Type is one of the FsEvent constants.
	Type string `json:"type"`
	// Dropped counts the events an FsEventOverflow stands for (0: unknown).
	Dropped int `json:"dropped,omitempty"`
}

// FsEventBatch is the JSON of one ChannelData frame of fs.watch.
type FsEventBatch struct {
	Events []FsEvent `json:"events"`
}

// PermString is mode (type bits as in st_mode, permission bits) as Go's
// fs.FileMode prints it.
func PermString(stMode uint32) string {
	m := fs.FileMode(stMode & 0o777)
	switch stMode & 0o170000 {
	case 0o040000:
		m |= fs.ModeDir
	case 0o120000:
		m |= fs.ModeSymlink
	case 0o010000:
		m |= fs.ModeNamedPipe
	case 0o140000:
		m |= fs.ModeSocket
	case 0o020000:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case 0o060000:
		m |= fs.ModeDevice
	}
	if stMode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if stMode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if stMode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m.String()
}

// CheckFsEntry fails with ErrProtocol unless e is within the bounds and
// well formed: what the host checks of every entry the guest reports.
func CheckFsEntry(e FsEntry) error {
	bad := func(why string) error { return fmt.Errorf("file system entry %.64q: %s: %w", e.Path, why, ErrProtocol) }
	switch {
	case e.Type != FsFile && e.Type != FsDir && e.Type != FsSymlink && e.Type != FsOther:
		return bad("unknown type")
	case !CleanFsPath(e.Path):
		return bad("path not absolute and clean")
	case e.Name != path.Base(e.Path):
		return bad("name is not the path's last element")
	case e.Size < 0 || e.Mode > 0o7777:
		return bad("size or mode out of range")
	case len(e.Permissions) > 16 || !utf8.ValidString(e.Permissions):
		return bad("permissions")
	case !fsText(e.Owner, MaxFsUserLen) || !fsText(e.Group, MaxFsUserLen):
		return bad("owner or group")
	case len(e.SymlinkTarget) > MaxFsPathLen || strings.ContainsRune(e.SymlinkTarget, 0) || (e.SymlinkTarget != "" && e.Type != FsSymlink):
		return bad("symlink target")
	}
	return nil
}

// CheckFsEvent fails with ErrProtocol unless ev is well formed.
func CheckFsEvent(ev FsEvent) error {
	switch ev.Type {
	case FsEventCreate, FsEventWrite, FsEventRemove, FsEventRename, FsEventChmod:
		if ev.Name == "" || len(ev.Name) > MaxFsPathLen || strings.ContainsRune(ev.Name, 0) || !utf8.ValidString(ev.Name) ||
			path.IsAbs(ev.Name) || path.Clean(ev.Name) != ev.Name || ev.Name == ".." || strings.HasPrefix(ev.Name, "../") {
			return fmt.Errorf("watch event name %.64q: %w", ev.Name, ErrProtocol)
		}
		return nil
	case FsEventOverflow:
		if ev.Name != "" || ev.Dropped < 0 {
			return fmt.Errorf("watch overflow event: %w", ErrProtocol)
		}
		return nil
	}
	return fmt.Errorf("watch event type %.32q: %w", ev.Type, ErrProtocol)
}

// CleanFsPath reports whether p is absolute, clean, valid text without NUL
// and within MaxFsPathLen, each element within MaxFsNameLen.
func CleanFsPath(p string) bool {
	if p == "" || len(p) > MaxFsPathLen || !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsRune(p, 0) || !utf8.ValidString(p) {
		return false
	}
	for _, el := range strings.Split(p[1:], "/") {
		if len(el) > MaxFsNameLen {
			return false
		}
	}
	return true
}

func fsText(s string, n int) bool {
	return len(s) <= n && utf8.ValidString(s) && !strings.ContainsAny(s, "\x00\n")
}

// WatchRate bounds the events forwarded per second.
type WatchRate struct {
	start   time.Time
	n       int
	dropped int
}

func NewWatchRate(now time.Time) *WatchRate { return &WatchRate{start: now} }

// Roll starts a new second when one passed and returns the overflow event
// for what the last one dropped, if it dropped any.
func (r *WatchRate) Roll(now time.Time) (FsEvent, bool) {
	if now.Sub(r.start) < time.Second {
		return FsEvent{}, false
	}
	r.start, r.n = now, 0
	if r.dropped == 0 {
		return FsEvent{}, false
	}
	ev := FsEvent{Type: FsEventOverflow, Dropped: r.dropped}
	r.dropped = 0
	return ev, true
}

// Admit returns the events of evs that are well formed and within the
// rate; the others are dropped (counted for the next overflow event).
// Overflow events from the source count against the rate like any other.
// Both the agent and the host apply it.
func (r *WatchRate) Admit(now time.Time, evs []FsEvent) []FsEvent {
	var out []FsEvent
	if ov, ok := r.Roll(now); ok {
		out = append(out, ov)
	}
	for _, ev := range evs {
		switch {
		case CheckFsEvent(ev) != nil:
			// Malformed (or a name that is not text): dropped.
		case ev.Type == FsEventOverflow && r.n >= MaxWatchRate:
			r.dropped += max(ev.Dropped, 1)
		case ev.Type == FsEventOverflow:
			// Within the budget: passed on at once, with what this
			// limiter dropped so far.
			r.n++
			out = append(out, FsEvent{Type: FsEventOverflow, Dropped: ev.Dropped + r.dropped})
			r.dropped = 0
		case r.n >= MaxWatchRate:
			r.dropped++
		default:
			r.n++
			out = append(out, FsEvent{Name: ev.Name, Type: ev.Type})
		}
	}
	return out
}
