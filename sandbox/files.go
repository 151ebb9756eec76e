package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/policy"
)

// FileInfo describes a file read or written.
type FileInfo struct {
	Path string
	Size int64
	Mode uint32
}

// FileLimit is the bound on one file read or written through the API for
// the tenant: the platform's MaxFileBytes (STOCKADE_MAX_FILE_BYTES), or
// the tenant policy's filesystem.max_file_bytes when that is lower.
func (s *Service) FileLimit(ctx context.Context, tenantID string) (FileLimit, error) {
	l := FileLimit{Bytes: s.cfg.MaxFileBytes, Setting: SettingMaxFileBytes}
	if s.cfg.Policies == nil {
		return l, nil
	}
	pol, err := s.cfg.Policies.Current(ctx, tenantID)
	if err != nil {
		return FileLimit{}, fmt.Errorf("file size limit: %w", err)
	}
	return l.withPolicy(pol), nil
}

// withPolicy is l lowered to the policy's bound, if that is lower.
func (l FileLimit) withPolicy(pol policy.Version) FileLimit {
	if b := int64(pol.Doc.Filesystem.MaxFileBytes); b > 0 && b < l.Bytes {
		return FileLimit{Bytes: b, Setting: PolicyMaxFileBytes, PolicyVersion: pol.Version}
	}
	return l
}

// ReadFile copies a file of the tenant's running sandbox. Once the file is
// found and within the tenant's FileLimit (else a *errdefs.TooLargeError, before
// anything is written) open is called with its size and returns where the
// bytes go. path is absolute in the sandbox or relative to /workspace; one
// that climbs with ".." is a *errdefs.FieldError; a missing file
// errdefs.ErrNotFound; one the sandbox user may not read
// errdefs.ErrForbidden. It is audited sandbox.file_read.
func (s *Service) ReadFile(ctx context.Context, actor audit.Actor, tenantID, id, path string, open func(size int64) (io.Writer, error)) (FileInfo, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return FileInfo{}, err
	}
	if err := checkPath(path); err != nil {
		return FileInfo{}, err
	}
	lim, err := s.FileLimit(ctx, tenantID)
	if err != nil {
		return FileInfo{}, err
	}
	// A first read of one byte says whether the file is there and how big
	// it is, so a refusal comes before any of it is sent.
	fi, err := c.ReadFile(ctx, agentproto.FileReadRequest{Sandbox: sb.ID, Path: path, Limit: 1}, io.Discard)
	if err != nil {
		return FileInfo{}, agentErr("read "+path, err)
	}
	if fi.Size > lim.Bytes {
		return FileInfo{}, lim.TooLarge("read "+path, fi.Size)
	}
	w, err := open(fi.Size)
	if err != nil {
		return FileInfo{}, err
	}
	// Limit: a file that grew meanwhile is cut at the size announced.
	limit := fi.Size
	if limit == 0 {
		limit = 1
	}
	if _, err := c.ReadFile(ctx, agentproto.FileReadRequest{Sandbox: sb.ID, Path: path, Limit: limit}, w); err != nil {
		return FileInfo{}, agentErr("read "+path, err)
	}
	if err := s.store.record(context.WithoutCancel(ctx), actor.Event(tenantID, audit.TypeSandboxFileRead, "sandbox", sb.ID,
		map[string]any{"path": path, "bytes": fi.Size})); err != nil {
		s.log.Warn("audit file read", "sandbox", sb.ID, "err", err)
	}
	_ = s.store.touch(context.WithoutCancel(ctx), sb.ID)
	return FileInfo{Path: path, Size: fi.Size, Mode: fi.Mode}, nil
}

// WriteFile writes r into a file of the tenant's running sandbox (missing
// folders are made; mode 0 means 0644), with the sandbox user's rights (a
// folder it may not write: errdefs.ErrForbidden). More than the tenant's
// FileLimit is a *errdefs.TooLargeError and writes nothing: the file appears whole
// or not at all. It is audited sandbox.file_written.
func (s *Service) WriteFile(ctx context.Context, actor audit.Actor, tenantID, id, path string, r io.Reader, mode uint32) (FileInfo, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return FileInfo{}, err
	}
	if err := checkPath(path); err != nil {
		return FileInfo{}, err
	}
	if mode > 0o7777 {
		return FileInfo{}, errdefs.Invalid("mode", "range", "must be permission bits in octal, 0 to 7777")
	}
	lim, err := s.FileLimit(ctx, tenantID)
	if err != nil {
		return FileInfo{}, err
	}
	lr := &boundedReader{r: r, left: lim.Bytes}
	fi, err := c.WriteFile(ctx, agentproto.FileWriteRequest{Sandbox: sb.ID, Path: path, Mode: mode, MaxBytes: lim.Bytes}, lr)
	if err != nil {
		if lr.over || errors.Is(err, errdefs.ErrTooLarge) || errors.Is(err, agentproto.ErrFileTooLarge) {
			return FileInfo{}, lim.TooLarge("write "+path, -1)
		}
		return FileInfo{}, agentErr("write "+path, err)
	}
	if err := s.store.record(context.WithoutCancel(ctx), actor.Event(tenantID, audit.TypeSandboxFileWritten, "sandbox", sb.ID,
		map[string]any{"path": path, "bytes": fi.Size, "mode": fmt.Sprintf("%04o", fi.Mode&0o7777)})); err != nil {
		s.log.Warn("audit file write", "sandbox", sb.ID, "err", err)
	}
	_ = s.store.touch(context.WithoutCancel(ctx), sb.ID)
	return FileInfo{Path: path, Size: fi.Size, Mode: fi.Mode}, nil
}

// boundedReader fails once more than left bytes come from r.
type boundedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (b *boundedReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		b.over = true
		return 0, errdefs.ErrTooLarge
	}
	return n, err
}
