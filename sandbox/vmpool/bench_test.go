package vmpool_test

import (
	"bufio"
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/benchrec"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// coldStartSamples is how many boots of each guest one benchmark iteration
// makes, in rounds whose order rotates so every guest sees the same machine
// load and none always boots right after another's destroy.
// STOCKADE_BENCH_COLDSTART_SAMPLES overrides it.
const coldStartSamples = 5

// coldStart is one cold start: host-side durations from Create, and the
// guest's uptime when it was ready (the baseline's READY, our channel open).
type coldStart struct {
	created, total time.Duration
	guestReady     time.Duration
	boot           agentproto.Boot // ours only
	helloUptime    time.Duration   // ours only: guest uptime at the hello
}

// BenchmarkVMColdStart measures define -> agent handshake for our guest
// image against the busybox-init baseline guest of GUEST.md, built and
// booted in the same run, the same way (transient domain, channel through
// libvirt). It reports medians, minimums and their ratios (target <= 1.1):
// "ratio" is median over median, "min-ratio" min over min (the least
// disturbed boots), "pair-ratio" the median of the per-round ratios (each
// round boots the guests back to back, so load drift cancels).
// "same-cmdline-ratio" compares with the baseline booted with our kernel
// command line too: what our init and agent cost over a busybox init, the
// kernel's share set aside.
func BenchmarkVMColdStart(b *testing.B) {
	_, guest := needVMs(b)
	baseline := hypervisortest.BusyboxGuest(b, hypervisortest.VMDir(b))
	sameCmdline := baseline
	sameCmdline.Cmdline = withWords(baseline.Cmdline, guest.Cmdline)
	h := hypervisortest.Connect(b, hypervisor.Config{URI: systemURI})
	n := coldStartSamples
	if v, err := strconv.Atoi(os.Getenv("STOCKADE_BENCH_COLDSTART_SAMPLES")); err == nil && v > 0 {
		n = v
	}
	var ours, base, same []coldStart
	boots := []func(){
		func() { ours = append(ours, coldStartAgent(b, h, guest)) },
		func() { base = append(base, coldStartBusybox(b, h, baseline)) },
		func() { same = append(same, coldStartBusybox(b, h, sameCmdline)) },
	}
	for i := 0; i < b.N; i++ {
		for j := 0; j < n; j++ {
			for k := range boots {
				boots[(j+k)%len(boots)]()
			}
		}
	}
	b.StopTimer()
	to, tb, ts := totals(ours), totals(base), totals(same)
	pairs := make([]float64, len(to))
	for i := range to {
		pairs[i] = float64(to[i]) / float64(tb[i])
	}
	mo, mb := median(to), median(tb)
	b.ReportMetric(ms(mo), "ours-ms")
	b.ReportMetric(ms(mb), "busybox-ms")
	benchrec.Record(b, benchrec.Result{Name: "vm_cold_start_vs_busybox", Value: ms(mo), Unit: "ms", Baseline: ms(mb)})
	b.ReportMetric(float64(slices.Min(to))/float64(slices.Min(tb)), "min-ratio")
	b.ReportMetric(medianFloat(pairs), "pair-ratio")
	b.ReportMetric(float64(mo)/float64(median(ts)), "same-cmdline-ratio")
	b.Logf("cold start (define -> handshake), %d samples each: ours %v, busybox-init baseline %v, baseline with our kernel command line %v",
		len(to), to, tb, ts)
	for i, o := range ours {
		bo := o.boot
		b.Logf("round %d: ours %v (create %v; guest: init %v, switch root %v, mounted %v, channel modules %v, channel %v, hello %v) "+
			"| baseline %v (create %v; guest READY %v) | same cmdline %v (READY %v)", i,
			o.total.Round(time.Millisecond), o.created.Round(time.Millisecond),
			bo.InitStart.Round(time.Millisecond), bo.SwitchRoot.Round(time.Millisecond), bo.Mounted.Round(time.Millisecond),
			bo.ChannelModules.Round(time.Millisecond), bo.ChannelOpen.Round(time.Millisecond), o.helloUptime.Round(time.Millisecond),
			base[i].total.Round(time.Millisecond), base[i].created.Round(time.Millisecond), base[i].guestReady.Round(time.Millisecond),
			same[i].total.Round(time.Millisecond), same[i].guestReady.Round(time.Millisecond))
	}
}

// withWords returns cmdline with the words of other it lacks appended.
func withWords(cmdline, other string) string {
	have := strings.Fields(cmdline)
	for _, w := range strings.Fields(other) {
		if !slices.Contains(have, w) {
			cmdline += " " + w
		}
	}
	return cmdline
}

func totals(cs []coldStart) []time.Duration {
	out := make([]time.Duration, len(cs))
	for i, c := range cs {
		out[i] = c.total
	}
	return out
}

func coldStartAgent(b *testing.B, h *hypervisor.Host, g image.Guest) coldStart {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := hypervisortest.NewID("bench-")
	start := time.Now()
	if _, err := h.Create(ctx, hypervisor.DomainSpec{ID: id, TenantID: "bench", VCPUs: 1, MemoryMiB: 512,
		Kernel: g.Kernel, Initramfs: g.Initramfs, Cmdline: g.Cmdline, ChannelName: agentproto.ChannelName}); err != nil {
		b.Fatalf("create: %v", err)
	}
	defer destroy(b, h, id)
	created := time.Since(start)
	ch, err := h.OpenChannel(ctx, id, agentproto.ChannelName)
	if err != nil {
		b.Fatalf("open channel: %v", err)
	}
	c, err := agentproto.Dial(ctx, ch, agentproto.ClientOptions{Name: "bench"})
	if err != nil {
		b.Fatalf("handshake: %v", err)
	}
	took := time.Since(start)
	hello := c.Hello()
	c.Close()
	return coldStart{created: created, total: took, guestReady: hello.Boot.ChannelOpen, boot: hello.Boot, helloUptime: hello.Uptime}
}

func coldStartBusybox(b *testing.B, h *hypervisor.Host, g hypervisortest.Guest) coldStart {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := hypervisortest.NewID("bench-bb-")
	start := time.Now()
	if _, err := h.Create(ctx, g.Spec(id, "bench")); err != nil {
		b.Fatalf("create baseline: %v", err)
	}
	defer destroy(b, h, id)
	created := time.Since(start)
	ch, err := h.OpenChannel(ctx, id, g.Channel)
	if err != nil {
		b.Fatalf("open baseline channel: %v", err)
	}
	defer ch.Close()
	line, err := bufio.NewReader(ch).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "READY") {
		b.Fatalf("baseline first line = %q, %v; want READY", line, err)
	}
	took := time.Since(start)
	// "READY <uptime seconds>"
	var ready time.Duration
	if f := strings.Fields(line); len(f) == 2 {
		if s, err := strconv.ParseFloat(f[1], 64); err == nil {
			ready = time.Duration(s * float64(time.Second))
		}
	}
	return coldStart{created: created, total: took, guestReady: ready}
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
	benchrec.Record(b, benchrec.Result{Name: "warm_acquire_p50_ms", Value: ms(samples[len(samples)/2]), Unit: "ms"})
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

func medianFloat(fs []float64) float64 {
	s := slices.Clone(fs)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
