package usage

import "github.com/stockade-dev/stockade/tenants"

// WarnAt is the share of a quota from which pages and the API warn.
const WarnAt = 0.8

// QuotaLine is one quota with what the tenant holds or used against it.
type QuotaLine struct {
	Name  string  `json:"name"`
	Label string  `json:"label"`
	Used  float64 `json:"used"`
	Limit float64 `json:"limit"`
	// Share is Used/Limit (1 when the limit is 0 and something is used).
	Share float64 `json:"share"`
	// Warn: at WarnAt of the limit or more; Over: at the limit (nothing more
	// of it can be had).
	Warn bool `json:"warn"`
	Over bool `json:"over"`
}

// QuotaLines sets what the tenant holds now (held: running sandboxes with
// their vCPUs and memory, VMs) and its CPU time this month against its quota.
func QuotaLines(q tenants.Quota, held tenants.Usage, cpuSecondsThisMonth float64) []QuotaLine {
	lines := []QuotaLine{
		{Name: tenants.QuotaMaxSandboxes, Label: "Sandboxes running", Used: float64(held.Sandboxes), Limit: float64(q.MaxSandboxes)},
		{Name: tenants.QuotaMaxVCPUs, Label: "vCPUs of running sandboxes", Used: float64(held.VCPUs), Limit: float64(q.MaxVCPUs)},
		{Name: tenants.QuotaMaxMemoryMiB, Label: "Memory of running sandboxes (MiB)", Used: float64(held.MemoryMiB), Limit: float64(q.MaxMemoryMiB)},
		{Name: tenants.QuotaMaxVMs, Label: "VMs", Used: float64(held.VMs), Limit: float64(q.MaxVMs)},
		{Name: tenants.QuotaMaxCPUHoursMonthly, Label: "CPU-hours this month", Used: cpuSecondsThisMonth / 3600, Limit: float64(q.MaxCPUHoursMonthly)},
	}
	for i := range lines {
		l := &lines[i]
		switch {
		case l.Limit > 0:
			l.Share = l.Used / l.Limit
		case l.Used > 0:
			l.Share = 1
		}
		l.Warn = l.Share >= WarnAt
		l.Over = l.Limit <= l.Used
		if l.Name != tenants.QuotaMaxCPUHoursMonthly {
			// Held resources: at the limit means the next one is refused.
			l.Over = l.Used >= l.Limit
		}
	}
	return lines
}
