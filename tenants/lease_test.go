package tenants_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stockade-dev/stockade/tenants"
)

func TestInstallationLease(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		cfgA := tenants.LeaseConfig{TTL: 20 * time.Second, Heartbeat: time.Hour, Hostname: "host-a", PID: 111, Clock: e.clock}
		a, err := tenants.AcquireLease(ctx, e.db, cfgA)
		if err != nil {
			t.Fatalf("Got(AcquireLease on a fresh database) err = %v; want nil", err)
		}
		// A second server is refused, and told who holds it.
		cfgB := tenants.LeaseConfig{TTL: 20 * time.Second, Heartbeat: time.Hour, Hostname: "host-b", PID: 222, Clock: e.clock}
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
		// B gets a clock of its own, standing still from here: it crashes
		// below, and a crashed server's heartbeat never fires.
		cfgB.Clock = clockwork.NewFakeClockAt(e.clock.Now())
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
		cfgC := tenants.LeaseConfig{TTL: 20 * time.Second, Heartbeat: time.Hour, Hostname: "host-c", PID: 333, Clock: e.clock}
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
				l, err := tenants.AcquireLease(ctx, e.db, tenants.LeaseConfig{Heartbeat: time.Hour, Clock: e.clock})
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

// TestInstallationLeaseHeartbeat: the holder's clock drives its heartbeat,
// which keeps moving the expiry on: past the TTL it still holds.
func TestInstallationLeaseHeartbeat(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		a, err := tenants.AcquireLease(ctx, e.db, tenants.LeaseConfig{TTL: 20 * time.Second, Heartbeat: 5 * time.Second, Clock: e.clock})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Release(ctx)
		if err := e.clock.BlockUntilContext(ctx, 1); err != nil { // the heartbeat's ticker
			t.Fatal(err)
		}
		for range 8 { // 40 s: twice the TTL
			e.clock.Advance(5 * time.Second)
			waitHeartbeat(t, e, e.clock.Now())
		}
		if _, err := tenants.AcquireLease(ctx, e.db, tenants.LeaseConfig{Heartbeat: time.Hour, Clock: e.clock}); !errors.Is(err, tenants.ErrLeaseHeld) {
			t.Fatalf("Got(AcquireLease %s after the holder took it, heartbeats going) err = %v; want ErrLeaseHeld", 40*time.Second, err)
		}
		select {
		case <-a.Lost():
			t.Fatalf("Got(lease lost: %v); want held", a.Err())
		default:
		}
	})
}

// waitHeartbeat waits for the heartbeat the clock's last move caused to
// reach the database (it runs in the lease's own goroutine).
func waitHeartbeat(t *testing.T, e *env, at time.Time) {
	t.Helper()
	want := at.UTC().Truncate(time.Microsecond)
	var cur tenants.LeaseHolder
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var err error
		if cur, err = tenants.CurrentLease(ctx, e.db); err != nil {
			t.Fatal(err)
		}
		if cur.HeartbeatAt.Equal(want) {
			return
		}
	}
	t.Fatalf("Got(heartbeat_at) = %s; want %s (the heartbeat after the clock moved)", cur.HeartbeatAt, want)
}

// TestInstallationLeaseLost: a holder whose lease another server took
// learns it from its next heartbeat.
func TestInstallationLeaseLost(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		// A's clock is its own and stands still while the world's moves
		// on: it misses its heartbeats (a paused process, say).
		aClock := clockwork.NewFakeClockAt(e.clock.Now())
		a, err := tenants.AcquireLease(ctx, e.db, tenants.LeaseConfig{TTL: 20 * time.Second, Heartbeat: 5 * time.Second, Clock: aClock})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Release(ctx)
		e.clock.Advance(time.Minute)
		b, err := tenants.AcquireLease(ctx, e.db, tenants.LeaseConfig{Heartbeat: time.Hour, Clock: e.clock})
		if err != nil {
			t.Fatalf("Got(AcquireLease of an expired lease) err = %v; want nil", err)
		}
		defer b.Release(ctx)
		select {
		case <-a.Lost():
			t.Fatal("Got(lease lost before its next heartbeat); want held until then")
		default:
		}
		if err := aClock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		aClock.Advance(5 * time.Second) // A's next heartbeat
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

// TestWaitLease: a server waiting for a held lease polls on its clock and
// takes the lease once the holder releases it.
func TestWaitLease(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		a, err := tenants.AcquireLease(ctx, e.db, tenants.LeaseConfig{Heartbeat: time.Hour, Hostname: "host-a", Clock: e.clock})
		if err != nil {
			t.Fatal(err)
		}
		held := make(chan tenants.LeaseHolder, 4)
		got := make(chan error, 1)
		go func() {
			b, err := tenants.WaitLease(ctx, e.db, tenants.LeaseConfig{Heartbeat: time.Hour, Hostname: "host-b", Clock: e.clock}, 10*time.Second,
				func(h tenants.LeaseHolder) { held <- h })
			if err == nil {
				err = b.Release(ctx)
			}
			got <- err
		}()
		if h := <-held; h.Hostname != "host-a" {
			t.Errorf("Got(onHeld) = %q; want host-a", h.Hostname)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// B's poll (A's heartbeat ended with its release).
		if err := e.clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			t.Fatalf("Got(WaitLease returned %v before its next poll); want it waiting", err)
		default:
		}
		e.clock.Advance(10 * time.Second)
		if err := <-got; err != nil {
			t.Fatalf("Got(WaitLease after the release) err = %v; want nil", err)
		}
		if len(held) != 0 {
			t.Errorf("Got(onHeld called %d more times); want once per holder", len(held))
		}
	})
}

// TestInstallationLeaseGivenUpBeforeExpiry: a holder whose renewals fail
// (the database refuses them) gives the lease up while it still holds,
// a heartbeat before it expires, never at or after the moment another
// server may take it: two holders never run the singleton loops at once.
func TestInstallationLeaseGivenUpBeforeExpiry(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		warned := warnSignal{make(chan struct{}, 16)}
		a, err := tenants.AcquireLease(ctx, e.db, tenants.LeaseConfig{TTL: 20 * time.Second, Heartbeat: 5 * time.Second, Clock: e.clock,
			Logger: slog.New(warned)})
		if err != nil {
			t.Fatal(err)
		}
		cur, err := tenants.CurrentLease(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.clock.BlockUntilContext(ctx, 1); err != nil { // the heartbeat's ticker
			t.Fatal(err)
		}
		if err := e.db.Exec("ALTER TABLE installation_lease RENAME TO installation_lease_away").Error; err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := e.db.Exec("ALTER TABLE installation_lease_away RENAME TO installation_lease").Error; err != nil {
				t.Error(err)
			}
			a.Release(ctx)
		}()
		for {
			e.clock.Advance(5 * time.Second)
			select {
			case <-a.Lost():
				if at := e.clock.Now(); !at.Before(cur.ExpiresAt) {
					t.Fatalf("Got(lease given up at) = %s; want before its expiry %s", at.UTC(), cur.ExpiresAt.UTC())
				}
				return
			case <-warned.ch: // a failed renewal: given up right after, or kept
				select {
				case <-a.Lost():
					if at := e.clock.Now(); !at.Before(cur.ExpiresAt) {
						t.Fatalf("Got(lease given up at) = %s; want before its expiry %s", at.UTC(), cur.ExpiresAt.UTC())
					}
					return
				case <-time.After(2 * time.Second):
				}
			case <-time.After(time.Minute):
				t.Fatal("the holder never tried to renew")
			}
			if e.clock.Now().After(cur.ExpiresAt.Add(time.Minute)) {
				t.Fatal("the holder never gave up a lease it could not renew")
			}
		}
	})
}

// warnSignal signals each warning logged.
type warnSignal struct{ ch chan struct{} }

func (w warnSignal) Enabled(context.Context, slog.Level) bool { return true }
func (w warnSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.ch <- struct{}{}
	}
	return nil
}
func (w warnSignal) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w warnSignal) WithGroup(string) slog.Handler      { return w }
