package usage

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockade-dev/stockade/tenants"
)

// OtherTenants is the tenant label under which the tenants beyond
// MetricsConfig.MaxTenants are summed.
const OtherTenants = "_other"

// MetricsConfig bounds the per-tenant metrics.
type MetricsConfig struct {
	// MaxTenants is how many tenants, costliest this month first, get a
	// label of their own; the rest are summed under tenant="_other" so
	// the number of series stays bounded however many tenants there are.
	// Default 200.
	MaxTenants int
	// Timeout bounds the queries of one scrape (default 5 s): a slow
	// database makes the scrape report stockade_usage_metrics_up 0, never
	// hang the scraper.
	Timeout time.Duration
	Log     *slog.Logger
	// VMs, when set, gives the running VMs with what libvirt says of them
	// (their guest CPU time, vCPUs and memory): the tenant's infrastructure
	// beside what its sandboxes were billed.
	VMs func(ctx context.Context) ([]VMFigure, error)
}

// VMFigure is one running VM as libvirt reports it.
type VMFigure struct {
	TenantID  string
	VCPUs     int
	MemoryMiB int
	// CPUTime is the guest CPU time libvirt measured since the VM started.
	CPUTime time.Duration
}

func (c *MetricsConfig) setDefaults() {
	if c.MaxTenants <= 0 {
		c.MaxTenants = 200
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// Collector exports per-tenant usage to Prometheus. It reads on each scrape:
// the month-to-date ledger sums (one query for every tenant, grouped by
// tenant and price period), the open meters (one query) and the quotas
// (one query), never a query per tenant.
type Collector struct {
	s   *Store
	cfg MetricsConfig

	vcpu, gib, cpu, egress, cost *prometheus.Desc
	running, runVCPUs, runMemory *prometheus.Desc
	quota                        *prometheus.Desc
	up, duration, tenantsDesc    *prometheus.Desc
	vms, vmCPU, vmVCPUs, vmMem   *prometheus.Desc
}

// NewCollector returns the collector of s; register it on the app's registry.
func NewCollector(s *Store, cfg MetricsConfig) *Collector {
	cfg.setDefaults()
	t := []string{"tenant"}
	return &Collector{s: s, cfg: cfg,
		vcpu:      prometheus.NewDesc("stockade_tenant_month_vcpu_seconds", "vCPU-seconds allocated to the tenant's sandboxes this calendar month (UTC).", t, nil),
		gib:       prometheus.NewDesc("stockade_tenant_month_gib_seconds", "GiB-seconds of memory allocated to the tenant's sandboxes this calendar month (UTC).", t, nil),
		cpu:       prometheus.NewDesc("stockade_tenant_month_cpu_seconds", "CPU-seconds the tenant's sandboxes' cgroups measured this calendar month (UTC).", t, nil),
		egress:    prometheus.NewDesc("stockade_tenant_month_egress_bytes", "Bytes through the egress gateway this calendar month (UTC), by direction (up: sent by the sandbox).", []string{"tenant", "direction"}, nil),
		cost:      prometheus.NewDesc("stockade_tenant_month_cost", "What the tenant's usage this calendar month (UTC) costs at its price book.", []string{"tenant", "currency"}, nil),
		running:   prometheus.NewDesc("stockade_tenant_sandboxes_running", "The tenant's sandboxes being metered now (open meters).", t, nil),
		runVCPUs:  prometheus.NewDesc("stockade_tenant_running_vcpus", "vCPUs allocated to the tenant's running sandboxes.", t, nil),
		runMemory: prometheus.NewDesc("stockade_tenant_running_memory_bytes", "Memory allocated to the tenant's running sandboxes.", t, nil),
		quota:     prometheus.NewDesc("stockade_tenant_quota", "The tenant's quota limits (summed under tenant=\"_other\").", []string{"tenant", "quota"}, nil),
		up:        prometheus.NewDesc("stockade_usage_metrics_up", "1 when the last scrape read every usage figure, 0 when a query failed or timed out.", nil, nil),
		duration:  prometheus.NewDesc("stockade_usage_metrics_scrape_seconds", "How long the usage queries of this scrape took.", nil, nil),
		vms:       prometheus.NewDesc("stockade_tenant_vms_running", "The tenant's running VMs (libvirt).", t, nil),
		vmCPU:     prometheus.NewDesc("stockade_tenant_vm_cpu_seconds", "Guest CPU time libvirt measured for the tenant's running VMs since each started.", t, nil),
		vmVCPUs:   prometheus.NewDesc("stockade_tenant_vm_vcpus", "vCPUs of the tenant's running VMs.", t, nil),
		vmMem:     prometheus.NewDesc("stockade_tenant_vm_memory_bytes", "Memory of the tenant's running VMs.", t, nil),
		tenantsDesc: prometheus.NewDesc("stockade_usage_metrics_tenants", "Tenants known, of which labelled: the rest are summed under tenant=\"_other\".",
			[]string{"kind"}, nil),
	}
}

// Describe sends every descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.vcpu, c.gib, c.cpu, c.egress, c.cost, c.running, c.runVCPUs, c.runMemory, c.quota,
		c.up, c.duration, c.tenantsDesc, c.vms, c.vmCPU, c.vmVCPUs, c.vmMem} {
		ch <- d
	}
}

// tenantFigures is everything exported of one tenant (or of "_other").
type tenantFigures struct {
	slug                  string
	sums                  Sums
	cost                  map[string]float64 // currency -> cost
	costRank              float64            // cost in any currency, for ranking
	running, vcpus, memMi int64
	quota                 map[string]float64
	vms, vmVCPUs, vmMemMi int64
	vmCPU                 time.Duration
}

// Collect reads the figures and sends them.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	figs, err := c.read(ctx)
	up := 1.0
	if err != nil {
		up = 0
		c.cfg.Log.Warn("usage metrics: scrape failed", "err", err)
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(c.duration, prometheus.GaugeValue, time.Since(start).Seconds())
	if err != nil {
		return
	}
	labelled := bound(figs, c.cfg.MaxTenants)
	ch <- prometheus.MustNewConstMetric(c.tenantsDesc, prometheus.GaugeValue, float64(len(figs)), "known")
	ch <- prometheus.MustNewConstMetric(c.tenantsDesc, prometheus.GaugeValue, float64(min(len(figs), c.cfg.MaxTenants)), "labelled")
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, f := range labelled {
		g(c.vcpu, f.sums.VCPUSeconds(), f.slug)
		g(c.gib, f.sums.GiBSeconds(), f.slug)
		g(c.cpu, f.sums.CPUSeconds(), f.slug)
		g(c.egress, float64(f.sums.EgressUpBytes), f.slug, "up")
		g(c.egress, float64(f.sums.EgressDownBytes), f.slug, "down")
		for cur, v := range f.cost {
			g(c.cost, v, f.slug, cur)
		}
		g(c.running, float64(f.running), f.slug)
		g(c.runVCPUs, float64(f.vcpus), f.slug)
		g(c.runMemory, float64(f.memMi)*(1<<20), f.slug)
		for q, v := range f.quota {
			g(c.quota, v, f.slug, q)
		}
		if c.cfg.VMs != nil {
			g(c.vms, float64(f.vms), f.slug)
			g(c.vmCPU, f.vmCPU.Seconds(), f.slug)
			g(c.vmVCPUs, float64(f.vmVCPUs), f.slug)
			g(c.vmMem, float64(f.vmMemMi)*(1<<20), f.slug)
		}
	}
}

// bound keeps the max costliest tenants (ties by slug) and sums the rest
// into one "_other" line.
func bound(figs []*tenantFigures, maxTenants int) []*tenantFigures {
	slices.SortFunc(figs, func(a, b *tenantFigures) int {
		if a.costRank != b.costRank {
			return cmp.Compare(b.costRank, a.costRank)
		}
		return strings.Compare(a.slug, b.slug)
	})
	if len(figs) <= maxTenants {
		return figs
	}
	other := &tenantFigures{slug: OtherTenants, cost: map[string]float64{}, quota: map[string]float64{}}
	for _, f := range figs[maxTenants:] {
		other.sums.Add(f.sums)
		for cur, v := range f.cost {
			other.cost[cur] += v
		}
		other.running += f.running
		other.vcpus += f.vcpus
		other.memMi += f.memMi
		other.vms += f.vms
		other.vmVCPUs += f.vmVCPUs
		other.vmMemMi += f.vmMemMi
		other.vmCPU += f.vmCPU
		for q, v := range f.quota {
			other.quota[q] += v
		}
	}
	return append(figs[:maxTenants:maxTenants], other)
}

// read runs the scrape's queries: tenants, month-to-date sums by tenant and
// price period, open meters by tenant, quotas.
func (c *Collector) read(ctx context.Context) ([]*tenantFigures, error) {
	db := c.s.db.WithContext(ctx)
	var tn []struct{ ID, Slug string }
	if err := db.Table("tenants").Select("id, slug").Scan(&tn).Error; err != nil {
		return nil, fmt.Errorf("usage metrics: tenants: %w", err)
	}
	byID := make(map[string]*tenantFigures, len(tn))
	out := make([]*tenantFigures, 0, len(tn))
	def := tenants.DefaultQuota()
	for _, t := range tn {
		f := &tenantFigures{slug: t.Slug, cost: map[string]float64{}, quota: quotaFigures(def)}
		byID[t.ID] = f
		out = append(out, f)
	}

	ps, err := c.s.LoadPrices(ctx)
	if err != nil {
		return nil, fmt.Errorf("usage metrics: %w", err)
	}
	month := MonthStart(c.s.clock.Now())
	// The price periods of the month: every instant any book changes. A
	// tenant's price is constant within each, so one grouped query prices
	// every tenant.
	cuts := []time.Time{month}
	for _, p := range ps.platform {
		if p.EffectiveFrom.After(month) {
			cuts = append(cuts, p.EffectiveFrom)
		}
	}
	for _, list := range ps.tenant {
		for _, p := range list {
			if p.EffectiveFrom.After(month) {
				cuts = append(cuts, p.EffectiveFrom)
			}
		}
	}
	slices.SortFunc(cuts, func(a, b time.Time) int { return a.Compare(b) })
	cuts = slices.CompactFunc(cuts, func(a, b time.Time) bool { return a.Equal(b) })
	seg, args := "0", []any{}
	if len(cuts) > 1 {
		var b strings.Builder
		b.WriteString("CASE")
		for i, cut := range cuts[1:] {
			fmt.Fprintf(&b, " WHEN period_start < ? THEN %d", i)
			args = append(args, ts(cut))
		}
		fmt.Fprintf(&b, " ELSE %d END", len(cuts)-1)
		seg = b.String()
	}
	var sums []struct {
		TenantID string `gorm:"column:tenant_id"`
		Seg      int    `gorm:"column:seg"`
		Sums
	}
	args = append(args, ts(month))
	err = db.Raw("SELECT tenant_id, "+seg+" AS seg, "+sumColumns+" FROM usage_ledger WHERE period_start >= ? GROUP BY 1, 2", args...).
		Scan(&sums).Error
	if err != nil {
		return nil, fmt.Errorf("usage metrics: month sums: %w", err)
	}
	for _, r := range sums {
		f := byID[r.TenantID]
		if f == nil || r.Seg < 0 || r.Seg >= len(cuts) {
			continue
		}
		p := ps.At(r.TenantID, cuts[r.Seg])
		f.sums.Add(r.Sums)
		v := r.Sums.Charge(p).Float64()
		f.cost[p.Currency] += v
		f.costRank += v
	}

	var open []struct {
		TenantID  string `gorm:"column:tenant_id"`
		N         int64  `gorm:"column:n"`
		VCPUs     int64  `gorm:"column:vcpus"`
		MemoryMiB int64  `gorm:"column:memory_mib"`
	}
	err = db.Raw("SELECT tenant_id, COUNT(*) AS n, COALESCE(SUM(vcpus), 0) AS vcpus, COALESCE(SUM(memory_mib), 0) AS memory_mib " +
		"FROM usage_meters WHERE closed_at IS NULL GROUP BY tenant_id").Scan(&open).Error
	if err != nil {
		return nil, fmt.Errorf("usage metrics: open meters: %w", err)
	}
	for _, r := range open {
		if f := byID[r.TenantID]; f != nil {
			f.running, f.vcpus, f.memMi = r.N, r.VCPUs, r.MemoryMiB
		}
	}

	var qs []tenants.Quota
	if err := db.Find(&qs).Error; err != nil {
		return nil, fmt.Errorf("usage metrics: quotas: %w", err)
	}
	for _, q := range qs {
		if f := byID[q.TenantID]; f != nil {
			f.quota = quotaFigures(q)
		}
	}
	if c.cfg.VMs != nil {
		vms, err := c.cfg.VMs(ctx)
		if err != nil {
			return nil, fmt.Errorf("usage metrics: vms: %w", err)
		}
		for _, vm := range vms {
			if f := byID[vm.TenantID]; f != nil {
				f.vms++
				f.vmVCPUs += int64(vm.VCPUs)
				f.vmMemMi += int64(vm.MemoryMiB)
				f.vmCPU += vm.CPUTime
			}
		}
	}
	return out, nil
}

// quotaFigures are a quota's limits by name. A tenant without a stored
// quota has the defaults (stored on its first read).
func quotaFigures(q tenants.Quota) map[string]float64 {
	return map[string]float64{
		tenants.QuotaMaxVMs: float64(q.MaxVMs), tenants.QuotaMaxVCPUs: float64(q.MaxVCPUs),
		tenants.QuotaMaxMemoryMiB: float64(q.MaxMemoryMiB), tenants.QuotaMaxSandboxes: float64(q.MaxSandboxes),
		tenants.QuotaMaxCPUHoursMonthly: float64(q.MaxCPUHoursMonthly),
	}
}
