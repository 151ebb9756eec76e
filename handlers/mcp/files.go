package mcp

import (
	"context"
	"strconv"
	"time"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
)

// The file tools beyond read and write, on the native file API
// (sandbox/fsops.go).

// EntryOut is a file, folder or symlink as the tools answer it.
type EntryOut struct {
	Path          string `json:"path" jsonschema:"absolute in the sandbox"`
	Type          string `json:"type" jsonschema:"file, dir, symlink or other"`
	Size          int64  `json:"size" jsonschema:"bytes"`
	Mode          string `json:"mode" jsonschema:"octal permission bits, e.g. 0644"`
	ModifiedAt    string `json:"modified_at"`
	SymlinkTarget string `json:"symlink_target,omitempty"`
}

func entryOut(e sandbox.Entry) EntryOut {
	return EntryOut{Path: e.Path, Type: e.Type, Size: e.Size, Mode: "0" + strconv.FormatUint(uint64(e.Mode&0o7777), 8),
		ModifiedAt: e.Modified.UTC().Format(time.RFC3339), SymlinkTarget: e.SymlinkTarget}
}

// ListFilesIn is list_files's input.
type ListFilesIn struct {
	SandboxRef
	Path  string `json:"path" jsonschema:"a folder: absolute in the sandbox, or relative to /workspace"`
	Depth int    `json:"depth,omitempty" jsonschema:"1 (the default) lists the folder's own entries, 2 theirs too, and so on, up to 16"`
}

func (in ListFilesIn) path() string { return in.Path }

// FilesOut is a folder's entries.
type FilesOut struct {
	Entries   []EntryOut `json:"entries"`
	Truncated bool       `json:"truncated,omitempty" jsonschema:"entries were left out: over 10000"`
}

func (s *Server) listFiles(ctx context.Context, c *caller, in ListFilesIn) (FilesOut, error) {
	if err := in.check(); err != nil {
		return FilesOut{}, err
	}
	if in.Depth == 0 {
		in.Depth = 1
	}
	l, err := s.sbx.ListDir(ctx, c.tenantID, in.SandboxID, in.Path, in.Depth)
	if err != nil {
		return FilesOut{}, err
	}
	out := FilesOut{Entries: make([]EntryOut, 0, len(l.Entries)), Truncated: l.Truncated}
	for _, e := range l.Entries {
		out.Entries = append(out.Entries, entryOut(e))
	}
	return out, nil
}

// MakeDirIn is make_dir's input: the sandbox and POST .../files/mkdir's body.
type MakeDirIn struct {
	SandboxRef
	api.MakeDir
}

// MadeDirOut is a folder made (or found).
type MadeDirOut struct {
	Entry   EntryOut `json:"entry"`
	Created bool     `json:"created" jsonschema:"false: the folder was there already"`
}

func (s *Server) makeDir(ctx context.Context, c *caller, in MakeDirIn) (MadeDirOut, error) {
	if err := in.check(); err != nil {
		return MadeDirOut{}, err
	}
	mode, err := octal("mode", in.Mode)
	if err != nil {
		return MadeDirOut{}, err
	}
	e, created, err := s.sbx.MakeDir(ctx, c.actor, c.tenantID, in.SandboxID, in.Path, mode)
	if err != nil {
		return MadeDirOut{}, err
	}
	return MadeDirOut{Entry: entryOut(e), Created: created}, nil
}

// RemoveFileIn is remove_file's input.
type RemoveFileIn struct {
	SandboxRef
	Path      string `json:"path" jsonschema:"absolute in the sandbox, or relative to /workspace; never the root; a link is removed, not what it points at"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"a folder with what it holds"`
}

func (in RemoveFileIn) path() string { return in.Path }

// Removed says what was removed.
type Removed struct {
	Path string `json:"path"`
}

func (s *Server) removeFile(ctx context.Context, c *caller, in RemoveFileIn) (Removed, error) {
	if err := in.check(); err != nil {
		return Removed{}, err
	}
	if err := s.sbx.Remove(ctx, c.actor, c.tenantID, in.SandboxID, in.Path, in.Recursive); err != nil {
		return Removed{}, err
	}
	return Removed{Path: in.Path}, nil
}

// MoveFileIn is move_file's input: the sandbox and POST .../files/move's body.
type MoveFileIn struct {
	SandboxRef
	api.MoveFile
}

func (in MoveFileIn) path() string { return in.Source }

func (s *Server) moveFile(ctx context.Context, c *caller, in MoveFileIn) (EntryOut, error) {
	if err := in.check(); err != nil {
		return EntryOut{}, err
	}
	e, err := s.sbx.Move(ctx, c.actor, c.tenantID, in.SandboxID, in.Source, in.Destination)
	if err != nil {
		return EntryOut{}, err
	}
	return entryOut(e), nil
}
