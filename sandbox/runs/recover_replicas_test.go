package runs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/replicas"
)

// TestRecoverReplicas (two replicas on one database, real registrations):
// the leader's recovery fails neither its own running run nor one another
// live replica executes (the old Recover failed every running run); once
// that replica dies (its heartbeat stops, its registration expires), its
// run is failed naming it and the leader's own stays running.
func TestRecoverReplicas(t *testing.T) {
	ctx := context.Background()
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			reg := func(url string) *replicas.Registry {
				t.Helper()
				r, err := replicas.New(e.db, replicas.Config{InternalURL: url, Key: make([]byte, 32), TTL: 2 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if err := r.Start(ctx); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Close(context.Background()) })
				return r
			}
			a, b := reg("http://a.internal:1"), reg("http://b.internal:2")
			live := func(ctx context.Context) ([]string, error) {
				rs, err := b.Replicas(ctx)
				var ids []string
				for _, r := range rs {
					ids = append(ids, r.ID)
				}
				return ids, err
			}
			leader := NewEngine(e.s, nil, nil, Config{ReplicaID: b.ID(), LiveReplicas: live})
			start := func(owner string) Run {
				t.Helper()
				r, err := e.s.Create(ctx, admin, e.a.ID, NewRun{Version: e.v, Trigger: Trigger{Kind: TriggerManual}})
				if err != nil {
					t.Fatal(err)
				}
				r.OwnerReplica = owner
				if err := e.s.start(ctx, &r); err != nil {
					t.Fatal(err)
				}
				return r
			}
			onA, onB := start(a.ID()), start(b.ID())
			state := func(r Run) Run {
				t.Helper()
				got, _, err := e.s.Get(ctx, e.a.ID, r.ID)
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			if got := state(onA); got.OwnerReplica != a.ID() {
				t.Errorf("Got(owner of a's run) = %q; want %q", got.OwnerReplica, a.ID())
			}

			if err := leader.Recover(ctx); err != nil {
				t.Fatalf("Recover = %v", err)
			}
			for _, r := range []Run{onA, onB} {
				if got := state(r); got.State != StateRunning {
					t.Errorf("Got(run of a live replica after the leader's Recover) = %s (%s); want running", got.State, got.StateReason)
				}
			}

			a.Abandon()                             // killed: no heartbeat, its registration expires
			deadline := time.Now().Add(time.Minute) // a bound on the wait, not the assertion
			for state(onA).State == StateRunning {
				if time.Now().After(deadline) {
					t.Fatal("Got(run of the dead replica) = still running a minute on; want failed")
				}
				time.Sleep(200 * time.Millisecond)
				if err := leader.RecoverOrphans(ctx); err != nil {
					t.Fatalf("RecoverOrphans = %v", err)
				}
			}
			if got := state(onA); got.State != StateFailed || !strings.Contains(got.StateReason, a.ID()) {
				t.Errorf("Got(run of the dead replica) = %s (%s); want failed naming replica %s", got.State, got.StateReason, a.ID())
			}
			if got := state(onB); got.State != StateRunning {
				t.Errorf("Got(the leader's own run) = %s (%s); want running", got.State, got.StateReason)
			}
		})
	}
}
