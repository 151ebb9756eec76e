package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// The native file API beyond read and write: stat, list, mkdir, remove,
// move, chmod, watch and tar archives of folders. Every path resolves in
// the sandbox's root like ReadFile's and WriteFile's (the agent's openat2
// RESOLVE_IN_ROOT, with the sandbox user's rights): absolute in the
// sandbox or relative to /workspace; a path that climbs with ".." is
// refused outright (a *errdefs.FieldError naming the field). Every call is
// scoped to the tenant (another tenant's sandbox is errdefs.ErrNotFound)
// and needs the sandbox running (errdefs.ErrConflict otherwise). Writes are
// audited; stat, list and watch are not.

// Entry is a file, folder or symlink of a sandbox: what E2B's EntryInfo
// carries (name, type, path, size, mode, permissions, owner, group,
// modified time, symlink target).
type Entry = agentproto.FsEntry

// WatchEvent is a change a Watch saw: Name relative to the watched folder,
// Type one of agentproto's FsEvent types ("create", "write", "remove",
// "rename", "chmod", or "overflow" when events were dropped).
type WatchEvent = agentproto.FsEvent

// Entry types.
const (
	EntryFile    = agentproto.FsFile
	EntryDir     = agentproto.FsDir
	EntrySymlink = agentproto.FsSymlink
	EntryOther   = agentproto.FsOther
)

// MaxListDepth bounds ListDir's depth.
const MaxListDepth = agentproto.MaxListDepth

// Listing is what ListDir found.
type Listing struct {
	Entries []Entry
	// Truncated says entries were left out (over agentproto.MaxListEntries).
	Truncated bool
}

// CheckFiles fails like every file operation would before it starts: the
// sandbox is not the tenant's (errdefs.ErrNotFound), not running, or its
// VM's agent is out of reach. Handlers that read a request body first
// (uploads) call it before they do.
func (s *Service) CheckFiles(ctx context.Context, tenantID, id string) error {
	_, _, err := s.runningAgent(ctx, tenantID, id)
	return err
}

// checkPathField is checkPath for the field named (folders allowed).
func checkPathField(field, p string) error {
	switch {
	case p == "":
		return errdefs.Invalid(field, "required", "is required: an absolute path in the sandbox or one relative to /workspace")
	case len(p) > maxPathBytes:
		return errdefs.Invalid(field, "size", fmt.Sprintf("at most %d bytes", maxPathBytes))
	case strings.ContainsRune(p, 0) || !utf8.ValidString(p):
		return errdefs.Invalid(field, "syntax", "must be text without NUL bytes")
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return errdefs.Invalid(field, "traversal", "must not contain '..': paths stay inside the sandbox")
		}
	}
	return nil
}

// sandboxAbs is p as the agent resolves it: absolute, clean.
func sandboxAbs(p string) string {
	if !path.IsAbs(p) {
		p = path.Join("/workspace", p)
	}
	return path.Clean(p)
}

// fsErr is agentErr, with the agent's refusals of a request (bad request,
// conflict) as a *errdefs.FieldError on field.
func fsErr(op, field string, err error) error {
	var re *agentproto.RemoteError
	if errors.As(err, &re) && (errors.Is(err, agentproto.ErrBadRequest) || errors.Is(err, agentproto.ErrConflict)) {
		msg := re.Err.Message
		// The agent's message ends with the detail; its prefixes name ops.
		if i := strings.LastIndex(msg, ": /"); i >= 0 {
			msg = msg[i+2:]
		}
		msg = strings.TrimSuffix(strings.TrimSuffix(msg, ": bad request"), ": conflict")
		if errors.Is(err, agentproto.ErrConflict) {
			return fmt.Errorf("%s: %w: %w", op, errdefs.ErrConflict, errors.New(msg))
		}
		return fmt.Errorf("%s: %w", op, errdefs.Invalid(field, "invalid", msg))
	}
	return agentErr(op, err)
}

func (s *Service) auditFs(ctx context.Context, actor audit.Actor, tenantID, sandboxID, typ string, details map[string]any) {
	if err := s.store.record(context.WithoutCancel(ctx), actor.Event(tenantID, typ, "sandbox", sandboxID, details)); err != nil {
		s.log.Warn("audit "+typ, "sandbox", sandboxID, "err", err)
	}
	_ = s.store.touch(context.WithoutCancel(ctx), sandboxID)
}

// Stat reports the entry at p (a symlink as itself, with its target);
// missing is errdefs.ErrNotFound.
func (s *Service) Stat(ctx context.Context, tenantID, id, p string) (Entry, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return Entry{}, err
	}
	if err := checkPathField("path", p); err != nil {
		return Entry{}, err
	}
	e, err := c.Stat(ctx, agentproto.FsRequest{Sandbox: sb.ID, Path: p})
	if err != nil {
		return Entry{}, fsErr("stat "+p, "path", err)
	}
	return e, nil
}

// ListDir lists the folder p, depth levels deep (1: its own entries; 1 to
// MaxListDepth), sorted by path within each folder, links listed and not
// followed. A p that is not a folder is a *errdefs.FieldError on path.
func (s *Service) ListDir(ctx context.Context, tenantID, id, p string, depth int) (Listing, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return Listing{}, err
	}
	if err := checkPathField("path", p); err != nil {
		return Listing{}, err
	}
	if depth < 1 || depth > MaxListDepth {
		return Listing{}, errdefs.Invalid("depth", "range", fmt.Sprintf("must be between 1 and %d", MaxListDepth))
	}
	es, trunc, err := c.ListDir(ctx, agentproto.FsRequest{Sandbox: sb.ID, Path: p, Depth: depth})
	if err != nil {
		return Listing{}, fsErr("list "+p, "path", err)
	}
	return Listing{Entries: es, Truncated: trunc}, nil
}

// MakeDir makes the folder p with its missing parents (mode 0 means 0755;
// parents get 0755); created is false when a folder was there already (a
// file there is errdefs.ErrConflict). Audited sandbox.dir_made when made.
func (s *Service) MakeDir(ctx context.Context, actor audit.Actor, tenantID, id, p string, mode uint32) (e Entry, created bool, err error) {
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return Entry{}, false, err
	}
	if err := checkPathField("path", p); err != nil {
		return Entry{}, false, err
	}
	if mode > 0o7777 {
		return Entry{}, false, errdefs.Invalid("mode", "range", "must be permission bits in octal, 0 to 7777")
	}
	e, created, err = c.MakeDir(ctx, agentproto.FsRequest{Sandbox: sb.ID, Path: p, Mode: mode})
	if err != nil {
		return Entry{}, false, fsErr("mkdir "+p, "path", err)
	}
	if created {
		s.auditFs(ctx, actor, tenantID, sb.ID, audit.TypeSandboxDirMade, map[string]any{"path": e.Path, "mode": fmt.Sprintf("%04o", e.Mode)})
	}
	return e, created, nil
}

// Remove removes p: a file or link (never what a link points at), or a
// folder; one with entries only when recursive (else errdefs.ErrConflict),
// never past its file system. The sandbox's root is refused. Audited
// sandbox.file_removed.
func (s *Service) Remove(ctx context.Context, actor audit.Actor, tenantID, id, p string, recursive bool) error {
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return err
	}
	if err := checkPathField("path", p); err != nil {
		return err
	}
	if sandboxAbs(p) == "/" {
		return errdefs.Invalid("path", "root", "must not be the sandbox's root")
	}
	if err := c.Remove(ctx, agentproto.FsRequest{Sandbox: sb.ID, Path: p, Recursive: recursive}); err != nil {
		return fsErr("remove "+p, "path", err)
	}
	s.auditFs(ctx, actor, tenantID, sb.ID, audit.TypeSandboxFileRemoved, map[string]any{"path": sandboxAbs(p), "recursive": recursive})
	return nil
}

// Move renames src to dst (a file at dst is replaced; dst's missing
// folders are made) and reports it there. Both stay in the sandbox; across
// file systems (/workspace and the rest) is a *errdefs.FieldError on
// destination. Audited sandbox.file_moved.
func (s *Service) Move(ctx context.Context, actor audit.Actor, tenantID, id, src, dst string) (Entry, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return Entry{}, err
	}
	if err := checkPathField("source", src); err != nil {
		return Entry{}, err
	}
	if err := checkPathField("destination", dst); err != nil {
		return Entry{}, err
	}
	as, ad := sandboxAbs(src), sandboxAbs(dst)
	switch {
	case as == "/":
		return Entry{}, errdefs.Invalid("source", "root", "must not be the sandbox's root")
	case ad == "/":
		return Entry{}, errdefs.Invalid("destination", "root", "must not be the sandbox's root")
	case ad == as || strings.HasPrefix(ad, as+"/"):
		return Entry{}, errdefs.Invalid("destination", "inside", "must not be the source or inside it")
	}
	e, err := c.Move(ctx, agentproto.FsRequest{Sandbox: sb.ID, Path: src, Dest: dst})
	if err != nil {
		field := "destination"
		if errors.Is(err, agentproto.ErrNotFound) {
			field = "source"
		}
		return Entry{}, fsErr("move "+src, field, err)
	}
	s.auditFs(ctx, actor, tenantID, sb.ID, audit.TypeSandboxFileMoved, map[string]any{"source": as, "destination": e.Path})
	return e, nil
}

// Chmod sets p's permission bits (0 to 07777; a final link is followed,
// inside the sandbox). Audited sandbox.file_mode_changed.
func (s *Service) Chmod(ctx context.Context, actor audit.Actor, tenantID, id, p string, mode uint32) (Entry, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return Entry{}, err
	}
	if err := checkPathField("path", p); err != nil {
		return Entry{}, err
	}
	if mode > 0o7777 {
		return Entry{}, errdefs.Invalid("mode", "range", "must be permission bits in octal, 0 to 7777")
	}
	e, err := c.Chmod(ctx, agentproto.FsRequest{Sandbox: sb.ID, Path: p, Mode: mode})
	if err != nil {
		return Entry{}, fsErr("chmod "+p, "path", err)
	}
	s.auditFs(ctx, actor, tenantID, sb.ID, audit.TypeSandboxFileChmod, map[string]any{"path": e.Path, "mode": fmt.Sprintf("%04o", e.Mode)})
	return e, nil
}

// Watch is a running watch of a sandbox folder. Next and Close may be
// called from different goroutines.
type Watch struct {
	w *agentproto.Watch
}

// Next returns the next events. It fails when the watch ends: the folder
// went (errdefs.ErrNotFound), the sandbox ended or its VM's agent went
// (errdefs.ErrConflict / vmpool.ErrUnavailable), ctx ended, or Close
// (io.EOF).
func (w *Watch) Next() ([]WatchEvent, error) {
	evs, err := w.w.Next()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		if errors.Is(err, agentproto.ErrRemote) || errors.Is(err, agentproto.ErrConflict) {
			return nil, fmt.Errorf("watch: the sandbox ended: %w: %w", errdefs.ErrConflict, err)
		}
		return nil, agentErr("watch", err)
	}
	return evs, nil
}

// Close stops the watch.
func (w *Watch) Close() error { return w.w.Close() }

// Watch starts watching the folder p (recursive: every folder below it,
// new ones too, up to agentproto.MaxWatchDirs) with inotify inside the
// sandbox. It returns once the agent watches; the watch lasts until
// Close, ctx ends, the folder goes, or the sandbox ends. A p that is not a
// folder is a *errdefs.FieldError on path. Events are bounded by the agent
// (agentproto.MaxWatchRate per second; "overflow" says how many were
// dropped).
func (s *Service) Watch(ctx context.Context, tenantID, id, p string, recursive bool) (*Watch, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return nil, err
	}
	if err := checkPathField("path", p); err != nil {
		return nil, err
	}
	w, err := c.Watch(ctx, agentproto.FsRequest{Sandbox: sb.ID, Path: p, Recursive: recursive})
	if err != nil {
		return nil, fsErr("watch "+p, "path", err)
	}
	return &Watch{w: w}, nil
}

// ReadArchive writes p as a tar stream: a folder's entries relative to it
// (files, folders and symlinks as symlinks; FIFOs, devices and the
// kernel's file systems left out), anything else as one entry by its name.
// The whole stream is bounded by the tenant's FileLimit: more is a
// *errdefs.TooLargeError, which comes after open was called and some of
// the stream was written (the caller cuts its response short). A missing p
// is errdefs.ErrNotFound before open is called. Audited
// sandbox.archive_read.
func (s *Service) ReadArchive(ctx context.Context, actor audit.Actor, tenantID, id, p string, open func(name string) (io.Writer, error)) (int64, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return 0, err
	}
	if err := checkPathField("path", p); err != nil {
		return 0, err
	}
	lim, err := s.FileLimit(ctx, tenantID)
	if err != nil {
		return 0, err
	}
	// A stat first, so a missing path is refused before any byte is sent.
	e, err := c.Stat(ctx, agentproto.FsRequest{Sandbox: sb.ID, Path: p})
	if err != nil {
		return 0, fsErr("archive "+p, "path", err)
	}
	w, err := open(e.Name)
	if err != nil {
		return 0, err
	}
	n, err := c.Archive(ctx, agentproto.FsRequest{Sandbox: sb.ID, Path: p, MaxBytes: lim.Bytes}, w)
	if err != nil {
		if errors.Is(err, agentproto.ErrFileTooLarge) {
			return n, lim.TooLarge("archive "+p, -1)
		}
		return n, fsErr("archive "+p, "path", err)
	}
	s.auditFs(ctx, actor, tenantID, sb.ID, audit.TypeSandboxArchiveRead, map[string]any{"path": e.Path, "bytes": n})
	return n, nil
}
