package vmpool

import (
	"errors"
	"testing"
	"time"
)

// TestClosedHostsTakeNoSandboxes: an idle running VM on a cordoned,
// draining or down host is not handed out to a new sandbox; back active, it
// is.
func TestClosedHostsTakeNoSandboxes(t *testing.T) {
	eachDB(t, func(t *testing.T, e *storeEnv) {
		const uri = "test:///host" // runningVM's host
		if _, err := e.store.AddHost(bg, admin, Host{URI: hostA, CPUs: 8, MemoryKiB: 8 << 20}); err != nil {
			t.Fatal(err) // another active host: the last-host guard lets us close this one
		}
		tn := e.bigTenant(t, "closed-hosts", 4)
		vm := e.runningVM(t, tn)
		cases := []struct {
			name          string
			close, reopen func() error
		}{
			{"cordoned",
				func() error { _, err := e.store.CordonHost(bg, admin, uri, "test", false); return err },
				func() error { _, err := e.store.UncordonHost(bg, admin, uri); return err }},
			{"draining",
				func() error { _, err := e.store.DrainHost(bg, admin, uri, "test", false); return err },
				func() error { _, err := e.store.UncordonHost(bg, admin, uri); return err }},
			{"down",
				func() error { _, err := e.store.setHostDown(bg, uri, true, "test"); return err },
				func() error { _, err := e.store.setHostDown(bg, uri, false, "test"); return err }},
		}
		for _, tc := range cases {
			if err := tc.close(); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			h, err := e.store.host(bg, uri)
			if err != nil {
				t.Fatal(err)
			}
			if h.TakesSandboxes() {
				t.Errorf("%s: Got(TakesSandboxes) = true; want false", tc.name)
			}
			if got, err := e.store.acquire(bg, tn); !errors.Is(err, ErrNoIdleVM) {
				t.Errorf("%s: Got(acquire) = %s, %v; want ErrNoIdleVM", tc.name, got.ID, err)
			}
			if err := tc.reopen(); err != nil {
				t.Fatalf("%s: reopen: %v", tc.name, err)
			}
			e.advance(time.Second)
			got, err := e.store.acquire(bg, tn)
			if err != nil || got.ID != vm.ID {
				t.Fatalf("%s, reopened: Got(acquire) = %s, %v; want %s", tc.name, got.ID, err, vm.ID)
			}
			if err := e.store.release(bg, tn, vm.ID); err != nil {
				t.Fatal(err)
			}
		}
	})
}
