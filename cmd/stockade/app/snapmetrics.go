package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockade-dev/stockade/sandbox/vmpool"
)

// snapshotCollector exports the VM pool's memory snapshot counters
// (sandbox/vmpool snapshot.go): restores, cold boots by the reason they did
// not restore, snapshots built. Counted since this process started.
type snapshotCollector struct {
	vms                      *vmpool.Service
	restores, fallbacks, bld *prometheus.Desc
}

func newSnapshotCollector(vms *vmpool.Service) *snapshotCollector {
	return &snapshotCollector{
		vms: vms,
		restores: prometheus.NewDesc("stockade_vm_snapshot_restores_total",
			"VMs started by restoring a memory snapshot of a booted guest.", nil, nil),
		fallbacks: prometheus.NewDesc("stockade_vm_cold_boots_total",
			"VMs cold booted, by why they were not restored (off, none, building, stale, corrupt, restore_error, backoff).",
			[]string{"reason"}, nil),
		bld: prometheus.NewDesc("stockade_vm_snapshot_builds_total", "Memory snapshots built.", nil, nil),
	}
}

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.restores
	ch <- c.fallbacks
	ch <- c.bld
}

func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.vms.SnapshotCounts()
	ch <- prometheus.MustNewConstMetric(c.restores, prometheus.CounterValue, float64(n.Restores))
	ch <- prometheus.MustNewConstMetric(c.bld, prometheus.CounterValue, float64(n.Builds))
	for reason, v := range n.Fallback {
		ch <- prometheus.MustNewConstMetric(c.fallbacks, prometheus.CounterValue, float64(v), reason)
	}
}
