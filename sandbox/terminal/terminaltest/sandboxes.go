package terminaltest

import (
	"context"
	"fmt"
	"sync"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Local opens terminals of the sandboxes stored in DB on this machine's
// pseudo-terminals: a sandbox must exist for the tenant and be running, as
// with real sandboxes, and ends when its record says so; the process runs
// here, not in a VM. It is the VM-less half of the terminal benchmarks
// and what page tests drive before VMs.
type Local struct {
	store *sandbox.Store

	mu   sync.Mutex
	ptys []*PTY
}

// NewLocal returns terminals for the sandboxes recorded in db.
func NewLocal(db *gorm.DB) *Local { return &Local{store: sandbox.NewStore(db, nil)} }

var _ terminal.Sandboxes = (*Local)(nil)

// OpenPTY starts req's process here, for a running sandbox of the tenant.
func (l *Local) OpenPTY(ctx context.Context, tenantID, sandboxID string, req terminal.PTYRequest) (terminal.PTY, error) {
	sb, err := l.store.Sandbox(ctx, tenantID, sandboxID)
	if err != nil {
		return nil, err
	}
	if sb.State != sandbox.StateRunning {
		return nil, fmt.Errorf("sandbox %s: %w: it is %s", sandboxID, errdefs.ErrConflict, sb.State)
	}
	p, err := StartPTY(req.Argv, req.Env, req.Rows, req.Cols)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.ptys = append(l.ptys, p)
	l.mu.Unlock()
	return p, nil
}

// SandboxEnded reads the sandbox's record.
func (l *Local) SandboxEnded(ctx context.Context, tenantID, sandboxID string) (bool, string, error) {
	sb, err := l.store.Sandbox(ctx, tenantID, sandboxID)
	if err != nil {
		return false, "", err
	}
	if sb.State == sandbox.StateRunning || sb.State == sandbox.StateCreating {
		return false, "", nil
	}
	return true, fmt.Sprintf("the sandbox was %s (%s)", sb.State, sb.StateReason), nil
}

// PTYs returns the terminals started so far.
func (l *Local) PTYs() []*PTY {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*PTY(nil), l.ptys...)
}
