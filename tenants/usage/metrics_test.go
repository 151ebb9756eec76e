package usage_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/usage"
)

var metricsActor = audit.Actor{Kind: audit.ActorSystem, ID: "metrics-test"}

// metricsRun meters one sandbox the way the sampler does: opened at start,
// one sample after d with cpu of CPU time, closed then unless open, plus
// egress bytes through the gateway.
func metricsRun(t *testing.T, db *gorm.DB, tenantID, id string, vcpus, memMiB int, start time.Time, d, cpu time.Duration, up, down int64, open bool) {
	t.Helper()
	err := db.Transaction(func(tx *gorm.DB) error {
		if err := usage.Open(tx, usage.Meter{SandboxID: id, TenantID: tenantID, Template: "busybox", UserID: "u-" + id,
			VCPUs: vcpus, MemoryMiB: memMiB, StartedAt: start}); err != nil {
			return err
		}
		var end *time.Time
		if !open {
			e := start.Add(d)
			end = &e
		}
		if _, err := usage.Observe(tx, id, &usage.Sample{At: start.Add(d), CPUNS: cpu.Nanoseconds(), MemoryCurrentBytes: 64 << 20,
			MemoryPeakBytes: 80 << 20}, end); err != nil {
			return err
		}
		return usage.Egress(tx, tenantID, id, up, down, start.Add(d/2))
	})
	if err != nil {
		t.Fatalf("meter sandbox %s: %v", id, err)
	}
}

// scrape serves reg over HTTP like /metrics does and parses the text
// exposition.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Got(GET /metrics) = %d; want 200", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the exposition: %v", err)
	}
	return fams
}

// series returns the family's values keyed by their labels ("tenant=a,quota=x").
func series(fams map[string]*dto.MetricFamily, name string) map[string]float64 {
	out := map[string]float64{}
	f := fams[name]
	if f == nil {
		return out
	}
	for _, m := range f.Metric {
		var ls []string
		for _, l := range m.Label {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		out[strings.Join(ls, ",")] = m.GetGauge().GetValue()
	}
	return out
}

func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// TestCollector: the exposition parses; the tenant label is bounded (five
// tenants with a cap of three give three plus _other); the figures equal the
// ledger as Store.Totals reads it, priced across a mid-month price change;
// last month's usage is left out; open meters and quotas are exported.
func TestCollector(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			now := time.Date(2026, 11, 20, 15, 30, 0, 0, time.UTC)
			clock := func() time.Time { return now }
			ts := tenants.NewStore(d.DB, clock)
			us := usage.NewStore(d.DB, clock)
			month := usage.MonthStart(now)

			// A platform price change on the 10th and a tenant override.
			// (set at the start of the month, when both were still ahead).
			priceFrom(t, d.DB, usage.Price{Currency: "USD", VCPUSecond: 0.001, GiBSecond: 0.0001, EgressGB: 0.1,
				EffectiveFrom: month})
			priceFrom(t, d.DB, usage.Price{Currency: "USD", VCPUSecond: 0.002, GiBSecond: 0.0002, CPUSecond: 0.01,
				EgressGB: 0.2, EffectiveFrom: month.AddDate(0, 0, 9)})
			ids := map[string]string{}
			for i := 1; i <= 5; i++ {
				slug := fmt.Sprintf("m-tenant-%d", i)
				tn, err := ts.CreateTenant(ctx, metricsActor, slug, "")
				if err != nil {
					t.Fatal(err)
				}
				ids[slug] = tn.ID
				if i == 1 {
					priceFrom(t, d.DB, usage.Price{TenantID: tn.ID, Currency: "EUR", VCPUSecond: 0.5, EffectiveFrom: month})
				}
				// Tenant i uses i vCPUs for i hours, across the price change.
				start := month.AddDate(0, 0, 9).Add(-time.Duration(i) * 30 * time.Minute)
				metricsRun(t, d.DB, tn.ID, fmt.Sprintf("sb-%d", i), i, 512*i, start, time.Duration(i)*time.Hour,
					time.Duration(i)*17*time.Second, int64(i)*1_000_000, int64(i)*3_000_000, false)
				// Last month: not in this month's figures.
				metricsRun(t, d.DB, tn.ID, fmt.Sprintf("old-%d", i), 4, 4096, month.Add(-48*time.Hour), time.Hour, time.Hour, 5e9, 5e9, false)
			}
			// Two sandboxes of tenant 2 running now.
			metricsRun(t, d.DB, ids["m-tenant-2"], "live-2a", 2, 1024, now.Add(-time.Hour), 30*time.Minute, time.Second, 0, 0, true)
			metricsRun(t, d.DB, ids["m-tenant-2"], "live-2b", 1, 256, now.Add(-time.Hour), 30*time.Minute, time.Second, 0, 0, true)
			if _, err := ts.SetQuota(ctx, metricsActor, ids["m-tenant-5"], tenants.Quota{MaxVMs: 7, MaxVCPUs: 9, MaxMemoryMiB: 1024,
				MaxSandboxes: 3, MaxCPUHoursMonthly: 11}); err != nil {
				t.Fatal(err)
			}

			totals := map[string]usage.Totals{}
			for slug, id := range ids {
				tot, err := us.Totals(ctx, id, usage.Range{From: month, To: now})
				if err != nil {
					t.Fatal(err)
				}
				totals[slug] = tot
			}

			reg := prometheus.NewRegistry()
			reg.MustRegister(usage.NewCollector(us, usage.MetricsConfig{MaxTenants: 3}))
			fams := scrape(t, reg)
			if got := series(fams, "stockade_usage_metrics_up")[""]; got != 1 {
				t.Fatalf("Got(stockade_usage_metrics_up) = %v; want 1", got)
			}

			// Costliest first: tenant 1 (EUR 0.5 per vCPU-second) then 5, 4;
			// 3 and 2 go under _other.
			labelled := []string{"m-tenant-1", "m-tenant-5", "m-tenant-4"}
			vcpu := series(fams, "stockade_tenant_month_vcpu_seconds")
			if len(vcpu) != 4 {
				t.Errorf("Got(stockade_tenant_month_vcpu_seconds series) = %v; want 3 tenants and _other", vcpu)
			}
			want := func(slug string) usage.Totals { return totals[slug] }
			other := usage.Totals{Currency: "USD"}
			for _, s := range []string{"m-tenant-2", "m-tenant-3"} {
				tt := totals[s]
				other.AllocVCPUMS += tt.AllocVCPUMS
				other.AllocMiBMS += tt.AllocMiBMS
				other.CPUNS += tt.CPUNS
				other.EgressUpBytes += tt.EgressUpBytes
				other.EgressDownBytes += tt.EgressDownBytes
				other.Cost = other.Cost.Add(tt.Cost)
			}
			for _, slug := range append(labelled, usage.OtherTenants) {
				tt := other
				if slug != usage.OtherTenants {
					tt = want(slug)
				}
				l := "tenant=" + slug
				for _, c := range []struct {
					metric, key string
					want        float64
				}{
					{"stockade_tenant_month_vcpu_seconds", l, tt.VCPUSeconds()},
					{"stockade_tenant_month_gib_seconds", l, tt.GiBSeconds()},
					{"stockade_tenant_month_cpu_seconds", l, tt.CPUSeconds()},
					{"stockade_tenant_month_egress_bytes", "direction=up," + l, float64(tt.EgressUpBytes)},
					{"stockade_tenant_month_egress_bytes", "direction=down," + l, float64(tt.EgressDownBytes)},
					{"stockade_tenant_month_cost", "currency=" + tt.Currency + "," + l, tt.Cost.Float64()},
				} {
					got, ok := series(fams, c.metric)[c.key]
					if !ok || !near(got, c.want) {
						t.Errorf("Got(%s{%s}) = %v (present %v); want %v", c.metric, c.key, got, ok, c.want)
					}
				}
				if tt.VCPUSeconds() == 0 || tt.Cost.IsZero() {
					t.Errorf("Got(ledger of %s) = %+v; want usage this month (the test's own fill)", slug, tt)
				}
			}
			if got := series(fams, "stockade_tenant_month_cost")["currency=EUR,tenant=m-tenant-1"]; !near(got, want("m-tenant-1").VCPUSeconds()*0.5) {
				t.Errorf("Got(cost of m-tenant-1) = %v; want its override's %v", got, want("m-tenant-1").VCPUSeconds()*0.5)
			}
			for _, name := range []string{"stockade_tenant_month_vcpu_seconds", "stockade_tenant_sandboxes_running", "stockade_tenant_quota"} {
				for k := range series(fams, name) {
					if strings.Contains(k, "m-tenant-2") || strings.Contains(k, "m-tenant-3") {
						t.Errorf("Got(%s{%s}) = present; want tenants beyond the cap under _other only", name, k)
					}
				}
			}
			running := series(fams, "stockade_tenant_sandboxes_running")
			if got := running["tenant="+usage.OtherTenants]; got != 2 {
				t.Errorf("Got(sandboxes_running{_other}) = %v; want 2 (tenant 2's open meters)", got)
			}
			if got := running["tenant=m-tenant-1"]; got != 0 {
				t.Errorf("Got(sandboxes_running{m-tenant-1}) = %v; want 0", got)
			}
			if got := series(fams, "stockade_tenant_running_vcpus")["tenant="+usage.OtherTenants]; got != 3 {
				t.Errorf("Got(running_vcpus{_other}) = %v; want 3", got)
			}
			quota := series(fams, "stockade_tenant_quota")
			def := tenants.DefaultQuota()
			for k, want := range map[string]float64{
				"quota=max_cpu_hours_monthly,tenant=m-tenant-5": 11, "quota=max_vms,tenant=m-tenant-5": 7,
				"quota=max_vms,tenant=m-tenant-1": float64(def.MaxVMs), "quota=max_vms,tenant=_other": float64(2 * def.MaxVMs),
			} {
				if got := quota[k]; got != want {
					t.Errorf("Got(stockade_tenant_quota{%s}) = %v; want %v", k, got, want)
				}
			}
			if got := len(quota); got != 4*5 {
				t.Errorf("Got(stockade_tenant_quota series) = %d; want 20 (5 quotas x 4 labels)", got)
			}

			t.Run("uncapped", func(t *testing.T) {
				reg := prometheus.NewRegistry()
				reg.MustRegister(usage.NewCollector(us, usage.MetricsConfig{}))
				v := series(scrape(t, reg), "stockade_tenant_month_vcpu_seconds")
				if len(v) != 5 || !near(v["tenant=m-tenant-3"], totals["m-tenant-3"].VCPUSeconds()) {
					t.Errorf("Got(vcpu_seconds with the default cap) = %v; want the 5 tenants, no _other", v)
				}
			})
			t.Run("scrape timeout", func(t *testing.T) {
				reg := prometheus.NewRegistry()
				reg.MustRegister(usage.NewCollector(us, usage.MetricsConfig{Timeout: time.Nanosecond}))
				f := scrape(t, reg)
				if got := series(f, "stockade_usage_metrics_up")[""]; got != 0 || len(series(f, "stockade_tenant_quota")) != 0 {
					t.Errorf("Got(scrape past its timeout) = up %v, %d quota series; want up 0 and no tenant series", got, len(series(f, "stockade_tenant_quota")))
				}
			})
			t.Run("database gone", func(t *testing.T) {
				// Last: it closes the test database's pool.
				sqlDB, err := d.DB.DB()
				if err != nil {
					t.Fatal(err)
				}
				reg := prometheus.NewRegistry()
				reg.MustRegister(usage.NewCollector(us, usage.MetricsConfig{}))
				sqlDB.Close()
				f := scrape(t, reg)
				if got := series(f, "stockade_usage_metrics_up")[""]; got != 0 {
					t.Errorf("Got(stockade_usage_metrics_up with the database closed) = %v; want 0", got)
				}
				if len(series(f, "stockade_tenant_month_vcpu_seconds")) != 0 {
					t.Errorf("Got(tenant series with the database closed) = present; want none")
				}
			})
		})
	}
}
