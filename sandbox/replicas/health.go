package replicas

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Health is what this replica sees of the installation's replicas and VM
// leases.
type Health struct {
	Replicas        int // live
	Leases          int // every VM lease
	LeasesHeld      int // this replica's (as the database says)
	LeasesExpired   int // waiting for adoption
	LeasesByReplica map[string]int
}

// BuildLeasePrefix names the leases of VMs that are no tenant's: a memory
// snapshot build's VM holds a channel lease like any VM (so another replica
// destroys it only once its builder is gone: sandbox/vmpool
// snapshot_orphans.go), but Health counts tenants' VMs only.
const BuildLeasePrefix = "snapshot-"

// Health counts the live replicas and the VM leases (of tenants' VMs).
func (r *Registry) Health(ctx context.Context) (Health, error) {
	reps, err := r.Replicas(ctx)
	if err != nil {
		return Health{}, err
	}
	ls, err := r.Leases(ctx)
	if err != nil {
		return Health{}, err
	}
	now := r.now()
	h := Health{Replicas: len(reps), LeasesByReplica: map[string]int{}}
	for _, l := range ls {
		if strings.HasPrefix(l.VMID, BuildLeasePrefix) {
			continue
		}
		h.Leases++
		if !l.ExpiresAt.After(now) {
			h.LeasesExpired++
			continue
		}
		h.LeasesByReplica[l.Owner]++
		if l.Owner == r.cfg.ID {
			h.LeasesHeld++
		}
	}
	return h, nil
}

// Collector exposes the replica's leases on /metrics (forwards are
// web/forward's stockade_forwards_total). leading reports
// whether this replica holds the leader lease and its epoch.
type Collector struct {
	reg     *Registry
	leading func() (bool, int64)

	replicas, leases, leader, epoch    *prometheus.Desc
	adopted, failovers, lost, forwards *prometheus.Desc
	held                               *prometheus.Desc
}

// NewCollector returns the metrics of r.
func NewCollector(r *Registry, leading func() (bool, int64)) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &Collector{reg: r, leading: leading,
		replicas:  d("stockade_replicas", "Live control-plane replicas (registration not expired)."),
		leases:    d("stockade_vm_leases", "VM channel leases of the installation, by state (valid, expired: adoption pending).", "state"),
		held:      d("stockade_vm_leases_held", "VM channel leases this replica holds."),
		leader:    d("stockade_leader", "1 when this replica holds the leader lease."),
		epoch:     d("stockade_leader_epoch", "Epoch of the leader lease this replica last held."),
		adopted:   d("stockade_vm_lease_adoptions_total", "VM leases this replica took at adoption (absent or expired)."),
		failovers: d("stockade_vm_lease_failovers_total", "VM leases this replica took from another replica whose lease expired."),
		lost:      d("stockade_vm_lease_lost_total", "VM leases this replica held and had to let go of."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.replicas, c.leases, c.held, c.leader, c.epoch, c.adopted, c.failovers, c.lost} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.reg.Stats()
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	n := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	g(c.held, float64(st.Held))
	n(c.adopted, st.Adopted)
	n(c.failovers, st.Failovers)
	n(c.lost, st.Lost)
	if c.leading != nil {
		lead, epoch := c.leading()
		v := 0.0
		if lead {
			v = 1
		}
		g(c.leader, v)
		g(c.epoch, float64(epoch))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*c.reg.cfg.Heartbeat)
	defer cancel()
	h, err := c.reg.Health(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.replicas, fmt.Errorf("replica health: %w", err))
		return
	}
	g(c.replicas, float64(h.Replicas))
	g(c.leases, float64(h.Leases-h.LeasesExpired), "valid")
	g(c.leases, float64(h.LeasesExpired), "expired")
}
