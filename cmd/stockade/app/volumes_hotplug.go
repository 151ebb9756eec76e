package app

import "github.com/stockade-dev/stockade/sandbox/volumes"

// volumeHotplug is the VM pools' disk hot-plug for the volume service. Nil
// while the app has no VM pools: volumes are then kept but not attached,
// and a create naming one says so.
func volumeHotplug(a *App) volumes.Hotplug {
	if a.VMs == nil {
		return nil
	}
	return volumes.PoolHotplug(a.VMs)
}
