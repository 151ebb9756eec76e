package sandbox_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/agentprototest"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// The hostile-guest tests run the real VM pool and sandbox service on
// libvirt's in-process test driver (test:///default: domains that "run" and
// boot nothing) and put a test agent at the other end of each VM's agent
// channel: the host speaks the real protocol (link layer, yamux, messages)
// over a net.Pipe to a guest whose answers the test decides. Only the
// channel (and the test driver's fixed free-memory figure) is not libvirt's own; guestHost passes the same conformance
// suite as the driver it wraps (TestGuestHostConformance).

const guestTestURI = "test:///default"

// guestHost is the test driver with each domain's agent channel answered
// by the guest the test set for that VM.
type guestHost struct {
	*hypervisor.Host
	guests *guests
}

func (h *guestHost) OpenChannel(ctx context.Context, id, name string) (io.ReadWriteCloser, error) {
	if _, err := h.Host.Lookup(ctx, id); err != nil {
		return nil, err
	}
	conn, _, err := agentprototest.Pipe(h.guests.get(id).reply)
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// Capacity is the driver's, with free memory what its domains leave of the
// node's: the test driver reports a fixed few MiB free whatever runs.
func (h *guestHost) Capacity(ctx context.Context) (hypervisor.Capacity, error) {
	c, err := h.Host.Capacity(ctx)
	if err != nil {
		return c, err
	}
	c.MemoryFreeKiB = c.MemoryTotalKiB - min(c.DomainMemoryKiB, c.MemoryTotalKiB)
	return c, nil
}

// guests are the test agents by VM id, made when a VM's channel is first
// opened.
type guests struct {
	mu sync.Mutex
	m  map[string]*guest
}

func (g *guests) get(vmID string) *guest {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m[vmID] == nil {
		g.m[vmID] = &guest{vmID: vmID, sandboxes: map[string]agentproto.SandboxInfo{}, stats: map[string]agentproto.SandboxStats{}}
	}
	return g.m[vmID]
}

// guest is one VM's agent as the test scripts it. By default it is honest:
// it lists the sandboxes it holds, reports their stats and destroys them.
type guest struct {
	vmID string

	mu        sync.Mutex
	sandboxes map[string]agentproto.SandboxInfo
	stats     map[string]agentproto.SandboxStats
	// extra are further entries of every list (fake ids).
	extra []agentproto.SandboxInfo
	// hold, when set, holds the answers to those ops until it is closed;
	// held receives one value per stream held, abandoned one per held
	// stream the host gave up on (closed or reset) while it was held.
	hold      map[agentproto.Op]chan struct{}
	held      chan agentproto.Op
	abandoned chan agentproto.Op
	// destroyed are the ids the host asked to destroy, in order.
	destroyed []string
}

func (g *guest) set(fn func(g *guest)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fn(g)
}

func (g *guest) destroyCalls() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.destroyed...)
}

func (g *guest) reply(st net.Conn, req agentproto.Request) {
	g.mu.Lock()
	hold := g.hold[req.Op]
	held, abandoned := g.held, g.abandoned
	g.mu.Unlock()
	if hold != nil {
		gone := make(chan struct{})
		go func() {
			// The host sends nothing more on a unary stream: a read ends
			// only when it closes or resets it.
			io.Copy(io.Discard, st)
			close(gone)
		}()
		if held != nil {
			held <- req.Op
		}
		select {
		case <-hold:
		case <-gone:
			if abandoned != nil {
				abandoned <- req.Op
			}
			return
		}
	}
	resp := agentproto.Response{V: agentproto.Version}
	g.mu.Lock()
	switch req.Op {
	case agentproto.OpHello:
		g.mu.Unlock()
		agentprototest.Hello(st, agentproto.OpHello, agentproto.OpPing, agentproto.OpStats, agentproto.OpSandboxCreate,
			agentproto.OpSandboxDestroy, agentproto.OpSandboxList, agentproto.OpSandboxStats, agentproto.OpVMIdentity)
		return
	case agentproto.OpVMIdentity:
		// The VM pool gives every VM its identity before anything else.
		resp.Identity = &agentproto.IdentityResult{Reseeded: true, BootID: "5f0c1b8e-3c2a-4d6e-9f10-2b3c4d5e6f70"}
	case agentproto.OpPing:
	case agentproto.OpStats:
		resp.Stats = &agentproto.Stats{Uptime: time.Minute, CPUs: 1, Sandboxes: len(g.sandboxes)}
	case agentproto.OpSandboxList:
		list := &agentproto.SandboxList{Sandboxes: []agentproto.SandboxInfo{}}
		for _, a := range g.sandboxes {
			list.Sandboxes = append(list.Sandboxes, a)
		}
		list.Sandboxes = append(list.Sandboxes, g.extra...)
		resp.Sandboxes = list
	case agentproto.OpSandboxStats:
		st, ok := g.stats[req.SandboxID]
		if !ok {
			resp.Error = &agentproto.Error{Code: agentproto.CodeNotFound, Message: "no such sandbox"}
			break
		}
		st.ID, st.State = req.SandboxID, agentproto.SandboxRunning
		resp.SandboxStats = &st
	case agentproto.OpSandboxDestroy:
		g.destroyed = append(g.destroyed, req.SandboxID)
		a, ok := g.sandboxes[req.SandboxID]
		delete(g.sandboxes, req.SandboxID)
		if !ok {
			resp.Error = &agentproto.Error{Code: agentproto.CodeNotFound, Message: "no such sandbox"}
			break
		}
		a.State = agentproto.SandboxDestroyed
		resp.Sandbox = &a
	default:
		resp.Error = &agentproto.Error{Code: agentproto.CodeUnknownOp, Message: string(req.Op)}
	}
	g.mu.Unlock()
	agentproto.WriteMessage(st, resp)
}

// guestEnv is a database, the VM pool on the test driver with test
// agents, and a sandbox service that is not started: tests run its passes
// themselves (sandbox.SyncPass, sandbox.SamplePass).
type guestEnv struct {
	db     *gorm.DB
	vms    *vmpool.Service
	svc    *sandbox.Service
	guests *guests
	ts     *tenants.Store
	clock  *clockwork.FakeClock
}

func newGuestEnv(t *testing.T, db *gorm.DB, cfg sandbox.Config) *guestEnv {
	t.Helper()
	if err := tenants.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	e := &guestEnv{db: db, guests: &guests{m: map[string]*guest{}}, ts: tenants.NewStore(db, nil),
		clock: clockwork.NewFakeClockAt(time.Now().UTC().Truncate(time.Second))}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = testLogger()
	}
	dataDir := sandboxtest.DataDir()
	if _, err := sandboxtest.GuestImage(ctx, dataDir); err != nil {
		t.Fatalf("guest image: %v", err)
	}
	connect := func(ctx context.Context, uri, installationID string, log *slog.Logger) (vmpool.Hypervisor, error) {
		h, err := hypervisor.Connect(ctx, hypervisor.Config{URI: uri, InstallationID: installationID, Logger: log})
		if err != nil {
			return nil, err
		}
		return &guestHost{Host: h, guests: e.guests}, nil
	}
	var err error
	e.vms, err = vmpool.New(ctx, db, vmpool.Config{URIs: []string{guestTestURI}, DataDir: dataDir, Logger: log, Connect: connect})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.vms.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.vms.Close() })
	cfg.DataDir, cfg.Logger = dataDir, log
	if cfg.Clock == nil {
		cfg.Clock = e.clock
	}
	e.svc = sandbox.New(db, e.vms, cfg)
	t.Cleanup(func() { e.svc.Close() })
	return e
}

func (e *guestEnv) tenant(t *testing.T, slug string) tenants.Tenant {
	t.Helper()
	tn, err := e.ts.CreateTenant(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, slug, slug)
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

// vm boots one VM of the tenant on the test driver and waits until its
// agent (the test guest) answered the handshake.
func (e *guestEnv) vm(t *testing.T, tenantID string) (vmpool.VM, *guest) {
	t.Helper()
	if _, err := e.vms.SetPool(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, tenantID,
		vmpool.PoolSettings{VCPUs: 2, MemoryMiB: 1024, MaxVMs: 4, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	vm, err := e.vms.Create(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, tenantID)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := e.vms.Get(ctx, tenantID, vm.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.VM.State == vmpool.StateRunning && st.AgentConnected {
			return st.VM, e.guests.get(vm.ID)
		}
		if !st.VM.State.Active() {
			t.Fatalf("vm %s is %s: %s", vm.ID, st.VM.State, st.VM.StateReason)
		}
		if time.Now().After(deadline) {
			t.Fatalf("vm %s did not come up on the test driver: %s/%s", vm.ID, st.VM.State, st.VM.Phase)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sandbox stores a running sandbox of the tenant on vm, started at the
// clock's now, and puts it in the VM's guest.
func (e *guestEnv) sandbox(t *testing.T, tenantID string, vm vmpool.VM, g *guest, vcpus int) sandbox.Sandbox {
	t.Helper()
	id := uuid.Must(uuid.NewV7()).String()
	now := e.clock.Now()
	sb := sandbox.Sandbox{ID: id, TenantID: tenantID, VMID: vm.ID, State: sandbox.StateRunning, StateReason: "fixture",
		Template: "busybox", VCPUs: vcpus, MemoryMiB: 128, TimeoutSeconds: 3600, EnvKeysJSON: "[]", MetadataJSON: "{}",
		CreatedBy: "dev@example.com", CreatedByName: "Dev", CreatedAt: now, StartedAt: &now, ExpiresAt: now.Add(time.Hour)}
	if err := e.db.Create(&sb).Error; err != nil {
		t.Fatal(err)
	}
	g.set(func(g *guest) {
		g.sandboxes[id] = agentproto.SandboxInfo{ID: id, Template: "busybox", State: agentproto.SandboxRunning}
		g.stats[id] = agentproto.SandboxStats{}
	})
	return sb
}

func (e *guestEnv) state(t *testing.T, tenantID, id string) sandbox.State {
	t.Helper()
	sb, err := e.svc.Store().Sandbox(ctx, tenantID, id)
	if err != nil {
		t.Fatal(err)
	}
	return sb.State
}

// sqliteGuestEnv is newGuestEnv on a fresh SQLite database.
func sqliteGuestEnv(t *testing.T, cfg sandbox.Config) *guestEnv {
	t.Helper()
	return newGuestEnv(t, dbtest.SQLite(t), cfg)
}

// TestGuestHostConformance runs the hypervisor conformance suite on
// guestHost: apart from the agent channel it is the test driver itself.
func TestGuestHostConformance(t *testing.T) {
	connect := func(t *testing.T) hypervisortest.Host {
		return &guestHost{Host: hypervisortest.Connect(t, hypervisor.Config{URI: guestTestURI}), guests: &guests{m: map[string]*guest{}}}
	}
	hypervisortest.RunConformance(t, connect, hypervisortest.Options{
		Spec: func(id, tenant string) hypervisor.DomainSpec {
			return hypervisor.DomainSpec{ID: id, TenantID: tenant, VCPUs: 1, MemoryMiB: 128,
				Kernel: "/nonexistent/vmlinux", ChannelName: agentproto.ChannelName}
		},
		Other: connect,
	})
}
