package views

import (
	"fmt"
	"strings"
	"time"
)

// VMsView is the tenant's VMs page: the pool settings, the VM table (polled
// for live state) and, when VMs cannot be managed, why.
type VMsView struct {
	Table   VMTable
	CanEdit bool // start, stop, destroy, recycle, pool settings
	// Unavailable says why VMs cannot be started or stopped now (libvirt
	// unreachable, no guest image); empty when they can.
	Unavailable string
	Pool        PoolForm
	// VMVCPUs and VMMemoryMiB are the saved pool's size of a new VM.
	VMVCPUs, VMMemoryMiB int
	Quota                QuotaView
	IsOperator           bool
}

// VMTable is the VM list, rendered alone as the polled fragment.
type VMTable struct {
	Rows       []VMRow
	CanEdit    bool
	CSRF       string
	ShowTenant bool // the operators' table across tenants
	// Operator offers Destroy on every active VM (a stuck one its tenant
	// cannot end), through the operators' route.
	Operator bool
	PollURL  string // fetched every 2 s to replace the table; "" disables it
}

// VMRow is one VM.
type VMRow struct {
	ID           string
	Tenant       string // slug, operators' table only
	State        string // booting, running, stopping, stopped, lost, failed
	StateReason  string
	Phase        string
	Progress     int // boot steps done of ProgressMax
	ProgressMax  int
	PhaseFor     time.Duration // time in the current phase
	Uptime       time.Duration // zero when not running
	VCPUs        int
	MemoryMiB    int
	CPUPercent   float64 // -1 when unknown
	AgentVersion string
	Host         string
	CreatedAt    time.Time
	Acquired     bool // handed out (not warm)
	Boot         time.Duration
	BootKind     string // "restored", "cold: <why not restored>", "" before running
}

// PoolForm is the pool settings form: values as typed, and field errors.
type PoolForm struct {
	VCPUs             string
	MemoryMiB         string
	MaxVMs            string
	WarmVMs           string
	RecycleAfterHours string
	Errors            map[string]string // keyed by field name or FormError
}

// QuotaView is the tenant's quota next to what its active VMs use.
type QuotaView struct {
	MaxVMs, UsedVMs             int
	MaxVCPUs, UsedVCPUs         int
	MaxMemoryMiB, UsedMemoryMiB int
}

// vmActive reports whether a VM still holds resources.
func (r VMRow) active() bool {
	return r.State == "booting" || r.State == "running" || r.State == "stopping"
}

func (r VMRow) shortID() string {
	if len(r.ID) > 13 {
		return r.ID[len(r.ID)-12:]
	}
	return r.ID
}

// vmPill colours a VM state: running good, on the way warn, dead bad.
func vmPill(state string) string {
	switch state {
	case "running":
		return "pill pill-good"
	case "booting", "stopping":
		return "pill pill-warn"
	case "lost", "failed":
		return "pill pill-bad"
	}
	return "pill"
}

// showDuration is a short human duration: 45s, 3m 05s, 2h 10m, 3d 4h.
func showDuration(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

func showPercent(p float64) string {
	if p < 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", p)
}

func showMiB(m int) string {
	if m >= 1024 && m%1024 == 0 {
		return fmt.Sprintf("%d GiB", m/1024)
	}
	return fmt.Sprintf("%d MiB", m)
}

func used(n, limit int) string { return fmt.Sprintf("%d of %d", n, limit) }

func usedMiB(n, limit int) string { return showMiB(n) + " of " + showMiB(limit) }

func healthPill(h string) string {
	if h == "ok" {
		return "pill pill-good"
	}
	return "pill pill-bad"
}

func phaseLabel(r VMRow) string {
	if r.Phase == "" {
		return r.State
	}
	return strings.ReplaceAll(r.Phase, "_", " ")
}

// bootLabel says how the VM started and how long it took; the cold
// boot's reason goes in bootReason.
func bootLabel(r VMRow) string {
	kind, _, _ := strings.Cut(r.BootKind, ":")
	if kind == "" {
		return ""
	}
	return kind + " in " + showDuration(r.Boot)
}

func bootReason(r VMRow) string {
	_, why, _ := strings.Cut(r.BootKind, ": ")
	if why == "" {
		return "restored from a memory snapshot of a booted guest"
	}
	return "cold boot; not restored: " + why
}

// operatorDestroyConfirm is what an operator confirms before destroying a
// tenant's VM.
func operatorDestroyConfirm(r VMRow) string {
	what := "Destroy VM " + r.shortID() + " of tenant " + r.Tenant + " now (" + r.State + ")?"
	if r.Acquired {
		what += " It is in use: its sandboxes end at once."
	}
	return what + " The tenant's audit log records it as yours."
}
