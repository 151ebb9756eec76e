package vmpool

import (
	"errors"

	"github.com/stockade-dev/stockade/tenants/errdefs"
)

var (
	// ErrUnavailable: VMs cannot be booted, stopped or inspected live right
	// now: no libvirt host can be reached, none has room, or there is no
	// guest image. What is stored (lists, pool settings) stays readable.
	// It matches errdefs.ErrUnavailable: 503, problem type
	// "hypervisor-unavailable".
	ErrUnavailable = errdefs.Unavailable("hypervisor")
	// ErrNoIdleVM: the tenant has no running VM that is not handed out.
	ErrNoIdleVM = errors.New("no idle vm")

	// Causes of a boot or adoption being cancelled.
	errDestroyed = errors.New("vm destroyed")
	errLost      = errors.New("vm lost")
)
