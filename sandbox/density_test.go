package sandbox_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/benchrec"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// densityEnv is tenant A held to its one warm 2 GiB VM, with a quota that
// is not what stops a fill, and a service of its own (cfg) on the same
// database and VMs. The returned func restores the pool and the quota.
func (e *testEnv) densityEnv(tb testing.TB, cfg sandbox.Config) (*sandbox.Service, func()) {
	tb.Helper()
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "density"}
	pools := e.pools()
	old, err := pools.Pool(ctx, e.a.ID)
	if err != nil {
		tb.Fatal(err)
	}
	// One VM only, so "no room" ends a fill instead of a boot.
	if _, err := pools.SetPool(ctx, sys, e.a.ID, vmpool.PoolSettings{VCPUs: old.VCPUs, MemoryMiB: old.MemoryMiB, MaxVMs: 1, WarmVMs: 0, RecycleAfterHours: old.RecycleAfterHours}); err != nil {
		tb.Fatalf("pool of one vm: %v", err)
	}
	ts := tenants.NewStore(e.db, nil)
	oldQuota, err := ts.Quota(ctx, e.a.ID)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := ts.SetQuota(ctx, sys, e.a.ID, tenants.Quota{MaxVMs: oldQuota.MaxVMs, MaxVCPUs: 4096, MaxMemoryMiB: 1 << 20, MaxSandboxes: 10000, MaxCPUHoursMonthly: 1000}); err != nil {
		tb.Fatal(err)
	}
	cfg.DataDir, cfg.Logger, cfg.DefaultTemplate = e.dataDir, e.log, "busybox"
	svc := sandbox.New(e.db, pools, cfg)
	return svc, func() {
		svc.Close()
		if _, err := pools.SetPool(ctx, sys, e.a.ID, old.Settings()); err != nil {
			tb.Errorf("restore the pool: %v", err)
		}
		if _, err := ts.SetQuota(ctx, sys, e.a.ID, oldQuota); err != nil {
			tb.Errorf("restore the quota: %v", err)
		}
	}
}

// fillIdle creates up to n idle 16 MiB busybox sandboxes, two at a time,
// and returns their ids and the error that stopped the fill early (nil
// when all n were made).
func fillIdle(tb testing.TB, svc *sandbox.Service, tenantID, wantVM string, n int) ([]string, error) {
	tb.Helper()
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "density"}
	var (
		mu   sync.Mutex
		ids  []string
		stop error
		wg   sync.WaitGroup
	)
	next := make(chan struct{})
	go func() {
		defer close(next)
		for range n {
			mu.Lock()
			done := stop != nil
			mu.Unlock()
			if done {
				return
			}
			next <- struct{}{}
		}
	}()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				sb, err := svc.Create(ctx, sys, tenantID, sandbox.Spec{MemoryMiB: sandbox.MinMemoryMiB, TimeoutSeconds: 3600})
				mu.Lock()
				switch {
				case err != nil:
					stop = errors.Join(stop, err)
				case sb.VMID != wantVM:
					stop = errors.Join(stop, fmt.Errorf("sandbox %s placed on %s; want the warm vm %s", sb.ID, sb.VMID, wantVM))
					ids = append(ids, sb.ID)
				default:
					ids = append(ids, sb.ID)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ids, stop
}

// destroyAll destroys the sandboxes, two at a time.
func destroyAll(tb testing.TB, svc *sandbox.Service, tenantID string, ids []string) {
	tb.Helper()
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "density"}
	work := make(chan string)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				if _, err := svc.Destroy(ctx, sys, tenantID, id); err != nil {
					tb.Errorf("destroy %s: %v", id, err)
				}
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
}

// guestMeminfo reads the guest's /proc/meminfo from inside a sandbox (a
// sandbox sees the VM's own), in KiB per field.
func guestMeminfo(tb testing.TB, svc *sandbox.Service, tenantID, id string) map[string]int64 {
	tb.Helper()
	var out bytes.Buffer
	res, err := svc.Exec(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "density"}, tenantID, id,
		sandbox.ExecRequest{Cmd: []string{"cat", "/proc/meminfo"}}, &out, nil)
	if err != nil || res.ExitCode != 0 {
		tb.Fatalf("cat /proc/meminfo in %s = %+v, %v", id, res, err)
	}
	m := map[string]int64{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		k, rest, ok := strings.Cut(sc.Text(), ":")
		f := strings.Fields(rest)
		if !ok || len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			m[k] = v
		}
	}
	if m["MemTotal"] == 0 {
		tb.Fatalf("guest meminfo without MemTotal: %q", out.String())
	}
	return m
}

// initStatus is the memory lines of the sandbox init's /proc/1/status, as
// the sandbox sees it (status stays readable; init's maps, fds and
// environment do not).
func initStatus(tb testing.TB, svc *sandbox.Service, tenantID, id string) string {
	tb.Helper()
	var out bytes.Buffer
	res, err := svc.Exec(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "density"}, tenantID, id,
		sandbox.ExecRequest{Cmd: []string{"grep", "-E", "^(VmRSS|RssAnon|RssFile|RssShmem|VmPTE|Threads)", "/proc/1/status"}}, &out, nil)
	if err != nil || res.ExitCode != 0 {
		tb.Fatalf("read init's status in %s = %+v, %v", id, res, err)
	}
	return strings.Join(strings.Fields(out.String()), " ")
}

// meminfoBreakdown is where the guest memory of the sandboxes made between
// two meminfo readings went, in KiB per sandbox.
func meminfoBreakdown(before, after map[string]int64, n int) string {
	var b strings.Builder
	for _, k := range []string{"MemAvailable", "MemFree", "AnonPages", "Shmem", "Slab", "SReclaimable", "SUnreclaim", "KernelStack", "PageTables", "Percpu", "Cached"} {
		fmt.Fprintf(&b, " %s %+.0f", k, float64(after[k]-before[k])/float64(n))
	}
	return strings.TrimSpace(b.String())
}

// TestManyIdleSandboxes (real VM): the warm 2 GiB VM takes well over the
// old fixed cap of 64 sandboxes with the service's default bounds (the
// capacity rule host side, the agent's from its MemTotal); the first,
// middle and last of them run commands; destroying them all leaves the
// guest as it was (no sandbox, bundle or cgroup left, the mounts back).
func TestManyIdleSandboxes(t *testing.T) {
	e := need(t)
	const n = 80
	svc, restore := e.densityEnv(t, sandbox.Config{})
	defer restore()
	// The guest's first sandbox mounts the templates and the scratch disk
	// for good: count the mounts after one.
	warm, err := fillIdle(t, svc, e.a.ID, e.warmVM, 1)
	destroyAll(t, svc, e.a.ID, warm)
	if err != nil {
		t.Fatal(err)
	}
	before, err := e.agent(t).Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if host := sandbox.PerVM(2048, 0); host < n || host > before.MaxSandboxes {
		t.Fatalf("Got(sandboxes per 2 GiB vm) = host %d, agent %d; want %d <= host <= agent (the host never counts on room the agent refuses)",
			host, before.MaxSandboxes, n)
	}
	ids, stop := fillIdle(t, svc, e.a.ID, e.warmVM, n)
	defer func() { destroyAll(t, svc, e.a.ID, ids) }()
	if stop != nil || len(ids) != n {
		t.Fatalf("Got(fill) = %d sandboxes, %v; want %d", len(ids), stop, n)
	}
	mid, err := e.agent(t).Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if mid.Sandboxes != before.Sandboxes+n {
		t.Errorf("Got(agent sandboxes) = %d; want %d", mid.Sandboxes, before.Sandboxes+n)
	}
	for _, id := range []string{ids[0], ids[n/2], ids[n-1]} {
		var out bytes.Buffer
		res, err := svc.Exec(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "density"}, e.a.ID, id,
			sandbox.ExecRequest{Cmd: []string{"sh", "-c", "echo $((6*7))"}}, &out, nil)
		if err != nil || res.ExitCode != 0 || out.String() != "42\n" {
			t.Errorf("Got(exec in %s) = %q, %+v, %v; want 42", id, out.String(), res, err)
		}
	}
	destroyAll(t, svc, e.a.ID, ids)
	ids = nil
	after, err := e.agent(t).Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Sandboxes != before.Sandboxes || after.SandboxBundles != before.SandboxBundles ||
		after.SandboxCgroups != before.SandboxCgroups || after.Mounts != before.Mounts {
		t.Errorf("Got(guest after destroying them) = %d sandboxes, %d bundles, %d cgroups, %d mounts; want %d, %d, %d, %d as before",
			after.Sandboxes, after.SandboxBundles, after.SandboxCgroups, after.Mounts,
			before.Sandboxes, before.SandboxBundles, before.SandboxCgroups, before.Mounts)
	}
}

// waitStubInits waits until at least n sandboxes of the warm VM have the
// stub init as PID 1 (the agent's count), and returns the count; it fails
// when they never do.
func waitStubInits(tb testing.TB, e *testEnv, n int) int {
	tb.Helper()
	got := 0
	for range 600 {
		st, err := e.agent(tb).Stats(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		if got = st.StubInits; got >= n {
			return got
		}
		time.Sleep(time.Second)
	}
	tb.Fatalf("Got(sandboxes with the stub init) = %d; want %d: they never went idle", got, n)
	return got
}

// qemuRSSMiB is the VmRSS of a VM's QEMU process on this host.
func qemuRSSMiB(tb testing.TB, vmID string) float64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", qemuPIDOf(tb, vmID)))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				kb, err := strconv.ParseFloat(f[0], 64)
				if err == nil {
					return kb / 1024
				}
			}
		}
	}
	tb.Fatalf("no VmRSS for vm %s: %q", vmID, b)
	return 0
}

// BenchmarkSandboxDensity fills the warm 2 GiB VM with idle 16 MiB
// sandboxes until it takes no more (the pool may not boot another VM
// meanwhile; memory limits may add up to 8 times the VM's memory), and
// records how many it held (idle_sandboxes_per_2gib_vm) and the guest
// memory each cost (idle_sandbox_guest_mib, from MemAvailable), with where
// that memory went (meminfo fields per sandbox, logged). Then it destroys
// them and records how much of the memory QEMU took for them the host got
// back through free page reporting (freed_guest_memory_returned_ratio:
// RSS returned over RSS grown).
func BenchmarkSandboxDensity(b *testing.B) {
	e := need(b)
	svc, restore := e.densityEnv(b, sandbox.Config{MemoryOvercommit: 8})
	defer restore()
	for i := 0; i < b.N; i++ {
		rss0 := qemuRSSMiB(b, e.warmVM)
		first, stop := fillIdle(b, svc, e.a.ID, e.warmVM, 1)
		if stop != nil {
			b.Fatal(stop)
		}
		waitStubInits(b, e, 1) // the first settled into idle
		m0 := guestMeminfo(b, svc, e.a.ID, first[0])
		ids, stop := fillIdle(b, svc, e.a.ID, e.warmVM, agentproto.MaxSandboxesPerGuest)
		// Really idle: every sandbox of the fill has handed PID 1 to the
		// stub init (the first, woken by the reading, may not have yet).
		stubs := waitStubInits(b, e, len(ids))
		m1 := guestMeminfo(b, svc, e.a.ID, first[0])
		rss1 := qemuRSSMiB(b, e.warmVM)
		st, err := e.agent(b).Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		n := len(ids) + 1
		perMiB := float64(m0["MemAvailable"]-m1["MemAvailable"]) / 1024 / float64(max(len(ids), 1))
		benchrec.Record(b, benchrec.Result{Name: "idle_sandboxes_per_2gib_vm", Value: float64(n), Unit: "sandboxes"})
		benchrec.Record(b, benchrec.Result{Name: "idle_sandbox_guest_mib", Value: perMiB, Unit: "MiB"})
		b.Logf("a 2 GiB VM (%.0f MiB in the guest, agent cap %d) held %d idle sandboxes, %.2f MiB of guest memory each; the next one failed: %v",
			float64(st.MemTotal)/(1<<20), st.MaxSandboxes, n, perMiB, stop)
		b.Logf("guest memory per idle sandbox, KiB (meminfo deltas over %d sandboxes): %s", len(ids), meminfoBreakdown(m0, m1, max(len(ids), 1)))
		b.Logf("%d of the %d sandboxes had the stub init as PID 1 when measured", stubs, n)
		b.Logf("an idle sandbox's init once a command woke it (the Go init, /proc/1/status): %s", initStatus(b, svc, e.a.ID, ids[len(ids)/2]))

		destroyAll(b, svc, e.a.ID, append(ids, first...))
		rss2 := qemuRSSMiB(b, e.warmVM)
		// Free page reporting hands back free 2 MiB blocks a couple of
		// seconds after the guest frees them: read until it settles.
		rss3 := rss2
		for range 15 {
			time.Sleep(2 * time.Second)
			r := qemuRSSMiB(b, e.warmVM)
			if rss3-r < 1 {
				rss3 = r
				break
			}
			rss3 = r
		}
		benchrec.Record(b, benchrec.Result{Name: "freed_guest_memory_returned_ratio", Value: rss1 - rss3, Unit: "MiB", Baseline: rss1 - rss0})
		b.Logf("QEMU RSS: %.0f MiB before, %.0f MiB with %d idle sandboxes, %.0f MiB right after destroying them, %.0f MiB once settled: %.0f of the %.0f MiB returned",
			rss0, rss1, n, rss2, rss3, rss1-rss3, rss1-rss0)
	}
}
