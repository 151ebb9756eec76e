package agentproto

import "testing"

func TestSandboxCapacity(t *testing.T) {
	tests := []struct {
		name   string
		memMiB int
		want   int
	}{
		{"none", 0, 1},
		{"below the reserve", 100, 1},
		{"one sandbox's worth", CapacityReserveMiB + SandboxReserveMiB, 1},
		{"512 MiB guest", 457, (457 - CapacityReserveMiB) / SandboxReserveMiB},
		{"2 GiB guest (MemTotal 1967 MiB)", 1967, 306},
		{"huge guest", 1 << 20, MaxSandboxesPerGuest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SandboxCapacity(tt.memMiB); got != tt.want {
				t.Errorf("Got(SandboxCapacity(%d)) = %d; want %d", tt.memMiB, got, tt.want)
			}
		})
	}
}

// The host plans with GuestMemTotalMiB of the VM's memory: it must not
// exceed what guests of that size report, or placement would count on
// sandboxes the agent refuses.
func TestGuestMemTotalMiB(t *testing.T) {
	tests := []struct {
		vmMiB, guestMemTotalMiB int // measured
	}{
		{512, 457},
		{2048, 1967},
	}
	for _, tt := range tests {
		if got := GuestMemTotalMiB(tt.vmMiB); got > tt.guestMemTotalMiB || got < tt.guestMemTotalMiB*9/10 {
			t.Errorf("Got(GuestMemTotalMiB(%d)) = %d; want at most the measured %d, within 10 %%", tt.vmMiB, got, tt.guestMemTotalMiB)
		}
		if host, agent := SandboxCapacity(GuestMemTotalMiB(tt.vmMiB)), SandboxCapacity(tt.guestMemTotalMiB); host > agent {
			t.Errorf("Got(capacity of a %d MiB vm) = host %d, agent %d; want host <= agent", tt.vmMiB, host, agent)
		}
	}
	if got := GuestMemTotalMiB(10); got != 0 {
		t.Errorf("Got(GuestMemTotalMiB(10)) = %d; want 0", got)
	}
}
