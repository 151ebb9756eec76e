package vmpool_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
)

// flakyCapacity is a real libvirt host whose Capacity fails, saying
// ErrUnavailable, while fail is set: one call's error while the connection
// itself is fine.
type flakyCapacity struct {
	vmpool.Hypervisor
	fail          atomic.Bool
	failed, after atomic.Int32 // failed calls; good calls after the first failure
}

func (f *flakyCapacity) Capacity(ctx context.Context) (hypervisor.Capacity, error) {
	if f.fail.CompareAndSwap(true, false) {
		f.failed.Add(1)
		return hypervisor.Capacity{}, fmt.Errorf("host capacity: %w: injected", hypervisor.ErrUnavailable)
	}
	if f.failed.Load() > 0 {
		f.after.Add(1)
	}
	return f.Hypervisor.Capacity(ctx)
}

// TestOneCallErrorKeepsHostUp: a call on a host that answers with
// ErrUnavailable while the connection is alive (its liveness probe
// passes, no KindDisconnected) leaves the host up and refreshed. It runs on
// libvirt's in-process test driver.
func TestOneCallErrorKeepsHostUp(t *testing.T) {
	db := freshDB(t)
	var flaky *flakyCapacity
	connect := func(ctx context.Context, uri, installationID string, log *slog.Logger) (vmpool.Hypervisor, error) {
		h, err := hypervisor.Connect(ctx, hypervisor.Config{URI: uri, InstallationID: installationID, Logger: log, DomainType: hypervisor.TypeQEMU})
		if err != nil {
			return nil, err
		}
		flaky = &flakyCapacity{Hypervisor: h}
		return flaky, nil
	}
	svc, err := vmpool.New(ctx, db, vmpool.Config{URIs: []string{"test:///default"}, DataDir: t.TempDir(), Logger: testLogger(t),
		Connect: connect, MonitorInterval: 50 * time.Millisecond, HostRefresh: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := svc.Start(sctx); err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if err := svc.Available(); err != nil {
		t.Fatalf("Got(Available) = %v; want the host up", err)
	}

	flaky.fail.Store(true)
	// A bound for correctness (the refresh runs every 100 ms), not speed.
	deadline := time.Now().Add(30 * time.Second)
	for flaky.after.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Got(host refreshes after one failed call) = none in 30 s (failed calls: %d; available: %v); "+
				"want the host kept up and refreshed", flaky.failed.Load(), svc.Available())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := svc.Available(); err != nil {
		t.Errorf("Got(Available after one failed call) = %v; want the host up", err)
	}
	hs, err := svc.Hosts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || !hs[0].Connected {
		t.Errorf("Got(Hosts) = %+v; want the one host connected", hs)
	}
}
