package vmpool

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Hot-plugged disks (attach.go). Tenant templates (sandbox/templates) and
// volumes reach a running VM of their tenant as extra virtio disks, known
// by a serial; the VM's runtime lock keeps one change at a time. Only the
// live domain changes: a VM that ends takes its hot-plugged disks with it.

// hotplugger is what a Hypervisor that can hot-plug disks also does
// (*hypervisor.Host does).
type hotplugger interface {
	AttachDisk(ctx context.Context, id string, d hypervisor.HotDisk) error
	DetachDisk(ctx context.Context, id, target string) error
	LiveDisks(ctx context.Context, id string) ([]hypervisor.HotDisk, error)
}

// ErrNoDiskSlot: the VM has no free disk slot.
var ErrNoDiskSlot = errors.New("no free disk slot in the vm")

// AttachedDisk is a disk of a running VM.
type AttachedDisk = hypervisor.HotDisk

func (s *Service) hotplugVM(ctx context.Context, tenantID, vmID string) (*runtime, hotplugger, error) {
	rt, hp, _, err := s.hotplugVMOn(ctx, tenantID, vmID)
	return rt, hp, err
}

// hotplugVMOn is hotplugVM that also returns the VM's host.
func (s *Service) hotplugVMOn(ctx context.Context, tenantID, vmID string) (*runtime, hotplugger, string, error) {
	vm, err := s.store.VM(ctx, tenantID, vmID)
	if err != nil {
		return nil, nil, "", err
	}
	if vm.State != StateRunning {
		return nil, nil, "", fmt.Errorf("disks of vm %s: %w: the vm is %s", vmID, errdefs.ErrConflict, vm.State)
	}
	rt := s.lookupRuntime(vmID)
	if rt == nil {
		return nil, nil, "", fmt.Errorf("disks of vm %s: %w: not running here", vmID, ErrUnavailable)
	}
	_, hv, err := s.liveHost(vm.HostURI)
	if err != nil {
		return nil, nil, "", fmt.Errorf("disks of vm %s: %w", vmID, err)
	}
	hp, ok := hv.(hotplugger)
	if !ok {
		return nil, nil, "", fmt.Errorf("disks of vm %s: %w: the host cannot hot-plug disks", vmID, ErrUnavailable)
	}
	return rt, hp, vm.HostURI, nil
}

// Disks lists the disks of the tenant's running VM.
func (s *Service) Disks(ctx context.Context, tenantID, vmID string) ([]AttachedDisk, error) {
	_, hp, err := s.hotplugVM(ctx, tenantID, vmID)
	if err != nil {
		return nil, err
	}
	return hp.LiveDisks(ctx, vmID)
}

// EnsureDisk attaches the file at path to the tenant's running VM under
// serial unless a disk with that serial is there already, in the first
// free slot. On a remote host a read-only file is attached from its
// volume in the host's pool, uploaded first when missing (hostfiles.go). It reports whether it attached it now. Before attaching,
// free (when set) may detach disks to make room: it is called with the
// VM's disks, under the VM's lock, and returns the serials to detach
// (each released in the guest by its caller's release first).
func (s *Service) EnsureDisk(ctx context.Context, tenantID, vmID, path, serial string, readOnly bool,
	free func(ctx context.Context, disks []AttachedDisk) error) (bool, error) {
	rt, hp, uri, err := s.hotplugVMOn(ctx, tenantID, vmID)
	if err != nil {
		return false, err
	}
	rt.disks.Lock()
	defer rt.disks.Unlock()
	disks, err := hp.LiveDisks(ctx, vmID)
	if err != nil {
		return false, err
	}
	if slices.ContainsFunc(disks, func(d AttachedDisk) bool { return d.Serial == serial }) {
		return false, nil
	}
	target := freeSlot(disks)
	if target == "" && free != nil {
		if err := free(ctx, disks); err != nil {
			return false, err
		}
		if disks, err = hp.LiveDisks(ctx, vmID); err != nil {
			return false, err
		}
		target = freeSlot(disks)
	}
	if target == "" {
		return false, fmt.Errorf("attach %s to vm %s: %w", serial, vmID, ErrNoDiskSlot)
	}
	if path, err = s.diskOnHost(ctx, uri, path, readOnly); err != nil {
		return false, fmt.Errorf("attach %s to vm %s: %w", serial, vmID, err)
	}
	if err := hp.AttachDisk(ctx, vmID, hypervisor.HotDisk{Path: path, Target: target, ReadOnly: readOnly, Serial: serial}); err != nil {
		return false, err
	}
	s.log.Info("disk attached", "vm", vmID, "serial", serial, "target", target, "read_only", readOnly)
	return true, nil
}

// DetachDisk unplugs the disk with serial from the tenant's running VM
// (the guest must have let go of it); none there is ErrNotFound. Called
// from EnsureDisk's free, it must not take the VM's lock again: locked
// says the caller holds it.
func (s *Service) DetachDisk(ctx context.Context, tenantID, vmID, serial string, locked bool) error {
	rt, hp, err := s.hotplugVM(ctx, tenantID, vmID)
	if err != nil {
		return err
	}
	if !locked {
		rt.disks.Lock()
		defer rt.disks.Unlock()
	}
	disks, err := hp.LiveDisks(ctx, vmID)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(disks, func(d AttachedDisk) bool { return d.Serial == serial })
	if i < 0 {
		return fmt.Errorf("detach %s from vm %s: %w", serial, vmID, errdefs.ErrNotFound)
	}
	if err := hp.DetachDisk(ctx, vmID, disks[i].Target); err != nil {
		return err
	}
	s.log.Info("disk detached", "vm", vmID, "serial", serial, "target", disks[i].Target)
	return nil
}

// freeSlot is the first of vdb..vdz no disk uses.
func freeSlot(disks []AttachedDisk) string {
	for c := 'b'; c <= 'z'; c++ {
		t := "vd" + string(c)
		if !slices.ContainsFunc(disks, func(d AttachedDisk) bool { return d.Target == t }) {
			return t
		}
	}
	return ""
}
