package tenants_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants"
)

func TestInstallationLease(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		cfgA := tenants.LeaseConfig{TTL: 20 * time.Second, Heartbeat: time.Hour, Hostname: "host-a", PID: 111, Clock: e.clock.Now}
		a, err := tenants.AcquireLease(ctx, e.db, cfgA)
		if err != nil {
			t.Fatalf("Got(AcquireLease on a fresh database) err = %v; want nil", err)
		}
		// A second server is refused, and told who holds it.
		cfgB := tenants.LeaseConfig{TTL: 20 * time.Second, Heartbeat: time.Hour, Hostname: "host-b", PID: 222, Clock: e.clock.Now}
		_, err = tenants.AcquireLease(ctx, e.db, cfgB)
		var he *tenants.LeaseHeldError
		if !errors.As(err, &he) || !errors.Is(err, tenants.ErrLeaseHeld) {
			t.Fatalf("Got(second AcquireLease) err = %v; want a LeaseHeldError", err)
		}
		for _, want := range []string{"host-a", "pid 111", e.clock.Now().UTC().Format(time.RFC3339)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Got(refusal) = %q; want it to name %q", err, want)
			}
		}
		// Still held a moment before it expires; a heartbeat moves the expiry on.
		e.clock.Advance(15 * time.Second)
		if ok, err := a.Renew(ctx); err != nil || !ok {
			t.Fatalf("Got(Renew by the holder) = %v, %v; want true, nil", ok, err)
		}
		e.clock.Advance(15 * time.Second)
		if _, err := tenants.AcquireLease(ctx, e.db, cfgB); !errors.Is(err, tenants.ErrLeaseHeld) {
			t.Fatalf("Got(AcquireLease 15 s after a heartbeat) err = %v; want ErrLeaseHeld", err)
		}
		// A clean shutdown frees it at once.
		if err := a.Release(ctx); err != nil {
			t.Fatalf("Release = %v", err)
		}
		b, err := tenants.AcquireLease(ctx, e.db, cfgB)
		if err != nil {
			t.Fatalf("Got(AcquireLease after Release) err = %v; want nil", err)
		}
		if b.Epoch() != a.Epoch()+1 {
			t.Errorf("Got(epoch after a hand-over) = %d; want %d", b.Epoch(), a.Epoch()+1)
		}
		if ok, err := a.Renew(ctx); err != nil || ok {
			t.Errorf("Got(Renew by the released holder) = %v, %v; want false, nil", ok, err)
		}
		// B "crashes": no more heartbeats. Its lease is free once it expired,
		// not before.
		e.clock.Advance(19 * time.Second)
		cfgC := tenants.LeaseConfig{TTL: 20 * time.Second, Heartbeat: time.Hour, Hostname: "host-c", PID: 333, Clock: e.clock.Now}
		if _, err := tenants.AcquireLease(ctx, e.db, cfgC); !errors.Is(err, tenants.ErrLeaseHeld) || !strings.Contains(err.Error(), "host-b") {
			t.Fatalf("Got(AcquireLease before the crashed lease expired) err = %v; want ErrLeaseHeld naming host-b", err)
		}
		e.clock.Advance(2 * time.Second)
		c, err := tenants.AcquireLease(ctx, e.db, cfgC)
		if err != nil {
			t.Fatalf("Got(AcquireLease after the crashed holder's lease expired) err = %v; want nil", err)
		}
		defer c.Release(ctx)
		// The crashed holder, should it come back, finds it lost.
		if ok, err := b.Renew(ctx); err != nil || ok {
			t.Errorf("Got(Renew by the expired holder) = %v, %v; want false, nil", ok, err)
		}
		cur, err := tenants.CurrentLease(ctx, e.db)
		if err != nil || cur.Hostname != "host-c" || cur.PID != 333 {
			t.Errorf("Got(CurrentLease) = %+v, %v; want host-c pid 333", cur, err)
		}
	})
}

// TestInstallationLeaseRace starts servers at once: exactly one wins.
func TestInstallationLeaseRace(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		const n = 8
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			won  []*tenants.Lease
			errs []error
		)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := tenants.AcquireLease(ctx, e.db, tenants.LeaseConfig{Heartbeat: time.Hour, Clock: e.clock.Now})
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					won = append(won, l)
				} else if !errors.Is(err, tenants.ErrLeaseHeld) {
					errs = append(errs, err)
				}
			}()
		}
		wg.Wait()
		for _, l := range won {
			defer l.Release(ctx)
		}
		if len(won) != 1 || len(errs) != 0 {
			t.Fatalf("Got(%d servers racing) = %d winners, errors %v; want 1 winner, no errors", n, len(won), errs)
		}
	})
}

// TestInstallationLeaseLost: a holder whose lease another server took
// learns it from its heartbeat.
func TestInstallationLeaseLost(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		frozen := e.clock.Now() // A's clock stops: its heartbeats never move the expiry
		a, err := tenants.AcquireLease(ctx, e.db, tenants.LeaseConfig{TTL: 20 * time.Second, Heartbeat: 10 * time.Millisecond,
			Clock: func() time.Time { return frozen }})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Release(ctx)
		e.clock.Advance(time.Minute)
		b, err := tenants.AcquireLease(ctx, e.db, tenants.LeaseConfig{Heartbeat: time.Hour, Clock: e.clock.Now})
		if err != nil {
			t.Fatalf("Got(AcquireLease of an expired lease) err = %v; want nil", err)
		}
		defer b.Release(ctx)
		select {
		case <-a.Lost():
		case <-time.After(time.Minute):
			t.Fatal("the old holder never noticed it lost the lease")
		}
		if err := a.Err(); err == nil || !strings.Contains(err.Error(), "another server took it") {
			t.Errorf("Got(Err of the lost lease) = %v; want another server took it", err)
		}
	})
}
