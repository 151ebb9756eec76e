package vmpool_test

import (
	"bufio"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// coldStartSamples is how many boots of each guest one benchmark iteration
// makes, interleaved so both see the same machine load.
const coldStartSamples = 3

// BenchmarkVMColdStart measures define -> agent handshake for our guest
// image against the busybox-init baseline guest of GUEST.md, built and
// booted in the same run, the same way (transient domain, channel through
// libvirt). It reports the medians and their ratio (target <= 1.1).
func BenchmarkVMColdStart(b *testing.B) {
	_, guest := needVMs(b)
	baseline := hypervisortest.BusyboxGuest(b, hypervisortest.VMDir(b))
	h := hypervisortest.Connect(b, hypervisor.Config{URI: systemURI})
	var ours, base []time.Duration
	for i := 0; i < b.N; i++ {
		for j := 0; j < coldStartSamples; j++ {
			ours = append(ours, coldStartAgent(b, h, guest))
			base = append(base, coldStartBusybox(b, h, baseline))
		}
	}
	b.StopTimer()
	mo, mb := median(ours), median(base)
	b.ReportMetric(ms(mo), "ours-ms")
	b.ReportMetric(ms(mb), "busybox-ms")
	b.ReportMetric(float64(mo)/float64(mb), "ratio")
	b.Logf("cold start (define -> handshake), %d samples each: ours %v, busybox-init baseline %v", len(ours), ours, base)
}

func coldStartAgent(b *testing.B, h *hypervisor.Host, g image.Guest) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := hypervisortest.NewID("bench-")
	start := time.Now()
	if _, err := h.Create(ctx, hypervisor.DomainSpec{ID: id, TenantID: "bench", VCPUs: 1, MemoryMiB: 512,
		Kernel: g.Kernel, Initramfs: g.Initramfs, Cmdline: g.Cmdline, ChannelName: agentproto.ChannelName}); err != nil {
		b.Fatalf("create: %v", err)
	}
	defer destroy(b, h, id)
	ch, err := h.OpenChannel(ctx, id, agentproto.ChannelName)
	if err != nil {
		b.Fatalf("open channel: %v", err)
	}
	c, err := agentproto.Dial(ctx, ch, agentproto.ClientOptions{Name: "bench"})
	if err != nil {
		b.Fatalf("handshake: %v", err)
	}
	took := time.Since(start)
	c.Close()
	return took
}

func coldStartBusybox(b *testing.B, h *hypervisor.Host, g hypervisortest.Guest) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := hypervisortest.NewID("bench-bb-")
	start := time.Now()
	if _, err := h.Create(ctx, g.Spec(id, "bench")); err != nil {
		b.Fatalf("create baseline: %v", err)
	}
	defer destroy(b, h, id)
	ch, err := h.OpenChannel(ctx, id, g.Channel)
	if err != nil {
		b.Fatalf("open baseline channel: %v", err)
	}
	defer ch.Close()
	line, err := bufio.NewReader(ch).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "READY") {
		b.Fatalf("baseline first line = %q, %v; want READY", line, err)
	}
	return time.Since(start)
}

func destroy(b *testing.B, h *hypervisor.Host, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.Destroy(ctx, id); err != nil {
		b.Errorf("destroy %s: %v", id, err)
	}
}

// BenchmarkWarmAcquire measures taking a warm VM from the pool (a
// transaction and an agent ping; never a boot) and reports p50 and p95.
func BenchmarkWarmAcquire(b *testing.B) {
	dataDir, _ := needVMs(b)
	ctx := context.Background()
	db := dbtest.SQLite(b)
	svc := newService(b, db, dataDir)
	cleanupInstallation(b, svc.InstallationID())
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "bench"}
	tn, err := tenants.NewStore(db, nil).CreateTenant(ctx, sys, "bench-warm", "")
	if err != nil {
		b.Fatal(err)
	}
	// One VM, kept warm: while it is handed out the pool is full, so the
	// loop below can never trigger a boot.
	if _, err := svc.SetPool(ctx, sys, tn.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 512, MaxVMs: 1, WarmVMs: 1}); err != nil {
		b.Fatal(err)
	}
	var warm vmpool.VM
	deadline := time.Now().Add(3 * time.Minute)
	for warm.ID == "" {
		vms, err := svc.Store().VMs(ctx, tn.ID)
		if err != nil {
			b.Fatal(err)
		}
		for _, vm := range vms {
			if vm.Idle() {
				warm = vm
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("no warm VM within 3 min")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Its agent session is installed right after the row says running.
	time.Sleep(200 * time.Millisecond)
	before := counts(b, db)["vms"]

	const perIteration = 50
	var samples []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < perIteration; j++ {
			start := time.Now()
			vm, err := svc.Acquire(ctx, tn.ID)
			took := time.Since(start)
			if err != nil {
				b.Fatalf("Acquire = %v", err)
			}
			samples = append(samples, took)
			if err := svc.Release(ctx, tn.ID, vm.ID); err != nil {
				b.Fatalf("Release = %v", err)
			}
		}
	}
	b.StopTimer()
	slices.Sort(samples)
	b.ReportMetric(ms(samples[len(samples)/2]), "p50-ms")
	b.ReportMetric(ms(samples[len(samples)*95/100]), "p95-ms")
	b.ReportMetric(float64(counts(b, db)["vms"]-before), "boots")

	if _, err := svc.SetPool(ctx, sys, tn.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 512, MaxVMs: 1}); err != nil {
		b.Fatal(err)
	}
	if _, err := svc.Destroy(ctx, sys, tn.ID, warm.ID); err != nil {
		b.Fatalf("Destroy warm VM = %v", err)
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
