package vmpool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stockade-dev/stockade/tenants"
)

// Snapshots of deleted tenants (snapshot_gc.go). A per-tenant snapshot
// (Config.SnapshotsShared off) holds a guest booted for that tenant's
// slot; once the tenant is gone nothing restores from it again, so the
// leader's sweep deletes it: every reconcile on this machine's data dir,
// on each visit of a remote host's files in its pool
// (sweepRemoteSnapshots).

// snapshotTenantGone says why a snapshot of tenant is to go: "" when the
// tenant is there (or the snapshot is shared: tenant "").
func (s *Service) snapshotTenantGone(ctx context.Context, tenant string) (string, error) {
	if tenant == "" {
		return "", nil
	}
	var n int64
	if err := s.store.db.WithContext(ctx).Model(&tenants.Tenant{}).Where("id = ?", tenant).Count(&n).Error; err != nil {
		return "", fmt.Errorf("look up tenant of a snapshot: %w", err)
	}
	if n == 0 {
		return "tenant deleted", nil
	}
	return "", nil
}

// sweepSnapshots deletes the snapshots of deleted tenants in the local
// snapshot folder (DataDir/hosts/<installation>).
func (s *Service) sweepSnapshots(ctx context.Context) {
	dir := filepath.Join(s.cfg.DataDir, "hosts", s.installID)
	sidecars, err := filepath.Glob(filepath.Join(dir, "snapshot-vm-*.json"))
	if err != nil {
		return
	}
	for _, side := range sidecars {
		meta, err := readSnapshotMeta(side)
		if err != nil {
			continue // being written, or damaged: snapshotFor rebuilds it
		}
		why, err := s.snapshotTenantGone(ctx, meta.Inputs.Tenant)
		if err != nil {
			s.log.Warn("sweep vm snapshots", "err", err)
			return
		}
		if why == "" {
			continue
		}
		stem := strings.TrimSuffix(side, ".json")
		s.snaps.mu.Lock()
		delete(s.snaps.spares, dir+filepath.Base(stem))
		s.snaps.mu.Unlock()
		for _, p := range snapshotFiles(dir, filepath.Base(stem)) { // the snapshot, its scratch disk, spares
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				s.log.Warn("sweep vm snapshots", "file", p, "err", err)
			}
		}
		s.log.Info("vm snapshot deleted", "slot", filepath.Base(stem), "why", why)
	}
}
