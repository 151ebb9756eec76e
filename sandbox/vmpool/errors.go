package vmpool

import "errors"

var (
	// ErrUnavailable: VMs cannot be booted, stopped or inspected live right
	// now: no libvirt host can be reached, none has room, or there is no
	// guest image. What is stored (lists, pool settings) stays readable.
	// web/ answers it with 503.
	ErrUnavailable = errors.New("hypervisor unavailable")
	// ErrNoIdleVM: the tenant has no running VM that is not handed out.
	ErrNoIdleVM = errors.New("no idle vm")

	// Causes of a boot or adoption being cancelled.
	errDestroyed = errors.New("vm destroyed")
	errLost      = errors.New("vm lost")
)
