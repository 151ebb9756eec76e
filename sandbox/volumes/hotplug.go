package volumes

import (
	"context"

	"github.com/stockade-dev/stockade/sandbox/vmpool"
)

// PoolHotplug is the Hotplug of the VM pools' disk hot-plug
// (vmpool.EnsureDisk, DetachDisk).
func PoolHotplug(vms *vmpool.Service) Hotplug { return poolHotplug{vms} }

type poolHotplug struct{ vms *vmpool.Service }

// AttachDisk attaches d unless a disk of its serial is there already (a
// release that could not finish left it): the guest's mount then says
// whether its mode serves.
func (p poolHotplug) AttachDisk(ctx context.Context, tenantID, vmID string, d Disk) error {
	_, err := p.vms.EnsureDisk(ctx, tenantID, vmID, d.Path, d.Serial, d.ReadOnly, nil)
	return err
}

func (p poolHotplug) DetachDisk(ctx context.Context, tenantID, vmID string, d Disk) error {
	return p.vms.DetachDisk(ctx, tenantID, vmID, d.Serial, false)
}
