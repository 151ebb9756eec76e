package vmpool_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/benchrec"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// firstByte is a writer that notes when the first byte arrives.
type firstByte struct {
	once sync.Once
	at   chan time.Time
}

func (f *firstByte) Write(p []byte) (int, error) {
	if len(p) > 0 {
		f.once.Do(func() { f.at <- time.Now() })
	}
	return len(p), nil
}

// vmStart is one VM start measured from Create: agent ready (the VM
// running), and a command's first output in a fresh sandbox of it.
type vmStart struct{ ready, firstOutput time.Duration }

// startAndRun starts a VM and runs a command in it; ok is false when the
// guest died on the way (this shared machine overloaded: the round is run
// again).
func startAndRun(b *testing.B, svc *vmpool.Service, tn tenants.Tenant, wantKind string) (_ vmStart, ok bool) {
	b.Helper()
	t0 := time.Now()
	vm, err := svc.Create(ctx, vmpool.SystemActor(), tn.ID)
	if err != nil {
		b.Fatalf("Create = %v", err)
	}
	defer func() {
		if _, err := svc.Destroy(ctx, vmpool.SystemActor(), tn.ID, vm.ID); err != nil && ok {
			b.Fatalf("Destroy = %v", err)
		}
	}()
	var c *agentproto.Client
	for c == nil {
		got, err := svc.Store().VM(ctx, tn.ID, vm.ID)
		if err != nil {
			b.Fatalf("VM %s: %v", vm.ID, err)
		}
		if got.State == vmpool.StateLost {
			b.Logf("VM %s lost (%s): round again", vm.ID, got.StateReason)
			return vmStart{}, false
		}
		if !got.State.Active() {
			b.Fatalf("VM %s ended %s (%s)", vm.ID, got.State, got.StateReason)
		}
		if got.State == vmpool.StateRunning {
			if !strings.HasPrefix(got.BootKind, wantKind) {
				b.Fatalf("VM %s boot kind %q; want %q", vm.ID, got.BootKind, wantKind)
			}
			if c, err = svc.Agent(ctx, tn.ID, vm.ID); err != nil {
				b.Fatalf("Agent = %v", err)
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	ready := time.Since(t0)
	sb := "bench-" + vm.ID[len(vm.ID)-8:]
	if _, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: sb, Template: "busybox"}); err != nil {
		b.Fatalf("CreateSandbox = %v", err)
	}
	fb := &firstByte{at: make(chan time.Time, 1)}
	var errOut bytes.Buffer
	st, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: sb, Argv: []string{"echo", "hi"}}, nil, io.MultiWriter(fb), &errOut)
	if err != nil || st.Code != 0 {
		b.Fatalf("Exec = %+v, %v (%s)", st, err, errOut.String())
	}
	return vmStart{ready: ready, firstOutput: (<-fb.at).Sub(t0)}, true
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkVMRestore: VM starts restored from a memory snapshot against
// cold boots, interleaved (cold, restore, cold, restore, ...) on two
// services of the same machine, one with snapshots and one without.
// Records vm_restore_vs_cold_boot (Create -> agent ready, p50s; target
// <= 0.2) and create_first_output_empty_pool_vs_cold_boot (Create with no
// warm VM -> first output of a command in a fresh sandbox; target <= 0.3).
// STOCKADE_BENCH_VM_ROUNDS sets the pairs (default 3).
func BenchmarkVMRestore(b *testing.B) {
	dataDir, _ := needVMs(b)
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("STOCKADE_BENCH_VM_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	type side struct {
		svc *vmpool.Service
		tn  tenants.Tenant
	}
	mk := func(snapshots bool) side {
		db := freshDB(b)
		tn, err := tenants.NewStore(db, nil).CreateTenant(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "bench"}, "restore-bench", "")
		if err != nil {
			b.Fatal(err)
		}
		log := testLogger(b)
		if p := os.Getenv("STOCKADE_BENCH_LOG"); snapshots && p != "" {
			// The restore steps' timings (hypervisor and vmpool debug
			// lines) to a file: a benchmark's own log keeps 10 lines.
			f, err := os.Create(p)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { f.Close() })
			log = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		cfg := vmpool.Config{URIs: []string{systemURI}, DataDir: dataDir, Logger: log,
			ConnectTimeout: 30 * time.Second, Snapshots: snapshots}
		if snapshots {
			// The pool every VM gets in the service (sandbox.PrestartHook
			// with its defaults: one sandbox of the default template),
			// which the snapshot VM runs before it is saved. Only on
			// this side: the cold side's boots do not share their CPU
			// with a pool filling behind them.
			cfg.AgentReady = prestartOne(b)
		}
		svc := startService(b, db, cfg)
		cleanupInstallation(b, svc.InstallationID())
		return side{svc, tn}
	}
	cold, warm := mk(false), mk(true)
	// The first start builds the snapshot behind it.
	for _, ok := startAndRun(b, warm.svc, warm.tn, vmpool.BootCold); !ok; _, ok = startAndRun(b, warm.svc, warm.tn, vmpool.BootCold) {
	}
	waitFor(b, 15*time.Minute, "snapshot built", func() bool { return warm.svc.SnapshotCounts().Builds >= 1 })

	var coldReady, coldFirst, restReady, restFirst []time.Duration
	for i := 0; i < b.N; i++ {
		for done, tries := 0, 0; done < rounds; tries++ {
			if tries > rounds+2 {
				b.Fatalf("%d rounds of %d tries lost a VM", tries-done, tries)
			}
			c, okc := startAndRun(b, cold.svc, cold.tn, vmpool.BootCold)
			r, okr := startAndRun(b, warm.svc, warm.tn, vmpool.BootRestored)
			if !okc || !okr {
				continue
			}
			done++
			coldReady, coldFirst = append(coldReady, c.ready), append(coldFirst, c.firstOutput)
			restReady, restFirst = append(restReady, r.ready), append(restFirst, r.firstOutput)
			// Printed: a benchmark's log keeps its first 10 lines only.
			fmt.Printf("BenchmarkVMRestore round %d: cold ready %s first output %s; restored ready %s first output %s\n", done,
				c.ready.Round(time.Millisecond), c.firstOutput.Round(time.Millisecond),
				r.ready.Round(time.Millisecond), r.firstOutput.Round(time.Millisecond))
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	benchrec.Record(b, benchrec.Result{Name: "vm_restore_vs_cold_boot", Value: ms(p50(restReady)), Unit: "ms", Baseline: ms(p50(coldReady))})
	benchrec.Record(b, benchrec.Result{Name: "create_first_output_empty_pool_vs_cold_boot", Value: ms(p50(restFirst)), Unit: "ms",
		Baseline: ms(p50(coldFirst))})
}
