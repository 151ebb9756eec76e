package vmpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// fakeHost is a Hypervisor whose Capacity answers as the test says; the
// rest is never called by the down detection (checkHost).
type fakeHost struct {
	uri      string
	capacity func(ctx context.Context) (hypervisor.Capacity, error)
}

var errFake = errors.New("fake host: not used by this test")

func (f *fakeHost) URI() string                                { return f.uri }
func (f *fakeHost) DomainType(context.Context) (string, error) { return "qemu", nil }
func (f *fakeHost) Capacity(ctx context.Context) (hypervisor.Capacity, error) {
	return f.capacity(ctx)
}
func (f *fakeHost) Create(context.Context, hypervisor.DomainSpec) (*hypervisor.Domain, error) {
	return nil, errFake
}
func (f *fakeHost) Lookup(context.Context, string) (hypervisor.DomainInfo, error) {
	return hypervisor.DomainInfo{}, errFake
}
func (f *fakeHost) List(context.Context) ([]hypervisor.DomainInfo, error) { return nil, errFake }
func (f *fakeHost) Destroy(context.Context, string) error                 { return errFake }
func (f *fakeHost) OpenChannel(context.Context, string, string) (io.ReadWriteCloser, error) {
	return nil, errFake
}
func (f *fakeHost) Events() <-chan hypervisor.Event { return nil }
func (f *fakeHost) Close() error                    { return nil }

// TestHostDownDetection: a host whose cheap call blocks 5 s (its deadline
// passing, on a live connection) again and again is slow, not down: it
// keeps its VMs; only after HostSlowDownAfter without any answer is it down.
// A host whose connection is refused, or dropped, is down within the
// issue's 10 s, its VMs lost with "host <uri> down" — by the leader
// replica only: a follower records nothing. The clock is a fake
// one: a blocking call advances it by its 5 s.
func TestHostDownDetection(t *testing.T) {
	const uri = "qemu+tcp://127.0.0.1:9/system"
	slow := func(clk *clockwork.FakeClock) func(context.Context) (hypervisor.Capacity, error) {
		return func(context.Context) (hypervisor.Capacity, error) {
			clk.Advance(5 * time.Second) // blocked 5 s, past its 3 s deadline
			return hypervisor.Capacity{}, fmt.Errorf("host capacity: %w", context.DeadlineExceeded)
		}
	}
	cases := []struct {
		name string
		// capacity is the host's answer to the n-th cheap call.
		capacity func(clk *clockwork.FakeClock, n int) (hypervisor.Capacity, error)
		// disconnect: the connection's own probe failed (KindDisconnected).
		disconnect bool
		// wantDownIn: the host is down (its VMs lost) within this much
		// time; 0: never down over the test's 3 minutes.
		wantDownIn time.Duration
		// keptFor: the VMs are still there at least this long.
		keptFor time.Duration
		// follower: this replica does not hold the leader lease.
		follower bool
	}{
		{name: "slow, answering every 8th call", capacity: func(clk *clockwork.FakeClock, n int) (hypervisor.Capacity, error) {
			if n%8 == 7 {
				return hypervisor.Capacity{CPUs: 8, MemoryTotalKiB: 8 << 20, MemoryFreeKiB: 8 << 20}, nil
			}
			return slow(clk)(context.Background())
		}, keptFor: 3 * time.Minute},
		{name: "slow, never answering", capacity: func(clk *clockwork.FakeClock, n int) (hypervisor.Capacity, error) {
			return slow(clk)(context.Background())
		}, wantDownIn: HostSlowDownAfter + 6*time.Second, keptFor: HostSlowDownAfter - time.Second},
		{name: "connection refused", capacity: func(clk *clockwork.FakeClock, n int) (hypervisor.Capacity, error) {
			return hypervisor.Capacity{}, fmt.Errorf("host capacity: %w: reconnecting to %s: connection refused", hypervisor.ErrUnavailable, uri)
		}, wantDownIn: 10 * time.Second},
		{name: "connection dropped", disconnect: true, wantDownIn: 10 * time.Second},
		{name: "connection refused, not the leader", capacity: func(clk *clockwork.FakeClock, n int) (hypervisor.Capacity, error) {
			return hypervisor.Capacity{}, fmt.Errorf("host capacity: %w: connection refused", hypervisor.ErrUnavailable)
		}, follower: true, keptFor: 3 * time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := dbtest.SQLite(t)
			clk := clockwork.NewFakeClockAt(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
			calls := 0
			fake := &fakeHost{uri: uri, capacity: func(context.Context) (hypervisor.Capacity, error) {
				calls++
				return tc.capacity(clk, calls-1)
			}}
			svc, err := New(bg, db, Config{URIs: []string{uri}, DataDir: t.TempDir(), Clock: clk, MonitorInterval: time.Second,
				Leader:  func() bool { return !tc.follower },
				Connect: func(context.Context, string, string, *slog.Logger) (Hypervisor, error) { return fake, nil }})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { svc.Close() })
			if _, err := svc.store.AddHost(bg, admin, Host{URI: uri, CPUs: 8, MemoryKiB: 8 << 20}); err != nil {
				t.Fatal(err)
			}
			ts := tenants.NewStore(db, clk.Now)
			tn, err := ts.CreateTenant(bg, admin, "slow-host", "")
			if err != nil {
				t.Fatal(err)
			}
			q := tenants.DefaultQuota()
			q.MaxVMs, q.MaxVCPUs, q.MaxMemoryMiB = 10, 10, 1<<20
			if _, err := ts.SetQuota(bg, admin, tn.ID, q); err != nil {
				t.Fatal(err)
			}
			if _, err := svc.store.SetPool(bg, admin, tn.ID, PoolSettings{VCPUs: 1, MemoryMiB: 512, MaxVMs: 4}); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, err := svc.store.CreateVM(bg, admin, tn.ID, NewVM{Live: []string{uri}}); err != nil {
					t.Fatal(err)
				}
			}
			h := svc.hostByURI(uri)
			h.setUp(fake)
			start := clk.Now()
			h.mu.Lock()
			h.answered, h.connOK = start, start
			h.mu.Unlock()
			if tc.disconnect {
				h.setDown("libvirt connection lost: connection lost")
			}

			var downIn time.Duration
			for clk.Since(start) < 3*time.Minute {
				svc.checkHost(h)
				active, err := svc.store.activeOnHost(bg, uri)
				if err != nil {
					t.Fatal(err)
				}
				if len(active) < 2 {
					downIn = clk.Since(start)
					break
				}
				clk.Advance(time.Second) // MonitorInterval
			}
			if downIn != 0 && downIn < tc.keptFor {
				t.Errorf("Got(vms lost after) %v; want them kept at least %v", downIn, tc.keptFor)
			}
			switch {
			case tc.wantDownIn == 0 && downIn != 0:
				t.Fatalf("Got(host down after) %v; want never (slow is not down)", downIn)
			case tc.wantDownIn == 0:
				if st, err := svc.HostStatus(bg, uri); err != nil || st.DownAt != nil || (!st.Connected && !tc.follower) {
					t.Errorf("Got(host status) = %+v, %v; want connected, never down", st, err)
				}
				return
			case downIn == 0 || downIn > tc.wantDownIn:
				t.Fatalf("Got(host down after) %v; want within %v (0: never)", downIn, tc.wantDownIn)
			}
			rec, err := svc.store.host(bg, uri)
			if err != nil || rec.DownAt == nil {
				t.Fatalf("Got(host row) = %+v, %v; want down_at set", rec, err)
			}
			vms, err := svc.store.AllVMs(bg)
			if err != nil {
				t.Fatal(err)
			}
			for _, vm := range vms {
				if vm.State != StateLost || !strings.Contains(vm.StateReason, "host "+uri+" down") {
					t.Errorf("Got(vm %s) = %s (%s); want lost, host %s down", vm.ID, vm.State, vm.StateReason, uri)
				}
			}
		})
	}
}

// TestHostVerdict: the rule itself, at its bounds.
func TestHostVerdict(t *testing.T) {
	t0 := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	cases := []struct {
		name             string
		connOK, answered time.Duration // before now
		want             bool
	}{
		{"answered just now", 0, 0, false},
		{"connection failing 5 s", 5 * time.Second, 5 * time.Second, false},
		{"connection failing HostDownAfter", HostDownAfter, HostDownAfter, true},
		{"slow 59 s on a live connection", 0, 59 * time.Second, false},
		{"slow HostSlowDownAfter on a live connection", 0, HostSlowDownAfter, true},
	}
	for _, tc := range cases {
		if got := hostVerdict(t0, t0.Add(-tc.connOK), t0.Add(-tc.answered)); got != tc.want {
			t.Errorf("%s: Got(hostVerdict) = %v; want %v", tc.name, got, tc.want)
		}
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("host capacity: %w", context.DeadlineExceeded), false},
		{fmt.Errorf("host capacity: %w", hypervisor.ErrUnavailable), true},
		{fmt.Errorf("host capacity: node info: %w", errors.New("internal error")), false},
		{ErrUnavailable, true},
	} {
		if got := connFailure(c.err); got != c.want {
			t.Errorf("Got(connFailure(%v)) = %v; want %v", c.err, got, c.want)
		}
	}
}
