package probe

import (
	"fmt"

	"github.com/stockade-dev/stockade/hypervisor"
)

// DomainShares reads the definition the VM pools give every tenant VM
// (hypervisor.BuildDomain, for each domain type) and reports whether it
// shares anything of the host with the guest (folders, host devices,
// shared memory) and whether it has a network device (which would bypass
// the egress gateway).
func DomainShares() (hostShares, networkDevices bool, err error) {
	for _, typ := range []string{hypervisor.TypeQEMU, hypervisor.TypeKVM} {
		dom, err := hypervisor.BuildDomain(hypervisor.DomainSpec{
			ID: "compliance-check", TenantID: "compliance-check", InstallationID: "compliance-check", VCPUs: 1, MemoryMiB: 512,
			Type: typ, Kernel: "/vmlinux", Initramfs: "/initramfs", ChannelName: "org.stockade.agent.0",
			Disks: []hypervisor.Disk{{Path: "/template.ext4", Target: "vdb", ReadOnly: true}},
		})
		if err != nil {
			return false, false, fmt.Errorf("read the tenant vm definition: %w", err)
		}
		d := dom.Devices
		if d == nil {
			continue
		}
		hostShares = hostShares || len(d.Filesystems) > 0 || len(d.Hostdevs) > 0 || len(d.Shmems) > 0
		networkDevices = networkDevices || len(d.Interfaces) > 0
	}
	return hostShares, networkDevices, nil
}
