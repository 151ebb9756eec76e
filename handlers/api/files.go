package api

// The native file API of a sandbox beyond read and write
// (/api/v1/sandboxes/{id}/files/...). Paths are absolute in the sandbox or
// relative to /workspace and resolve inside the sandbox's root only; '..'
// is refused.

// MediaTar is a tar archive (GET .../files/archive).
const MediaTar = "application/x-tar"

// MediaEventStream is Server-Sent Events (GET .../files/watch).
const MediaEventStream = "text/event-stream"

// FileEntry is a file, folder or symlink of a sandbox.
type FileEntry struct {
	Name        string `json:"name" doc:"the last element of path ('/' for the root)"`
	Type        string `json:"type" enum:"file,dir,symlink,other" doc:"other: a FIFO, socket or device"`
	Path        string `json:"path" doc:"absolute in the sandbox"`
	Size        int64  `json:"size" doc:"bytes"`
	Mode        string `json:"mode" doc:"octal permission bits with setuid, setgid and sticky, e.g. 0644"`
	Permissions string `json:"permissions" doc:"as ls shows them, e.g. -rw-r--r-- (L for a symlink, d for a folder)"`
	UID         uint32 `json:"uid"`
	GID         uint32 `json:"gid"`
	Owner       string `json:"owner" doc:"the sandbox's /etc/passwd name of uid (the number if none)"`
	Group       string `json:"group" doc:"the sandbox's /etc/group name of gid (the number if none)"`
	ModifiedAt  string `json:"modified_at" format:"date-time"`
	// SymlinkTarget is what a symlink points at, as stored.
	SymlinkTarget string `json:"symlink_target,omitempty" doc:"a symlink's target, as stored (not resolved)"`
}

// FilePathQuery names a file, folder or symlink of a sandbox.
type FilePathQuery struct {
	Path string `query:"path" required:"true" doc:"absolute in the sandbox, or relative to /workspace; '..' is refused"`
}

// ListFilesQuery names a folder to list and how deep.
type ListFilesQuery struct {
	Path  string `query:"path" required:"true" doc:"a folder: absolute in the sandbox, or relative to /workspace; '..' is refused"`
	Depth int    `query:"depth" minimum:"1" maximum:"16" doc:"1 (the default) lists the folder's own entries, 2 theirs too, and so on"`
}

// FileList answers GET .../files/list.
type FileList struct {
	Path      string      `json:"path"`
	Entries   []FileEntry `json:"entries" nonnull:"true" doc:"sorted by name within each folder, a folder before what it holds; links are listed, not followed"`
	Truncated bool        `json:"truncated" doc:"entries were left out: over 10000"`
}

// MakeDir is the body of POST .../files/mkdir.
type MakeDir struct {
	Path string `json:"path" doc:"the folder; missing parents are made (0755)"`
	Mode string `json:"mode,omitempty" pattern:"^[0-7]{1,4}$" doc:"permission bits in octal, default 0755"`
}

// MadeDir answers POST .../files/mkdir.
type MadeDir struct {
	Entry   FileEntry `json:"entry"`
	Created bool      `json:"created" doc:"false: the folder was there already"`
}

// RemoveFileQuery names what DELETE .../files removes.
type RemoveFileQuery struct {
	Path      string `query:"path" required:"true" doc:"absolute in the sandbox, or relative to /workspace; never the root; a link is removed, not what it points at"`
	Recursive bool   `query:"recursive" doc:"a folder with what it holds (on its own file system only)"`
}

// MoveFile is the body of POST .../files/move.
type MoveFile struct {
	Source      string `json:"source"`
	Destination string `json:"destination" doc:"a file there is replaced; missing folders are made; not inside source"`
}

// ChmodFile is the body of POST .../files/chmod.
type ChmodFile struct {
	Path string `json:"path"`
	Mode string `json:"mode" pattern:"^[0-7]{1,4}$" doc:"permission bits in octal, e.g. 0755"`
}

// WatchQuery names the folder GET .../files/watch watches.
type WatchQuery struct {
	Path      string `query:"path" required:"true" doc:"a folder: absolute in the sandbox, or relative to /workspace"`
	Recursive bool   `query:"recursive" doc:"the folders below it too, new ones included (at most 1024)"`
}

// WatchEvent is the data of an "fs" event of GET .../files/watch.
type WatchEvent struct {
	Name    string `json:"name" doc:"what changed, relative to the watched folder (empty for overflow)"`
	Type    string `json:"type" enum:"create,write,remove,rename,chmod,overflow" doc:"rename: moved away (its new name comes as create); overflow: events were dropped"`
	Dropped int    `json:"dropped,omitempty" doc:"overflow: how many (0: unknown)"`
}

// WatchEnd is the data of the "end" event of GET .../files/watch.
type WatchEnd struct {
	Reason string `json:"reason" doc:"why the watch ended: the folder went, the sandbox ended"`
}

// UploadQuery says where POST .../files writes.
type UploadQuery struct {
	Path string `query:"path" doc:"application/octet-stream: the file (required). multipart/form-data: the folder relative file names are in (default /workspace)"`
	Mode string `query:"mode" pattern:"^[0-7]{1,4}$" doc:"permission bits in octal of the files written, default 0644"`
}

// Uploaded answers POST .../files.
type Uploaded struct {
	Files []File `json:"files" nonnull:"true" doc:"in the order of the parts"`
}
