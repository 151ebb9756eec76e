package vmpool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Every VM has a scratch disk: a sparse ext4 file with project quotas in
// DataDir/scratch/<installation id>/<vm id>.img, made just before its domain is defined and
// removed once the VM ended (dropRuntime); the reconcile sweeps any file
// whose VM is not active (a crash between the two), in its installation's
// folder only: installations sharing a data dir never touch each other's. The guest agent keeps
// each sandbox's writable layer and /workspace on it, so they cost disk, not
// guest memory (sandbox/agent scratch.go).

const scratchExt = ".img"

func (s *Service) scratchDir() string {
	return filepath.Join(s.cfg.DataDir, "scratch", s.installID)
}

func (s *Service) scratchPath(id string) string {
	return filepath.Join(s.scratchDir(), id+scratchExt)
}

// createScratch makes the VM's scratch disk on its host, attached after
// the nTemplates template disks. On a remote host the file made here is
// uploaded (sparse) into a volume of the host's pool and removed here.
func (s *Service) createScratch(ctx context.Context, vm VM, nTemplates int) (hypervisor.Disk, error) {
	// QEMU runs as its own user: the folders must be searchable.
	if err := os.MkdirAll(s.scratchDir(), 0o755); err != nil {
		return hypervisor.Disk{}, fmt.Errorf("create scratch disk: %w", err)
	}
	p := s.scratchPath(vm.ID)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return hypervisor.Disk{}, fmt.Errorf("create scratch disk: %w", err)
	}
	if err := image.CreateScratch(ctx, p, s.cfg.ScratchMiB); err != nil {
		return hypervisor.Disk{}, err
	}
	if s.FilesModeOf(vm.HostURI) == FilesRemote {
		defer os.Remove(p)
		st, err := s.storageOf(vm.HostURI)
		if err != nil {
			return hypervisor.Disk{}, fmt.Errorf("create scratch disk: %w", err)
		}
		name := hypervisor.ScratchVolumeName(vm.ID)
		if err := st.DeleteVolume(ctx, name); err != nil { // a boot retried
			return hypervisor.Disk{}, fmt.Errorf("create scratch disk: %w", err)
		}
		if p, err = st.UploadVolume(ctx, name, p); err != nil {
			return hypervisor.Disk{}, fmt.Errorf("create scratch disk: %w", err)
		}
	}
	return hypervisor.Disk{Path: p, Target: "vd" + string(rune('b'+nTemplates)), Discard: true}, nil
}

// removeScratch removes an ended VM's scratch disk: the file here, and its
// volume when the VM ran on a remote host (a host that does not answer
// keeps it until the sweep after it is back).
func (s *Service) removeScratch(id string) {
	if err := os.Remove(s.scratchPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("remove scratch disk", "vm", id, "err", err)
	}
	ctx, cancel := s.stop.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vm, err := s.store.vmByID(ctx, id)
	if err != nil || s.FilesModeOf(vm.HostURI) != FilesRemote {
		return
	}
	st, err := s.storageOf(vm.HostURI)
	if err == nil {
		err = st.DeleteVolume(ctx, hypervisor.ScratchVolumeName(id))
	}
	if err != nil {
		s.log.Warn("remove scratch volume", "vm", id, "host", vm.HostURI, "err", err)
	}
}

// sweepScratch removes the scratch disks of VMs that are not active.
func (s *Service) sweepScratch(ctx context.Context) {
	entries, err := os.ReadDir(s.scratchDir())
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("sweep scratch disks", "err", err)
		}
		return
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), scratchExt)
		if !ok || e.IsDir() {
			continue
		}
		vm, err := s.store.vmByID(ctx, id)
		switch {
		case errors.Is(err, errdefs.ErrNotFound) || (err == nil && !vm.State.Active()):
			s.log.Info("removed the scratch disk of an ended vm", "vm", id)
			s.removeScratch(id)
		case err != nil:
			s.log.Warn("sweep scratch disks", "vm", id, "err", err)
			return
		}
	}
}

// sweepScratchVolumes removes the scratch volumes, on a remote host, of
// VMs that are not active.
func (s *Service) sweepScratchVolumes(ctx context.Context, uri string, st hostStorage) {
	vols, err := st.Volumes(ctx)
	if err != nil {
		s.log.Warn("sweep scratch volumes", "host", uri, "err", err)
		return
	}
	for _, v := range vols {
		id, ok := strings.CutPrefix(v.Name, hypervisor.KindScratch+"-")
		if id, ok = strings.CutSuffix(id, scratchExt); !ok {
			continue
		}
		vm, err := s.store.vmByID(ctx, id)
		switch {
		case errors.Is(err, errdefs.ErrNotFound) || (err == nil && !vm.State.Active()):
			if err := st.DeleteVolume(ctx, v.Name); err != nil {
				s.log.Warn("sweep scratch volumes", "host", uri, "vm", id, "err", err)
				continue
			}
			s.log.Info("removed the scratch volume of an ended vm", "vm", id, "host", uri)
		case err != nil:
			s.log.Warn("sweep scratch volumes", "host", uri, "vm", id, "err", err)
			return
		}
	}
}
