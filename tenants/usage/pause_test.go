package usage_test

import (
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/usage"
)

// A paused sandbox is billed memory but no vCPU for the time it is paused;
// a pause recorded twice (a retry) moves nothing; the ledger stays exact.
func TestMeterPausedBillsMemoryNotVCPU(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "meter-pause")
		e.open(t, tn.ID, "sb-p", 2, 512, t0)
		setPaused := func(at time.Time, paused bool) {
			t.Helper()
			if err := e.db.Transaction(func(tx *gorm.DB) error { return usage.SetPaused(tx, "sb-p", at, paused) }); err != nil {
				t.Fatalf("SetPaused(%v, %v) = %v", at, paused, err)
			}
		}
		e.observe(t, "sb-p", &usage.Sample{At: t0.Add(5 * time.Minute), CPUNS: 1e9}, nil)
		setPaused(t0.Add(10*time.Minute), true) // 10 min running
		setPaused(t0.Add(12*time.Minute), true) // again: nothing
		e.observe(t, "sb-p", &usage.Sample{At: t0.Add(20 * time.Minute), CPUNS: 1e9}, nil)
		setPaused(t0.Add(30*time.Minute), false) // 20 min paused
		setPaused(t0.Add(31*time.Minute), false) // again: nothing
		end := t0.Add(40 * time.Minute)          // 10 min running
		e.observe(t, "sb-p", &usage.Sample{At: end, CPUNS: 2e9}, &end)

		s := sum(e.entries(t, tn.ID, "sb-p"))
		wall := (40 * time.Minute).Milliseconds()
		running := (20 * time.Minute).Milliseconds()
		if s.WallMS != wall {
			t.Errorf("Got(wall ms) = %d; want %d", s.WallMS, wall)
		}
		if s.AllocVCPUMS != 2*running {
			t.Errorf("Got(vCPU ms) = %d; want %d (2 vCPUs for the 20 min not paused)", s.AllocVCPUMS, 2*running)
		}
		if s.AllocMiBMS != 512*wall {
			t.Errorf("Got(MiB ms) = %d; want %d (memory for the whole 40 min)", s.AllocMiBMS, 512*wall)
		}
		if s.CPUNS != 2e9 {
			t.Errorf("Got(cpu ns) = %d; want 2e9", s.CPUNS)
		}
		// A closed meter takes no pause.
		setPaused(end.Add(time.Minute), true)
		if got := sum(e.entries(t, tn.ID, "sb-p")); got != s {
			t.Errorf("Got(sums after a pause of a closed meter) = %+v; want unchanged %+v", got, s)
		}
		// A sandbox that was never metered: no error, nothing written.
		if err := e.db.Transaction(func(tx *gorm.DB) error { return usage.SetPaused(tx, "never-ran", t0, true) }); err != nil {
			t.Errorf("Got(SetPaused(no meter)) = %v; want nil", err)
		}
	})
}
