package app

import "github.com/stockade-dev/stockade/sandbox/volumes"

// volumeHotplug adapts the VM pools' disk hotplug to the volume service.
// Nil until the pools can hot-attach disks (hypervisor/hotplug.go): the
// volume service then keeps volumes and refuses to attach them, saying so.
func volumeHotplug(*App) volumes.Hotplug { return nil }
