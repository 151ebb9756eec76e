package usage_test

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/usage"
)

// What a guest reports is held to what is physically possible: the
// counters come from inside the VM. Each case opens a 2-vCPU, 256 MiB
// sandbox at t0, accounts its samples in order, and checks the ledger.
func TestObserveHoldsGuestCountersToWhatIsPossible(t *testing.T) {
	const (
		vcpus = 2
		mib   = 256
	)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	sec := int64(time.Second)
	huge := int64(math.MaxInt64)
	tests := []struct {
		name    string
		samples []usage.Sample
		end     *time.Time // with the last sample
		wantCPU int64
		wantIO  int64 // read bytes
		wantVM  int64
		// wantWallMS < 0: not checked
		wantWallMS int64
		wantPeak   int64
	}{
		{"honest", []usage.Sample{{At: at(10 * time.Second), CPUNS: 3 * sec, IOReadBytes: 1 << 20, MemoryPeakBytes: 64 << 20}},
			nil, 3 * sec, 1 << 20, 0, 10_000, 64 << 20},
		{"inflated counters are clamped to vCPUs x elapsed, I/O to its ceiling, the peak to the memory", []usage.Sample{
			{At: at(10 * time.Second), CPUNS: huge, IOReadBytes: huge, MemoryPeakBytes: huge, MemoryCurrentBytes: huge},
		}, nil, vcpus * 10 * sec, usage.MaxIOBytesPerSecond * 10, 0, 10_000, mib << 20},
		{"clamped from the last sample, not from the start", []usage.Sample{
			{At: at(10 * time.Second), CPUNS: 1 * sec}, {At: at(11 * time.Second), CPUNS: huge},
		}, nil, 1*sec + vcpus*sec, 0, 0, 11_000, 0},
		{"a busy guest read late is held now and carried to the next samples", []usage.Sample{
			{At: at(10 * time.Second), CPUNS: 20*sec + sec/2}, {At: at(20 * time.Second), CPUNS: 40*sec + sec/2}, {At: at(30 * time.Second), CPUNS: 50 * sec},
		}, nil, 50 * sec, 0, 0, 30_000, 0},
		{"an inflated counter bills at most vCPUs x elapsed each time", []usage.Sample{
			{At: at(10 * time.Second), CPUNS: huge}, {At: at(20 * time.Second), CPUNS: huge}, {At: at(21 * time.Second), CPUNS: huge},
		}, nil, vcpus * 21 * sec, 0, 0, 21_000, 0},
		{"a counter that went down was reset: it counts from zero", []usage.Sample{
			{At: at(10 * time.Second), CPUNS: 5 * sec}, {At: at(20 * time.Second), CPUNS: 1 * sec}, {At: at(30 * time.Second), CPUNS: 4 * sec},
		}, nil, 5*sec + 1*sec + 3*sec, 0, 0, 30_000, 0},
		{"a huge reading then real ones: the baseline follows the reset", []usage.Sample{
			{At: at(10 * time.Second), CPUNS: huge}, {At: at(20 * time.Second), CPUNS: 2 * sec}, {At: at(30 * time.Second), CPUNS: 5 * sec},
		}, nil, vcpus*10*sec + 2*sec + 3*sec, 0, 0, 30_000, 0},
		{"a sample not newer than the last moves nothing", []usage.Sample{
			{At: at(20 * time.Second), CPUNS: 5 * sec}, {At: at(10 * time.Second), CPUNS: 9 * sec}, {At: at(20 * time.Second), CPUNS: 1 * sec},
		}, nil, 5 * sec, 0, 0, 20_000, 0},
		{"negative readings are zero", []usage.Sample{{At: at(10 * time.Second), CPUNS: -huge, IOReadBytes: -1, MemoryPeakBytes: -1}},
			nil, 0, 0, 0, 10_000, 0},
		{"the end the guest dates cannot pass the host's reading", []usage.Sample{{At: at(10 * time.Second), CPUNS: sec}},
			ptr(at(100 * 365 * 24 * time.Hour)), sec, 0, 0, 10_000, 0},
		{"libvirt's VM CPU time: first reading is the base, then the sandbox's share of the growth", []usage.Sample{
			{At: at(10 * time.Second), CPUNS: 7 * sec, VMCPUNS: 100 * sec, VMShare: 0.5},
			{At: at(20 * time.Second), CPUNS: 7 * sec, VMCPUNS: 108 * sec, VMShare: 0.5},
			{At: at(30 * time.Second), CPUNS: 7 * sec, VMCPUNS: 110 * sec, VMShare: 2}, // a share above 1 is 1
		}, nil, 7 * sec, 0, 4*sec + 2*sec, 30_000, 0},
	}
	eachDB(t, func(t *testing.T, e *env) {
		for i, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				tn := e.tenant(t, "clamp-"+string(rune('a'+i)))
				id := "sb-clamp-" + string(rune('a'+i))
				e.open(t, tn.ID, id, vcpus, mib, t0)
				for j := range tc.samples {
					var end *time.Time
					if j == len(tc.samples)-1 {
						end = tc.end
					}
					e.observe(t, id, &tc.samples[j], end)
				}
				var got usage.Entry
				for _, en := range e.entries(t, tn.ID, id) {
					got.CPUNS += en.CPUNS
					got.IOReadBytes += en.IOReadBytes
					got.VMCPUNS += en.VMCPUNS
					got.WallMS += en.WallMS
					got.MemoryPeakBytes = max(got.MemoryPeakBytes, en.MemoryPeakBytes)
				}
				if got.CPUNS != tc.wantCPU || got.IOReadBytes != tc.wantIO || got.VMCPUNS != tc.wantVM ||
					got.WallMS != tc.wantWallMS || got.MemoryPeakBytes != tc.wantPeak {
					t.Errorf("Got(ledger cpu, io read, vm cpu, wall ms, peak) = %d, %d, %d, %d, %d; want %d, %d, %d, %d, %d",
						got.CPUNS, got.IOReadBytes, got.VMCPUNS, got.WallMS, got.MemoryPeakBytes,
						tc.wantCPU, tc.wantIO, tc.wantVM, tc.wantWallMS, tc.wantPeak)
				}
			})
		}
	})
}

// The CPU-hours quota counts the larger of what the guests measured and
// what libvirt measured of their VMs: a counter that never moves does not
// evade it.
func TestCPUQuotaCrossChecksLibvirt(t *testing.T) {
	sec := int64(time.Second)
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "cpu-cross")
		e.open(t, tn.ID, "still", 1, 128, t0)
		vm := int64(1000 * sec)
		for i := 1; i <= 4; i++ {
			// The guest says 1 s forever; libvirt sees the VM busy.
			e.observe(t, "still", &usage.Sample{At: t0.Add(time.Duration(i) * time.Minute), CPUNS: sec, VMCPUNS: vm, VMShare: 1}, nil)
			vm += int64(50 * time.Second)
		}
		got, err := e.store.CPUSecondsThisMonth(ctx, tn.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := 150.0; got != want {
			t.Errorf("Got(CPUSecondsThisMonth) = %v; want %v (libvirt's 3 x 50 s, not the guest's 1 s)", got, want)
		}
		// A guest that reports more than libvirt saw is held to its own figure.
		e.open(t, tn.ID, "loud", 1, 128, t0)
		e.observe(t, "loud", &usage.Sample{At: t0.Add(10 * time.Minute), CPUNS: int64(9 * time.Minute)}, nil)
		if got, err = e.store.CPUSecondsThisMonth(ctx, tn.ID); err != nil || got != 541 {
			t.Errorf("Got(CPUSecondsThisMonth) = %v, %v; want 541 (540 + 1 measured in the guests)", got, err)
		}
	})
}

// Two sandboxes of one tenant reporting math.MaxInt64 leave sums the
// database and Go add without overflowing: the tenant totals, the
// operator's all-tenant view and the export all read.
func TestInflatedCountersDoNotOverflowSums(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "overflow")
		for _, id := range []string{"sb-max-1", "sb-max-2"} {
			e.open(t, tn.ID, id, 1, 128, t0)
			e.observe(t, id, &usage.Sample{At: t0.Add(time.Minute), CPUNS: math.MaxInt64, IOReadBytes: math.MaxInt64,
				IOWriteBytes: math.MaxInt64, MemoryPeakBytes: math.MaxInt64}, nil)
		}
		r := usage.Range{From: usage.MonthStart(t0), To: usage.MonthStart(t0).AddDate(0, 1, 0)}
		tot, err := e.store.Totals(ctx, tn.ID, r)
		if err != nil {
			t.Fatalf("Totals() = %v", err)
		}
		if want := 2 * 60.0; tot.CPUSeconds() != want {
			t.Errorf("Got(CPUSeconds) = %v; want %v", tot.CPUSeconds(), want)
		}
		all, err := e.store.AllTenants(ctx, r)
		if err != nil {
			t.Fatalf("AllTenants() = %v", err)
		}
		if len(all) != 1 || all[0].CPUNS != 2*60*int64(time.Second) {
			t.Errorf("Got(AllTenants()) = %+v; want the tenant with 120 s CPU", all)
		}
		for _, f := range []string{"csv", "json"} {
			var buf bytes.Buffer
			if _, err := e.store.Export(ctx, &buf, usage.ExportQuery{Range: r, Format: f}); err != nil {
				t.Errorf("Export(%s) = %v", f, err)
			}
		}
	})
}

func ptr[T any](v T) *T { return &v }
