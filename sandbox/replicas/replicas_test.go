package replicas

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

var ctx = context.Background()

func newRegistry(t *testing.T, db *gorm.DB, clock clockwork.Clock, url string) *Registry {
	t.Helper()
	r, err := New(db, Config{InternalURL: url, Key: make([]byte, 32), Clock: clock, VMLeaseTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.manual = true // the test beats by hand, on its fake clock
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// claim records a new VM lease for r as the VM pool does, in a transaction.
func claim(t *testing.T, db *gorm.DB, r *Registry, vmID string) {
	t.Helper()
	if err := db.Transaction(func(tx *gorm.DB) error { return r.ClaimNew(tx, vmID) }); err != nil {
		t.Fatal(err)
	}
	r.Claimed(vmID)
}

// TestVMLeases: the replica that boots a VM owns it; another live replica
// never takes a lease its owner renews; once the owner stops renewing it,
// another adopts it with a newer epoch, and the old owner, at its next
// heartbeat, lets go (OnLost) instead of renewing it.
func TestVMLeases(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
			a := newRegistry(t, d.DB, clock, "http://a.internal:1")
			b := newRegistry(t, d.DB, clock, "http://b.internal:2")
			var mu sync.Mutex
			var lostA []string
			a.OnLost(func(id string) { mu.Lock(); lostA = append(lostA, id); mu.Unlock() })

			if _, err := a.OwnerOf(ctx, "vm-1"); !errors.Is(err, errdefs.ErrUnavailable) {
				t.Fatalf("Got(OwnerOf(no lease)) = %v; want ErrUnavailable", err)
			}
			claim(t, d.DB, a, "vm-1")
			for _, r := range []*Registry{a, b} {
				got, err := r.OwnerOf(ctx, "vm-1")
				if err != nil || got.ID != a.Self().ID || got.InternalURL != "http://a.internal:1" {
					t.Fatalf("Got(OwnerOf(vm-1)) = %+v, %v; want replica a", got, err)
				}
			}
			if ok, err := b.Adopt(ctx, "vm-1"); err != nil || ok {
				t.Fatalf("Got(b.Adopt(a's live lease)) = %v, %v; want false", ok, err)
			}
			// a renews: still a's after more than a lease's worth of time.
			for i := 0; i < 4; i++ {
				clock.Advance(4 * time.Second)
				if err := a.beat(ctx); err != nil {
					t.Fatal(err)
				}
				if err := b.beat(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if ok, err := b.Adopt(ctx, "vm-1"); err != nil || ok {
				t.Fatalf("Got(b.Adopt(a's renewed lease)) = %v, %v; want false", ok, err)
			}
			// a stops renewing (as if killed): past the TTL, b adopts.
			clock.Advance(11 * time.Second)
			if err := b.beat(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := b.OwnerOf(ctx, "vm-1"); !errors.Is(err, errdefs.ErrUnavailable) {
				t.Fatalf("Got(OwnerOf(expired)) = %v; want ErrUnavailable", err)
			}
			if ok, err := b.Adopt(ctx, "vm-1"); err != nil || !ok {
				t.Fatalf("Got(b.Adopt(expired lease)) = %v, %v; want true", ok, err)
			}
			if got := b.Epoch("vm-1"); got != 2 {
				t.Errorf("Got(epoch after failover) = %d; want 2", got)
			}
			if got := b.Stats(); got.Failovers != 1 || got.Adopted != 1 || got.Held != 1 {
				t.Errorf("Got(b.Stats) = %+v; want 1 held, 1 adopted, 1 failover", got)
			}
			// a comes back: its heartbeat finds the newer epoch and lets go.
			if err := a.beat(ctx); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			got := append([]string(nil), lostA...)
			mu.Unlock()
			if len(got) != 1 || got[0] != "vm-1" || a.Owns("vm-1") {
				t.Errorf("Got(a lost) = %v, owns %v; want [vm-1], false", got, a.Owns("vm-1"))
			}
			if ok, err := a.Adopt(ctx, "vm-1"); err != nil || ok {
				t.Errorf("Got(a.Adopt(b's lease)) = %v, %v; want false", ok, err)
			}
			if owner, err := a.OwnerOf(ctx, "vm-1"); err != nil || owner.ID != b.Self().ID {
				t.Errorf("Got(OwnerOf after failover) = %+v, %v; want b", owner, err)
			}
			// The VM ends: its owner releases the lease; a non-owner cannot.
			if err := a.Release(ctx, "vm-1"); err != nil {
				t.Fatal(err)
			}
			if _, err := a.OwnerOf(ctx, "vm-1"); err != nil {
				t.Errorf("Got(OwnerOf after a non-owner's release) = %v; want b still", err)
			}
			if err := b.Release(ctx, "vm-1"); err != nil {
				t.Fatal(err)
			}
			if _, err := a.OwnerOf(ctx, "vm-1"); !errors.Is(err, errdefs.ErrUnavailable) {
				t.Errorf("Got(OwnerOf after release) = %v; want ErrUnavailable", err)
			}
			// Live replicas: both; after a clean Close, only b.
			if reps, err := b.Replicas(ctx); err != nil || len(reps) != 2 {
				t.Errorf("Got(Replicas) = %d, %v; want 2", len(reps), err)
			}
			claim(t, d.DB, a, "vm-2")
			if err := a.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if reps, err := b.Replicas(ctx); err != nil || len(reps) != 1 || reps[0].ID != b.Self().ID {
				t.Errorf("Got(Replicas after a closed) = %+v, %v; want only b", reps, err)
			}
			// A clean Close frees a's leases at once: b adopts without waiting.
			if ok, err := b.Adopt(ctx, "vm-2"); err != nil || !ok {
				t.Errorf("Got(b.Adopt(released lease)) = %v, %v; want true", ok, err)
			}
		})
	}
}

// TestAdoptRace: of replicas adopting one expired lease at once, exactly
// one wins.
func TestAdoptRace(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
			old := newRegistry(t, d.DB, clock, "http://old.internal:1")
			claim(t, d.DB, old, "vm-1")
			clock.Advance(11 * time.Second)
			rs := make([]*Registry, 4)
			for i := range rs {
				rs[i] = newRegistry(t, d.DB, clock, "http://r.internal:1")
			}
			var wg sync.WaitGroup
			wins := make([]bool, len(rs))
			for i, r := range rs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, err := r.Adopt(ctx, "vm-1")
					if err != nil {
						t.Error(err)
					}
					wins[i] = ok
				}()
			}
			wg.Wait()
			n := 0
			for _, w := range wins {
				if w {
					n++
				}
			}
			if n != 1 {
				t.Errorf("Got(%d winners of one expired lease) ; want 1: %v", n, wins)
			}
		})
	}
}

// TestVMLeasesLetGoBeforeExpiry: a replica whose heartbeats fail (the
// database refuses them) lets go of its VMs' channels while their leases
// still hold, a heartbeat before they expire: never at or after the
// moment another replica may adopt them, so no VM has two owners at once.
func TestVMLeasesLetGoBeforeExpiry(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
			a := newRegistry(t, d.DB, clock, "http://a.internal:1")
			var lostAt []time.Time
			a.OnLost(func(string) { lostAt = append(lostAt, clock.Now()) })
			claim(t, d.DB, a, "vm-1")
			lastOK := a.tick(a.now())
			var l Lease
			if err := d.DB.Take(&l, "vm_id = ?", "vm-1").Error; err != nil {
				t.Fatal(err)
			}
			if err := d.DB.Exec("ALTER TABLE vm_leases RENAME TO vm_leases_away").Error; err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := d.DB.Exec("ALTER TABLE vm_leases_away RENAME TO vm_leases").Error; err != nil {
					t.Error(err)
				}
			})
			for len(lostAt) == 0 && clock.Now().Before(l.ExpiresAt.Add(time.Minute)) {
				clock.Advance(a.cfg.Heartbeat)
				lastOK = a.tick(lastOK)
			}
			if len(lostAt) != 1 || !lostAt[0].Before(l.ExpiresAt) {
				t.Fatalf("Got(channel let go at) = %v; want once, before the lease's expiry %s", lostAt, l.ExpiresAt)
			}
			if a.Owns("vm-1") {
				t.Error("Got(a owns vm-1 after letting go) = true; want false")
			}
		})
	}
}
