package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// FileInfo describes a file read or written.
type FileInfo struct {
	Path string
	Size int64
	Mode uint32
}

// ReadFile copies a file of the tenant's running sandbox. Once the file is
// found and within MaxFileBytes (else ErrTooLarge, before anything is
// written) open is called with its size and returns where the bytes go.
// path is absolute in the sandbox or relative to /workspace; one that
// climbs with ".." is a *tenants.FieldError; a missing file
// tenants.ErrNotFound. It is audited sandbox.file_read.
func (s *Service) ReadFile(ctx context.Context, actor audit.Actor, tenantID, id, path string, open func(size int64) (io.Writer, error)) (FileInfo, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return FileInfo{}, err
	}
	if err := checkPath(path); err != nil {
		return FileInfo{}, err
	}
	// A first read of one byte says whether the file is there and how big
	// it is, so a refusal comes before any of it is sent.
	fi, err := c.ReadFile(ctx, agentproto.FileReadRequest{Sandbox: sb.ID, Path: path, Limit: 1}, io.Discard)
	if err != nil {
		return FileInfo{}, agentErr("read "+path, err)
	}
	if fi.Size > s.cfg.MaxFileBytes {
		return FileInfo{}, fmt.Errorf("read %s: %w: %d bytes, the limit is %d", path, ErrTooLarge, fi.Size, s.cfg.MaxFileBytes)
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
// folders are made; mode 0 means 0644). More than MaxFileBytes is
// ErrTooLarge and writes nothing: the file appears whole or not at all. It
// is audited sandbox.file_written.
func (s *Service) WriteFile(ctx context.Context, actor audit.Actor, tenantID, id, path string, r io.Reader, mode uint32) (FileInfo, error) {
	sb, c, err := s.runningAgent(ctx, tenantID, id)
	if err != nil {
		return FileInfo{}, err
	}
	if err := checkPath(path); err != nil {
		return FileInfo{}, err
	}
	if mode > 0o7777 {
		return FileInfo{}, tenants.Invalid("mode", "range", "must be permission bits in octal, 0 to 7777")
	}
	lr := &boundedReader{r: r, left: s.cfg.MaxFileBytes}
	fi, err := c.WriteFile(ctx, agentproto.FileWriteRequest{Sandbox: sb.ID, Path: path, Mode: mode, MaxBytes: s.cfg.MaxFileBytes}, lr)
	if err != nil {
		if lr.over || errors.Is(err, ErrTooLarge) {
			return FileInfo{}, fmt.Errorf("write %s: %w: the limit is %d bytes", path, ErrTooLarge, s.cfg.MaxFileBytes)
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
		return 0, ErrTooLarge
	}
	return n, err
}
