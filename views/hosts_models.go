package views

import "time"

// HostsView is the operators' hosts page: the hosts with their actions, the
// add form, and every tenant's VMs.
type HostsView struct {
	Hosts []HostRow
	VMs   VMTable
	Add   HostForm
	// Unavailable says why hosts cannot be shown (no VM service).
	Unavailable string
}

// HostForm is the add-a-host form, kept on a refusal.
type HostForm struct {
	URI, Labels string
	Errors      map[string]string // keyed by field name or FormError
}

// HostRow is one libvirt host.
type HostRow struct {
	URI            string
	Health         string // ok or unavailable
	Reason         string
	Configured     bool
	DomainType     string
	CPUs           int
	MemoryMiB      int
	FreeMemoryMiB  int
	VMs            int
	AllocVCPUs     int
	AllocMemoryMiB int
	LastSeen       time.Time // zero: never reached
	// State is what operators see: active, cordoned, draining, drained,
	// down or not configured; StateReason the operator's reason.
	State       string
	StateReason string
	Labels      string // k=v,k=v
	DownAt      time.Time
}

func hostStatePill(state string) string {
	switch state {
	case "active":
		return "pill pill-good"
	case "down", "not configured":
		return "pill pill-bad"
	}
	return "pill pill-warn"
}

// hostActions are the buttons a host in state offers.
func hostActions(h HostRow) []string {
	switch h.State {
	case "active":
		return []string{"cordon", "drain"}
	case "cordoned":
		return []string{"uncordon", "drain"}
	case "draining":
		return []string{"uncordon"}
	case "drained":
		return []string{"uncordon", "remove"}
	case "down", "not configured":
		if h.VMs == 0 {
			return []string{"remove"}
		}
	}
	return nil
}
