package vmpool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Memory snapshots on remote hosts (snapshot_remote.go). On a host whose
// files go through its storage pool (FilesRemote) the snapshot is built on
// the host itself: the snapshot VM is saved by the host's libvirtd into the
// pool (hypervisor.SaveSnapshotVolume), a volume named by the slot and its
// key, "<slot>-<key12>.snap", and its sidecar is the volume
// "<slot>-<key12>.json", written whole once the save checked (its size and
// the SHA-256 of its head, downloaded back). A restore clones the volume on
// the host and writes the VM's identity into the clone's header
// (hypervisor.Restore with Snapshot.Volume); the clone is deleted as soon
// as libvirt has loaded it. The leader's visit of the host's files deletes
// orphan clones (of VMs no longer booting), snapshots of old keys and of
// deleted tenants, and saves whose sidecar never came.
//
// Remote snapshots are not warm (a limitation, README): the snapshot VM
// boots with the template disks only, no scratch disk and no pre-started
// sandboxes, and a VM restored here gets its own fresh scratch volume
// hot-plugged after the restore (restoreVM); no spares.

// remoteSnapshotHV is what a remote host's Hypervisor does for snapshots
// (*hypervisor.Host).
type remoteSnapshotHV interface {
	SaveSnapshotVolume(ctx context.Context, id, name string) (hypervisor.VolumeSnapshot, error)
	ReadVolume(ctx context.Context, name string, max int64) ([]byte, error)
	WriteVolume(ctx context.Context, name string, b []byte) error
	DeleteVolume(ctx context.Context, name string) error
	Volumes(ctx context.Context) ([]hypervisor.Volume, error)
	SnapshotPath(name string) string
}

// remoteSnapshotMeta is the sidecar volume of a remote snapshot; SHA256 is
// the sum of the save file's first HeadLen bytes.
type remoteSnapshotMeta struct {
	snapshotMeta
	Volume  string `json:"volume"`
	HeadLen int64  `json:"head_len"`
}

// maxSidecar bounds a sidecar volume this process reads.
const maxSidecar = 64 << 10

// orphanSaveAge is how long a snapshot volume may go without its sidecar
// (a build that died) before the sweep deletes it.
const orphanSaveAge = time.Hour

// remoteSnapVolRe parses a remote snapshot's volume names: slot, key, kind.
var remoteSnapVolRe = regexp.MustCompile(`^(snapshot-vm-[0-9]+m-[0-9]+c(?:-t[0-9a-f]{16})?)-([0-9a-f]{12})\.(snap|json)$`)

// remoteSnapshotDir is a remote host's snapshot "dir": the key of its
// slots in the service's maps, never a path of this machine.
func remoteSnapshotDir(files HostFiles) string { return "remote " + files.URI + " " }

func remoteStem(slot string, key snapshotKey) string { return slot + "-" + key.sum()[:12] }

// remoteSnapshotFor is snapshotFor on a remote host.
func (s *Service) remoteSnapshotFor(ctx context.Context, hv Hypervisor, vm VM, guest image.Guest, files HostFiles, key snapshotKey,
	slot string) (*hypervisor.Snapshot, string) {
	rh, ok := hv.(remoteSnapshotHV)
	if !ok {
		return nil, FallbackOff
	}
	stem := remoteStem(slot, key)
	b, err := rh.ReadVolume(ctx, stem+".json", maxSidecar)
	if errors.Is(err, hypervisor.ErrNotFound) {
		reason := FallbackNone
		if s.remoteSlotHasOther(ctx, rh, slot, stem) {
			s.log.Info("vm snapshot stale (image or vm shape changed): rebuilding", "host", vm.HostURI, "slot", slot)
			reason = FallbackStale
		}
		s.buildSnapshot(hv, vm, guest, files, key)
		return nil, reason
	}
	if err != nil {
		s.log.Warn("vm snapshot sidecar: cold boot", "host", vm.HostURI, "slot", slot, "err", err)
		return nil, FallbackFailed
	}
	var meta remoteSnapshotMeta
	if err := json.Unmarshal(b, &meta); err != nil || meta.Key != key.sum() || meta.Volume != stem+".snap" {
		s.log.Warn("vm snapshot unreadable: rebuilding", "host", vm.HostURI, "slot", slot, "err", err)
		s.removeRemoteSnapshot(hv, files, slot)
		s.buildSnapshot(hv, vm, guest, files, key)
		return nil, FallbackCorrupt
	}
	return &hypervisor.Snapshot{Path: rh.SnapshotPath(meta.Volume), Volume: &hypervisor.VolumeSnapshot{
		Volume: meta.Volume, Size: meta.Size, HeadLen: meta.HeadLen, HeadSHA256: meta.SHA256}}, ""
}

// remoteSlotHasOther reports whether the host holds a snapshot of slot
// under another key than stem's.
func (s *Service) remoteSlotHasOther(ctx context.Context, rh remoteSnapshotHV, slot, stem string) bool {
	vols, err := rh.Volumes(ctx)
	if err != nil {
		return false
	}
	for _, v := range vols {
		if m := remoteSnapVolRe.FindStringSubmatch(v.Name); m != nil && m[1] == slot && m[3] == "json" && m[1]+"-"+m[2] != stem {
			return true
		}
	}
	return false
}

// removeRemoteSnapshot deletes every snapshot of slot on the host (any
// key; restore clones are independent copies and stay).
func (s *Service) removeRemoteSnapshot(hv Hypervisor, files HostFiles, slot string) {
	rh, ok := hv.(remoteSnapshotHV)
	if !ok {
		return
	}
	ctx, cancel := s.stop.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vols, err := rh.Volumes(ctx)
	if err != nil {
		s.log.Warn("remove vm snapshot", "host", files.URI, "slot", slot, "err", err)
		return
	}
	for _, v := range vols {
		if m := remoteSnapVolRe.FindStringSubmatch(v.Name); m != nil && m[1] == slot {
			if err := rh.DeleteVolume(ctx, v.Name); err != nil {
				s.log.Warn("remove vm snapshot", "host", files.URI, "volume", v.Name, "err", err)
			}
		}
	}
}

// saveRemoteSnapshot saves the snapshot VM id into the host's pool and
// writes its sidecar; the VM has ended when it returns nil.
func (s *Service) saveRemoteSnapshot(ctx context.Context, hv Hypervisor, id string, key snapshotKey, slot string,
	start time.Time) (snapshotMeta, error) {
	rh, ok := hv.(remoteSnapshotHV)
	if !ok {
		return snapshotMeta{}, fmt.Errorf("save snapshot: %w: host has no storage pool", ErrUnavailable)
	}
	stem := remoteStem(slot, key)
	// A save of this key without its sidecar is a build that died.
	if _, err := rh.ReadVolume(ctx, stem+".json", maxSidecar); !errors.Is(err, hypervisor.ErrNotFound) {
		return snapshotMeta{}, fmt.Errorf("save snapshot %s: sidecar there or unreadable: %w", stem, errors.Join(err, errdefs.ErrConflict))
	}
	if err := rh.DeleteVolume(ctx, stem+".snap"); err != nil {
		return snapshotMeta{}, fmt.Errorf("save snapshot %s: %w", stem, err)
	}
	vs, err := rh.SaveSnapshotVolume(ctx, id, stem+".snap")
	if err != nil {
		return snapshotMeta{}, err
	}
	meta := remoteSnapshotMeta{
		snapshotMeta: snapshotMeta{Key: key.sum(), Inputs: key, SHA256: vs.HeadSHA256, Size: vs.Size, BuiltAt: s.cfg.Clock.Now().UTC(),
			BuildMS: time.Since(start).Milliseconds()},
		Volume: vs.Volume, HeadLen: vs.HeadLen,
	}
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return snapshotMeta{}, fmt.Errorf("snapshot metadata: %w", err)
	}
	if err := rh.WriteVolume(ctx, stem+".json", b); err != nil {
		return snapshotMeta{}, fmt.Errorf("snapshot metadata: %w", err)
	}
	return meta.snapshotMeta, nil
}

// sweepRemoteSnapshots is the leader's sweep of a remote host's snapshots
// (files are the host's current files): restore clones of VMs that are not
// booting, snapshots whose key is not their slot's current one, snapshots
// of deleted tenants, and saves whose sidecar never came.
func (s *Service) sweepRemoteSnapshots(ctx context.Context, uri string, files HostFiles) {
	_, hv, err := s.liveHost(uri)
	if err != nil {
		return
	}
	rh, ok := hv.(remoteSnapshotHV)
	if !ok {
		return
	}
	vols, err := rh.Volumes(ctx)
	if err != nil {
		s.log.Warn("sweep vm snapshots", "host", uri, "err", err)
		return
	}
	del := func(name, why string) {
		if err := rh.DeleteVolume(ctx, name); err != nil {
			s.log.Warn("sweep vm snapshots", "host", uri, "volume", name, "err", err)
			return
		}
		s.log.Info("vm snapshot volume deleted", "host", uri, "volume", name, "why", why)
	}
	sidecars := map[string]bool{}
	for _, v := range vols {
		if m := remoteSnapVolRe.FindStringSubmatch(v.Name); m != nil && m[3] == "json" {
			sidecars[m[1]+"-"+m[2]] = true
		}
	}
	dir := remoteSnapshotDir(files)
	for _, v := range vols {
		if base, vmID, ok := strings.Cut(v.Name, hypervisor.RestoreSuffix); ok && strings.HasPrefix(base, "snapshot-") {
			vm, err := s.store.vmByID(ctx, vmID)
			if errors.Is(err, errdefs.ErrNotFound) || (err == nil && vm.State != StateBooting) {
				del(v.Name, "restore clone of a vm not booting")
			}
			continue
		}
		if base, _, ok := strings.Cut(v.Name, ".json.part-"); ok && remoteSnapVolRe.MatchString(base+".json") &&
			!v.Modified.IsZero() && s.cfg.Clock.Since(v.Modified) > orphanSaveAge {
			del(v.Name, "abandoned sidecar upload")
			continue
		}
		m := remoteSnapVolRe.FindStringSubmatch(v.Name)
		if m == nil {
			continue
		}
		slot, stem := m[1], m[1]+"-"+m[2]
		if m[3] == "snap" {
			s.snaps.mu.Lock()
			_, building := s.snaps.building[dir+slot]
			s.snaps.mu.Unlock()
			if !sidecars[stem] && !building && !v.Modified.IsZero() && s.cfg.Clock.Since(v.Modified) > orphanSaveAge {
				del(v.Name, "save without a sidecar")
			}
			continue
		}
		why, err := s.remoteSnapshotObsolete(ctx, rh, hv, uri, files, v.Name)
		if err != nil {
			s.log.Warn("sweep vm snapshots", "host", uri, "volume", v.Name, "err", err)
			continue
		}
		if why != "" {
			del(stem+".snap", why)
			del(v.Name, why)
		}
	}
}

// remoteSnapshotObsolete says why the snapshot of the sidecar volume name
// is to go ("" when it stays).
func (s *Service) remoteSnapshotObsolete(ctx context.Context, rh remoteSnapshotHV, hv Hypervisor, uri string, files HostFiles,
	name string) (string, error) {
	b, err := rh.ReadVolume(ctx, name, maxSidecar)
	if err != nil {
		return "", err
	}
	var meta remoteSnapshotMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return "unreadable sidecar", nil
	}
	if why, err := s.snapshotTenantGone(ctx, meta.Inputs.Tenant); why != "" || err != nil {
		return why, err
	}
	key, err := s.snapshotKeyFor(ctx, hv, VM{TenantID: meta.Inputs.Tenant, HostURI: uri, MemoryMiB: meta.Inputs.MemoryMiB,
		VCPUs: meta.Inputs.VCPUs}, files)
	if err != nil {
		return "", err
	}
	if key.sum() != meta.Key {
		return "old key (image, shape or setting changed)", nil
	}
	return "", nil
}
