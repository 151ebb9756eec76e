package webtest

import (
	"math"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/usage"
)

// Run is a sandbox run to meter: what it held, from when, for how long,
// how busy it was and what it sent.
type Run struct {
	TenantID, SandboxID string
	Template            string
	UserID, UserName    string
	VCPUs, MemoryMiB    int
	Start               time.Time
	For                 time.Duration
	// Cores is the CPU it used, in vCPUs busy (0.5: half a vCPU); Wave
	// (at most Cores) swings it up and down three times over the run.
	Cores, Wave float64
	// MemoryMiB in use, growing by GrowMiB over the run.
	UsedMiB, GrowMiB float64
	// EgressUp and EgressDown are bytes through the egress gateway, in one
	// connection that ends halfway.
	EgressUp, EgressDown int64
	// Every is the sampling interval (default 5 minutes; the sampler's is
	// 5 s, which makes long runs slow to build).
	Every time.Duration
	// Open leaves the meter open at the end (a running sandbox).
	Open bool
}

// Meter puts a sandbox run through the real accounting path, each step in
// its own transaction as the sampler and the gateway do: usage.Open, a
// usage.Observe per sample with cumulative cgroup counters, usage.Egress for
// its connection and, unless r.Open, a last Observe that closes the meter.
func Meter(t testing.TB, db *gorm.DB, r Run) {
	t.Helper()
	if r.Every == 0 {
		r.Every = 5 * time.Minute
	}
	tx := func(what string, fn func(tx *gorm.DB) error) {
		t.Helper()
		if err := db.Transaction(fn); err != nil {
			t.Fatalf("meter %s: %s: %v", r.SandboxID, what, err)
		}
	}
	tx("open", func(tx *gorm.DB) error {
		return usage.Open(tx, usage.Meter{SandboxID: r.SandboxID, TenantID: r.TenantID, Template: r.Template, UserID: r.UserID,
			UserName: r.UserName, VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB, StartedAt: r.Start})
	})
	sample := func(at time.Time) *usage.Sample {
		d := at.Sub(r.Start)
		used := r.UsedMiB
		if r.For > 0 {
			used += r.GrowMiB * float64(d) / float64(r.For)
		}
		mem := int64(used * (1 << 20))
		cpu := r.Cores * float64(d.Nanoseconds())
		if period := float64(r.For.Nanoseconds()) / 3; r.Wave > 0 && period > 0 {
			// The integral of Cores + Wave*sin: cumulative, never falling.
			cpu += r.Wave * period / (2 * math.Pi) * (1 - math.Cos(2*math.Pi*float64(d.Nanoseconds())/period))
		}
		return &usage.Sample{At: at, CPUNS: int64(cpu), MemoryCurrentBytes: mem,
			MemoryPeakBytes: mem, Pids: 3, IOReadBytes: int64(d.Seconds()) * 4096, IOWriteBytes: int64(d.Seconds()) * 1024}
	}
	end := r.Start.Add(r.For)
	for at := r.Start.Add(r.Every); at.Before(end); at = at.Add(r.Every) {
		tx("sample", func(tx *gorm.DB) error { _, err := usage.Observe(tx, r.SandboxID, sample(at), nil); return err })
	}
	if r.EgressUp > 0 || r.EgressDown > 0 {
		tx("egress", func(tx *gorm.DB) error {
			return usage.Egress(tx, r.TenantID, r.SandboxID, r.EgressUp, r.EgressDown, r.Start.Add(r.For/2))
		})
	}
	if r.Open {
		tx("sample", func(tx *gorm.DB) error { _, err := usage.Observe(tx, r.SandboxID, sample(end), nil); return err })
		return
	}
	tx("close", func(tx *gorm.DB) error { _, err := usage.Observe(tx, r.SandboxID, sample(end), &end); return err })
}
