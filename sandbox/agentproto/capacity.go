package agentproto

// How many sandboxes one guest takes: the agent enforces it (from the
// guest's MemTotal) and the host plans with it (from the VM's memory), so
// placement and admission never count on room the agent refuses.
const (
	// CapacityReserveMiB is the guest memory kept for the kernel's
	// working set, the agent and the templates' page cache.
	CapacityReserveMiB = 128
	// SandboxReserveMiB is the guest memory counted per sandbox: several
	// times what an idle one costs (1.7 MiB: README "Density"), so a
	// guest filled with idle sandboxes still has room for some of them to
	// work. What a sandbox may use beyond that is bounded by its own
	// memory limit.
	SandboxReserveMiB = 6
	// MaxSandboxesPerGuest bounds the count whatever the memory: the
	// agent's descriptors (a few per sandbox) and PIDs.
	MaxSandboxesPerGuest = 1024
)

// SandboxCapacity is how many sandboxes a guest with memMiB of usable
// memory (the kernel's MemTotal) takes: at least 1.
func SandboxCapacity(memMiB int) int {
	return min(max((memMiB-CapacityReserveMiB)/SandboxReserveMiB, 1), MaxSandboxesPerGuest)
}

// GuestMemTotalMiB is what the guest kernel will report as MemTotal for a
// VM of vmMiB, at the low end: the kernel's image and its page
// structures (1/64 of memory) are not part of it. The host plans with it,
// so it never expects more room than the agent will find.
func GuestMemTotalMiB(vmMiB int) int {
	return max(vmMiB-vmMiB/64-guestKernelMiB, 0)
}

// guestKernelMiB covers the guest kernel's image and its reserved regions
// (measured: a 2 GiB VM reports MemTotal 1967 MiB, 49 MiB below
// 2048 - 2048/64).
const guestKernelMiB = 64
