package vmpool

import (
	"context"
	"strings"

	"github.com/stockade-dev/stockade/sandbox/replicas"
)

// Snapshot VMs (snapshot-<uuid>, snapshot.go) have no vms row, so the
// orphan rule of reconcileHost (a domain with no active row) would destroy
// another live replica's build, and nothing ever destroyed the build VM of a
// replica that died mid-build (until a host reconnect). So a build holds a
// channel lease on its VM's id like any VM (renewed by the replica's
// heartbeats, released when the build ends), and a snapshot VM is an orphan
// only when its lease is free or expired: the replica that takes it then
// destroys it (snapshotLeased, and the leader's sweepSnapshotVMs every
// reconcile, about 10 s).

const snapshotVMPrefix = replicas.BuildLeasePrefix

// leaseSnapshotVM takes the channel lease of a snapshot build's VM id; false
// when another replica holds it (never, for a fresh uuid) or the store failed.
func (s *Service) leaseSnapshotVM(ctx context.Context, id string) bool {
	l := s.cfg.Leases
	if l == nil {
		return true
	}
	ok, err := l.Adopt(ctx, id)
	if err != nil {
		s.log.Warn("lease snapshot vm", "vm", id, "err", err)
	}
	return ok
}

// releaseSnapshotVM ends a build's lease.
func (s *Service) releaseSnapshotVM(ctx context.Context, id string) {
	if l := s.cfg.Leases; l != nil {
		if err := l.Release(ctx, id); err != nil {
			s.log.Warn("release snapshot vm lease", "vm", id, "err", err)
		}
	}
}

// sweepSnapshotVMs destroys, on every connected host, snapshot VMs that no
// live build holds: not building here, and whose lease this replica could
// take (free, or its owner let it expire).
func (s *Service) sweepSnapshotVMs(ctx context.Context) {
	for _, h := range s.hostList() {
		hv, err := h.live()
		if err != nil {
			continue
		}
		doms, err := hv.List(ctx)
		if err != nil {
			s.log.Warn("sweep snapshot vms: list domains", "uri", h.uri, "err", err)
			continue
		}
		for _, d := range doms {
			if !strings.HasPrefix(d.ID, snapshotVMPrefix) || s.snapshotBuilding(d.ID) || !s.owns(ctx, d.ID) {
				continue
			}
			s.destroyOrphan(ctx, h, hv, d)
			s.releaseSnapshotVM(ctx, d.ID)
		}
	}
}
