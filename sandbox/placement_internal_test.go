package sandbox

import (
	"testing"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
)

// TestFits: a VM takes a sandbox while it holds fewer than its capacity
// rule allows (and MaxPerVM, when set), the vCPUs fit, and the memory
// limits add up to no more than its memory after the reserve, times
// MemoryOvercommit; one sandbox never gets more than the VM's memory.
func TestFits(t *testing.T) {
	vm := vmpool.VM{VCPUs: 2, MemoryMiB: 2048}
	capacity := agentproto.SandboxCapacity(agentproto.GuestMemTotalMiB(2048))
	small := Sandbox{VCPUs: 1, MemoryMiB: 16}
	tests := []struct {
		name string
		cfg  Config
		load vmLoad
		sb   Sandbox
		want bool
	}{
		{"empty vm", Config{}, vmLoad{}, small, true},
		{"over the old fixed cap of 64", Config{}, vmLoad{Sandboxes: 64, MemoryMiB: 64 * 16}, small, true},
		{"at its capacity", Config{MemoryOvercommit: 8}, vmLoad{Sandboxes: capacity, MemoryMiB: capacity * 16}, small, false},
		{"one below its capacity", Config{MemoryOvercommit: 8}, vmLoad{Sandboxes: capacity - 1, MemoryMiB: (capacity - 1) * 16}, small, true},
		{"at MaxPerVM", Config{MaxPerVM: 10}, vmLoad{Sandboxes: 10, MemoryMiB: 160}, small, false},
		{"memory limits full", Config{}, vmLoad{Sandboxes: 120, MemoryMiB: 1920}, small, false},
		{"memory limits full, overcommitted 2x", Config{MemoryOvercommit: 2}, vmLoad{Sandboxes: 120, MemoryMiB: 1920}, small, true},
		{"overcommit 2x, full", Config{MemoryOvercommit: 2}, vmLoad{Sandboxes: 240, MemoryMiB: 3840}, small, false},
		{"one sandbox bigger than the vm, overcommitted", Config{MemoryOvercommit: 8}, vmLoad{}, Sandbox{VCPUs: 1, MemoryMiB: 2000}, false},
		{"too many vcpus", Config{}, vmLoad{}, Sandbox{VCPUs: 3, MemoryMiB: 16}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.checkAndSetDefaults()
			s := &Service{cfg: tt.cfg}
			if got := s.fits(vm, tt.load, tt.sb); got != tt.want {
				t.Errorf("Got(fits(%+v, %+v)) = %v; want %v", tt.load, tt.sb, got, tt.want)
			}
		})
	}
}
