package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// ReadUpper writes the writable layer of the tenant's paused sandbox (what
// its processes changed over its template) to w as a tar stream
// (agentproto.UpperDoc), at most maxBytes of it: more is an
// *errdefs.QuotaError on quota, after some of the stream was written. A
// template build brings its builder sandbox's changes back with it.
func (s *Service) ReadUpper(ctx context.Context, tenantID, id string, maxBytes int64, quota string, w io.Writer) (int64, error) {
	sb, err := s.store.Sandbox(ctx, tenantID, id)
	if err != nil {
		return 0, err
	}
	if err := s.unavailable("sandbox " + id); err != nil {
		return 0, err
	}
	if sb.State != StateRunning || !sb.Paused() {
		return 0, fmt.Errorf("sandbox %s: %w: pause it first", id, errdefs.ErrConflict)
	}
	c, err := s.vms.Agent(ctx, tenantID, sb.VMID)
	if err != nil {
		return 0, fmt.Errorf("sandbox %s: %w", id, err)
	}
	n, err := c.Upper(ctx, sb.ID, maxBytes, w)
	if errors.Is(err, agentproto.ErrFileTooLarge) {
		return n, &errdefs.QuotaError{Quota: quota, Detail: fmt.Sprintf("the sandbox's changes pass the %d bytes left", maxBytes)}
	}
	if err != nil {
		return n, fmt.Errorf("read the writable layer of %s: %w", id, err)
	}
	return n, nil
}
