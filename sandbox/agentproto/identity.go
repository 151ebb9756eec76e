package agentproto

import "time"

// Identity bounds (the agent refuses anything outside them).
const (
	MinIdentitySeed = 32
	MaxIdentitySeed = 512
)

// IdentityRequest is the host's part of a VM's identity (OpVMIdentity).
type IdentityRequest struct {
	// Seed is random bytes drawn by the host (crypto/rand), between
	// MinIdentitySeed and MaxIdentitySeed long: the agent writes them into
	// the kernel's pool with RNDADDENTROPY and forces a reseed of the
	// kernel's CRNG (RNDRESEEDCRNG) before answering.
	Seed []byte `json:"seed"`
	// Now is the host's wall clock; the agent sets CLOCK_REALTIME to it
	// (a restored guest wakes with the clock of the moment it was saved).
	Now time.Time `json:"now"`
	// Generation names this life of the VM (the host's VM id); the agent
	// keeps it for its log and Stats, never as a credential.
	Generation string `json:"generation"`
}

// IdentityResult is what the agent did. All of it is the guest's claim.
type IdentityResult struct {
	// Reseeded: the seed went into the pool and the CRNG was reseeded.
	Reseeded bool `json:"reseeded"`
	// ClockStepped is how far the agent moved the guest's clock.
	ClockStepped time.Duration `json:"clock_stepped_ns"`
	// BootID is the kernel's /proc/sys/kernel/random/boot_id as read after
	// the reseed (tests compare it between VMs).
	BootID string `json:"boot_id"`
}
