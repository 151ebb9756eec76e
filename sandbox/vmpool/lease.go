package vmpool

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"
)

// Leases is the per-VM agent channel ownership of several replicas on one
// database (sandbox/replicas.Registry implements it). With none (one server
// per installation, SQLite) this process owns every VM, as before.
//
// Only a VM's owner opens its channel, adopts it, marks it lost or
// destroys it at reconcile; a VM another live replica owns is left alone.
type Leases interface {
	// ID is this replica's id, the owner its leases name.
	ID() string
	// ClaimNew records, in the VM's create transaction, that this replica
	// owns the new VM (the replica that boots a VM owns it); Claimed notes
	// it once the transaction committed.
	ClaimNew(tx *gorm.DB, vmID string) error
	Claimed(vmID string)
	// Adopt takes a VM's lease when none is held or its owner let it
	// expire (a newer epoch); true when this replica owns it now.
	Adopt(ctx context.Context, vmID string) (bool, error)
	// Owns: this replica holds the VM's lease.
	Owns(vmID string) bool
	// Release ends this replica's lease of an ended VM.
	Release(ctx context.Context, vmID string) error
	// OnLost registers who is told of a lease another replica took over.
	OnLost(fn func(vmID string))
}

// errLeaseLost cancels the boot or adoption of a VM whose lease another
// replica took: its domain is left alone (the new owner has it).
var errLeaseLost = errors.New("vm lease taken over by another replica")

// owns reports whether this replica may handle vmID's channel and end,
// adopting its lease when it is free or expired.
func (s *Service) owns(ctx context.Context, vmID string) bool {
	l := s.cfg.Leases
	if l == nil || l.Owns(vmID) {
		return true
	}
	ok, err := l.Adopt(ctx, vmID)
	if err != nil {
		s.log.Warn("adopt vm lease", "vm", vmID, "err", err)
		return false
	}
	return ok
}

// ownsNow is owns without adopting: for events about VMs another replica
// may be handling.
func (s *Service) ownsNow(vmID string) bool {
	return s.cfg.Leases == nil || s.cfg.Leases.Owns(vmID)
}

// leading reports whether this replica runs the singleton work (warm
// pools, recycling, the scratch sweep): always without a leader gate.
func (s *Service) leading() bool { return s.cfg.Leader == nil || s.cfg.Leader() }

// releaseLease ends this replica's lease of a VM that ended.
func (s *Service) releaseLease(vmID string) {
	if s.cfg.Leases == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.cfg.Leases.Release(ctx, vmID); err != nil {
		s.log.Warn("release vm lease", "vm", vmID, "err", err)
	}
}

// leaseLost lets go of a VM whose lease another replica took over: the
// boot or adoption under way stops, the agent session closes, the VM and
// its domain are not touched (the new owner adopts them).
func (s *Service) leaseLost(vmID string) {
	s.mu.Lock()
	rt := s.vms[vmID]
	delete(s.vms, vmID)
	s.mu.Unlock()
	if rt == nil {
		return
	}
	rt.stopTask(errLeaseLost, 10*time.Second)
	rt.closeClient()
	s.log.Warn("vm lease lost: its channel is another replica's now", "vm", vmID)
}
