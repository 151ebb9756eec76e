package sandboxtest

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
)

// The one way VM tests get their VMs: every package that boots sandboxes
// checks the machine, builds the guest image, starts the services and
// cleans up its installation's domains through these, so a test stops the
// same way everywhere (Unavailable: a failure under CI=true) and never
// touches another test's domains on the shared libvirtd.

// PrepareVMs checks that sandboxes can boot here and builds the guest image
// (busybox and the templates in also) if needed: for an environment shared
// by a package's tests, set up outside any one test. skip says why VMs
// cannot run here ("" when they can); err, that the image could not be built.
func PrepareVMs(ctx context.Context, also ...string) (dataDir, skip string, err error) {
	if skip = hypervisortest.SystemUnavailable(); skip != "" {
		return "", skip, nil
	}
	dataDir = DataDir()
	if _, err := GuestImage(ctx, dataDir, also...); err != nil {
		return "", "", fmt.Errorf("guest image: %w", err)
	}
	return dataDir, "", nil
}

// NeedVMs is PrepareVMs for one test: it stops the test unless sandboxes
// can boot here (Unavailable without root or libvirtd, Fatal when the image
// cannot be built) and returns the guest image folder.
func NeedVMs(tb testing.TB, also ...string) string {
	tb.Helper()
	dataDir, skip, err := PrepareVMs(context.Background(), also...)
	if skip != "" {
		hypervisortest.Unavailable(tb, skip)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return dataDir
}

// StartServices starts the VM pools (pools; the system libvirtd and a 30 s
// connect timeout unless set) and then the sandbox service on them (sbx;
// the pools' data dir unless set), in serve's order: the sandbox service
// reconciles with the agents of the VMs the pools adopted. On an error it
// closes what it started.
func StartServices(ctx context.Context, db *gorm.DB, pools vmpool.Config, sbx sandbox.Config) (*vmpool.Service, *sandbox.Service, error) {
	if len(pools.URIs) == 0 {
		pools.URIs = []string{hypervisortest.SystemURI}
	}
	if pools.ConnectTimeout == 0 {
		pools.ConnectTimeout = 30 * time.Second
	}
	if sbx.DataDir == "" {
		sbx.DataDir = pools.DataDir
	}
	if sbx.Logger == nil {
		sbx.Logger = pools.Logger
	}
	// On the system libvirtd with the real connector: the domain type an
	// earlier start detected here (domaintype.go).
	detect := false
	if pools.DomainType == "" && pools.Connect == nil && len(pools.URIs) == 1 && pools.URIs[0] == hypervisortest.SystemURI {
		pools.DomainType = cachedDomainType(pools.DataDir)
		detect = pools.DomainType == ""
	}
	vms, err := vmpool.New(ctx, db, pools)
	if err != nil {
		return nil, nil, fmt.Errorf("vm pools: %w", err)
	}
	if err := vms.Start(ctx); err != nil {
		vms.Close()
		return nil, nil, fmt.Errorf("start the vm pools: %w", err)
	}
	if detect {
		rememberDomainType(ctx, vms, pools.DataDir)
	}
	svc := sandbox.New(db, vms, sbx)
	if err := svc.Start(ctx); err != nil {
		svc.Close()
		vms.Close()
		return nil, nil, fmt.Errorf("start the sandbox service: %w", err)
	}
	return vms, svc, nil
}

// Start is StartServices for one test. At its end the sandbox service and
// then the pools close, and last every domain of db's installation still
// there is destroyed (only that installation's: other tests share the
// libvirtd).
func Start(tb testing.TB, db *gorm.DB, pools vmpool.Config, sbx sandbox.Config) (*vmpool.Service, *sandbox.Service) {
	tb.Helper()
	DestroyAtCleanup(tb, db)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vms, svc, err := StartServices(ctx, db, pools, sbx)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { vms.Close() })
	tb.Cleanup(func() { svc.Close() })
	return vms, svc
}

// DestroyAtCleanup destroys, when the test ends, every domain of db's
// installation on the system libvirtd that is still there.
func DestroyAtCleanup(tb testing.TB, db *gorm.DB) {
	tb.Helper()
	install, err := tenants.NewStore(db, nil).InstallationID(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := hypervisortest.DestroyInstallation(ctx, hypervisortest.SystemURI, install); err != nil {
			tb.Errorf("destroy the test's VMs: %v", err)
		}
	})
}

// WaitVM waits until a VM of the tenant runs with its agent connected, or
// vmID itself when given, and returns its id. A VM that failed (or, for
// vmID, ended) is an error.
func WaitVM(ctx context.Context, vms *vmpool.Service, tenantID, vmID string) (string, error) {
	for {
		sts, err := vms.List(ctx, tenantID)
		if err != nil {
			return "", fmt.Errorf("list vms: %w", err)
		}
		for _, st := range sts {
			if vmID != "" && st.VM.ID != vmID {
				continue
			}
			switch {
			case st.VM.State == vmpool.StateRunning && st.AgentConnected:
				return st.VM.ID, nil
			case st.VM.State == vmpool.StateFailed, vmID != "" && !st.VM.State.Active():
				return "", fmt.Errorf("vm %s is %s (%s); want running", st.VM.ID, st.VM.State, st.VM.StateReason)
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no running vm with its agent (vm %q): %w", vmID, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LateGateway lets the VM pools start before the egress gateway, which
// reads the sandbox service's store: Set it before the first sandbox
// connects out.
type LateGateway struct {
	gw atomic.Pointer[egress.Gateway]
}

// Set makes gw serve every connection from now on.
func (g *LateGateway) Set(gw *egress.Gateway) { g.gw.Store(gw) }

// Handler serves a VM's egress connections through the gateway set.
func (g *LateGateway) Handler(tenantID, vmID string) agentproto.EgressHandler {
	return func(ctx context.Context, sandboxID string, conn net.Conn) {
		g.gw.Load().ServeConn(ctx, tenantID, vmID, sandboxID, conn)
	}
}
