package vmpool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

var bg = context.Background()

var admin = audit.Actor{Kind: audit.ActorUser, ID: "u-admin", Name: "admin@example.com"}

// storeEnv is one fresh database with a store on a hand-moved clock.
type storeEnv struct {
	db      *gorm.DB
	store   *Store
	tenants *tenants.Store
	log     *audit.Log
	now     time.Time
	mu      sync.Mutex
}

func (e *storeEnv) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *storeEnv) advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	e.mu.Unlock()
}

// eachDB runs fn on SQLite and, when configured, PostgreSQL.
func eachDB(t *testing.T, fn func(t *testing.T, e *storeEnv)) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			e := &storeEnv{db: d.DB, now: time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)}
			e.store = NewStore(d.DB, e.clock)
			e.tenants = tenants.NewStore(d.DB, e.clock)
			e.log = audit.NewLog(d.DB, e.clock)
			if err := e.store.upsertHost(bg, Host{URI: "test:///host", Health: HealthOK, CPUs: 4}); err != nil {
				t.Fatal(err)
			}
			fn(t, e)
		})
	}
}

func (e *storeEnv) tenant(t *testing.T, slug string) string {
	t.Helper()
	tn, err := e.tenants.CreateTenant(bg, admin, slug, "")
	if err != nil {
		t.Fatalf("CreateTenant(%s) = %v", slug, err)
	}
	return tn.ID
}

// rows counts what the pool store writes, to prove a rejected call wrote nothing.
func (e *storeEnv) rows(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, table := range []string{"vm_pools", "vms", "audit_events", "tenant_quotas"} {
		var n int64
		if err := e.db.Table(table).Count(&n).Error; err != nil {
			t.Fatal(err)
		}
		out[table] = n
	}
	return out
}

func (e *storeEnv) unchanged(t *testing.T, before map[string]int64, what string) {
	t.Helper()
	after := e.rows(t)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s wrote rows: Got(%s) = %d; want %d", what, k, after[k], v)
		}
	}
}

func (e *storeEnv) events(t *testing.T, tenantID, typ string) []audit.Event {
	t.Helper()
	evs, err := e.log.List(bg, tenantID, audit.Filter{Type: typ, Limit: audit.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestPoolSettingsValidation(t *testing.T) {
	eachDB(t, func(t *testing.T, e *storeEnv) {
		tn := e.tenant(t, "pool-valid")
		good := PoolSettings{VCPUs: 1, MemoryMiB: 512, MaxVMs: 2, WarmVMs: 1, RecycleAfterHours: 24}
		bad := []struct {
			name  string
			mod   func(*PoolSettings)
			field string
		}{
			{"vcpus zero", func(p *PoolSettings) { p.VCPUs = 0 }, "vcpus"},
			{"vcpus 17", func(p *PoolSettings) { p.VCPUs = 17 }, "vcpus"},
			{"memory 255", func(p *PoolSettings) { p.MemoryMiB = 255 }, "memory_mib"},
			{"memory 65537", func(p *PoolSettings) { p.MemoryMiB = 65537 }, "memory_mib"},
			{"max vms negative", func(p *PoolSettings) { p.MaxVMs = -1 }, "max_vms"},
			{"max vms 101", func(p *PoolSettings) { p.MaxVMs = 101 }, "max_vms"},
			{"warm above max", func(p *PoolSettings) { p.WarmVMs = 3 }, "warm_vms"},
			{"warm negative", func(p *PoolSettings) { p.WarmVMs = -1 }, "warm_vms"},
			{"recycle negative", func(p *PoolSettings) { p.RecycleAfterHours = -1 }, "recycle_after_hours"},
			{"recycle beyond a year", func(p *PoolSettings) { p.RecycleAfterHours = 8761 }, "recycle_after_hours"},
		}
		for _, tc := range bad {
			t.Run(tc.name, func(t *testing.T) {
				in := good
				tc.mod(&in)
				before := e.rows(t)
				_, err := e.store.SetPool(bg, admin, tn, in)
				var fe *errdefs.FieldError
				if !errors.As(err, &fe) || fe.Field != tc.field {
					t.Fatalf("Got(SetPool(%+v)) = %v; want a FieldError naming %s", in, err, tc.field)
				}
				if !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("errors.Is(%v, ErrInvalid) = false; want true", err)
				}
				e.unchanged(t, before, "rejected SetPool")
			})
		}

		// Quota: the default allows 4 VMs, 8 vCPUs, 8 GiB.
		over := []struct {
			name  string
			in    PoolSettings
			quota string
		}{
			{"more vms than the quota", PoolSettings{VCPUs: 1, MemoryMiB: 256, MaxVMs: 5}, tenants.QuotaMaxVMs},
			{"vcpus of a full pool", PoolSettings{VCPUs: 4, MemoryMiB: 256, MaxVMs: 3}, tenants.QuotaMaxVCPUs},
			{"memory of a full pool", PoolSettings{VCPUs: 1, MemoryMiB: 4096, MaxVMs: 3}, tenants.QuotaMaxMemoryMiB},
		}
		for _, tc := range over {
			t.Run(tc.name, func(t *testing.T) {
				if _, err := e.store.Pool(bg, tn); err != nil { // make the lazy quota row first
					t.Fatal(err)
				}
				if _, err := e.tenants.Quota(bg, tn); err != nil {
					t.Fatal(err)
				}
				before := e.rows(t)
				_, err := e.store.SetPool(bg, admin, tn, tc.in)
				var qe *errdefs.QuotaError
				if !errors.As(err, &qe) || qe.Quota != tc.quota {
					t.Fatalf("Got(SetPool(%+v)) = %v; want a QuotaError naming %s", tc.in, err, tc.quota)
				}
				if !errors.Is(err, errdefs.ErrQuota) {
					t.Errorf("errors.Is(%v, ErrQuota) = false; want true", err)
				}
				e.unchanged(t, before, "over-quota SetPool")
			})
		}

		p, err := e.store.SetPool(bg, admin, tn, good)
		if err != nil {
			t.Fatalf("SetPool(%+v) = %v", good, err)
		}
		got, err := e.store.Pool(bg, tn)
		if err != nil || got.Settings() != good || got.UpdatedBy != admin.ID || !got.UpdatedAt.Equal(e.now) {
			t.Errorf("Got(Pool) = %+v, %v; want %+v saved by %s at %v", got, err, good, admin.ID, e.now)
		}
		if p.Settings() != good {
			t.Errorf("Got(SetPool) = %+v; want %+v", p.Settings(), good)
		}
		evs := e.events(t, tn, audit.TypeVMPoolUpdated)
		if len(evs) != 1 || evs[0].Code != "SV7004I" || evs[0].ActorID != admin.ID {
			t.Errorf("Got(pool audit events) = %+v; want one vm.pool_updated by %s", evs, admin.ID)
		}
	})
}

func TestDefaultPool(t *testing.T) {
	eachDB(t, func(t *testing.T, e *storeEnv) {
		tn := e.tenant(t, "pool-default")
		p, err := e.store.Pool(bg, tn)
		if err != nil {
			t.Fatal(err)
		}
		if want := DefaultPool(tn); p != want {
			t.Errorf("Got(Pool of a tenant without settings) = %+v; want %+v", p, want)
		}
		if err := p.Settings().Validate(); err != nil {
			t.Errorf("DefaultPool fails its own validation: %v", err)
		}
	})
}

func TestCreateVMChecksPoolAndQuota(t *testing.T) {
	eachDB(t, func(t *testing.T, e *storeEnv) {
		tn := e.tenant(t, "create-quota")
		if _, err := e.store.SetPool(bg, admin, tn, PoolSettings{VCPUs: 2, MemoryMiB: 512, MaxVMs: 3, RecycleAfterHours: 2}); err != nil {
			t.Fatal(err)
		}
		vm, err := e.store.CreateVM(bg, admin, tn, NewVM{HostURI: "test:///host", ImageVersion: "img1"})
		if err != nil {
			t.Fatalf("CreateVM = %v", err)
		}
		if vm.State != StateBooting || vm.Phase != PhaseQueued || vm.VCPUs != 2 || vm.MemoryMiB != 512 || vm.ImageVersion != "img1" {
			t.Errorf("Got(CreateVM) = %+v; want booting/queued, 2 vCPUs, 512 MiB, image img1", vm)
		}
		if vm.RecycleAfter == nil || !vm.RecycleAfter.Equal(e.now.Add(2*time.Hour)) {
			t.Errorf("Got(RecycleAfter) = %v; want %v", vm.RecycleAfter, e.now.Add(2*time.Hour))
		}
		if evs := e.events(t, tn, audit.TypeVMCreated); len(evs) != 1 || evs[0].TargetID != vm.ID {
			t.Errorf("Got(vm.created events) = %+v; want one for %s", evs, vm.ID)
		}

		// The quota is lowered under the pool: 2 more vCPUs would exceed it.
		if _, err := e.tenants.SetQuota(bg, admin, tn, tenants.Quota{MaxVMs: 4, MaxVCPUs: 3, MaxMemoryMiB: 8192, MaxSandboxes: 4}); err != nil {
			t.Fatal(err)
		}
		before := e.rows(t)
		_, err = e.store.CreateVM(bg, admin, tn, NewVM{HostURI: "test:///host"})
		var qe *errdefs.QuotaError
		if !errors.As(err, &qe) || qe.Quota != tenants.QuotaMaxVCPUs || qe.Want != 4 || qe.Limit != 3 {
			t.Fatalf("Got(CreateVM over the vCPU quota) = %v; want QuotaError max_vcpus want 4 limit 3", err)
		}
		e.unchanged(t, before, "over-quota CreateVM")

		// The pool's own max_vms.
		if _, err := e.tenants.SetQuota(bg, admin, tn, tenants.DefaultQuota()); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if _, err := e.store.CreateVM(bg, admin, tn, NewVM{HostURI: "test:///host"}); err != nil {
				t.Fatalf("CreateVM %d = %v", i+2, err)
			}
		}
		before = e.rows(t)
		_, err = e.store.CreateVM(bg, admin, tn, NewVM{HostURI: "test:///host"})
		if !errors.As(err, &qe) || qe.Quota != QuotaPoolMaxVMs {
			t.Fatalf("Got(CreateVM beyond max_vms) = %v; want QuotaError %s", err, QuotaPoolMaxVMs)
		}
		e.unchanged(t, before, "CreateVM beyond max_vms")

		// An ended VM no longer counts.
		if _, _, err := e.store.end(bg, vm.ID, []State{StateBooting}, StateFailed, "test", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.CreateVM(bg, admin, tn, NewVM{HostURI: "test:///host"}); err != nil {
			t.Errorf("CreateVM after one ended = %v; want room for it", err)
		}
	})
}

func TestConcurrentCreatesRespectMaxVMs(t *testing.T) {
	eachDB(t, func(t *testing.T, e *storeEnv) {
		tn := e.tenant(t, "create-race")
		if _, err := e.store.SetPool(bg, admin, tn, PoolSettings{VCPUs: 1, MemoryMiB: 256, MaxVMs: 3}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		results := make(chan error, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := e.store.CreateVM(bg, admin, tn, NewVM{HostURI: "test:///host"})
				results <- err
			}()
		}
		wg.Wait()
		close(results)
		ok := 0
		for err := range results {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, errdefs.ErrQuota):
				t.Errorf("concurrent CreateVM = %v; want nil or ErrQuota", err)
			}
		}
		active, err := e.store.activeOf(bg, tn)
		if err != nil {
			t.Fatal(err)
		}
		if ok != 3 || len(active) != 3 {
			t.Errorf("Got(created, active) = %d, %d; want 3, 3", ok, len(active))
		}
	})
}

// runningVM makes a VM and moves it to running as a boot would.
func (e *storeEnv) runningVM(t *testing.T, tn string) VM {
	t.Helper()
	vm, err := e.store.CreateVM(bg, admin, tn, NewVM{HostURI: "test:///host", ImageVersion: "img"})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := e.store.markRunning(bg, vm.ID, ready{AgentVersion: "a1", KernelVersion: "k1", DomainUUID: "u1", Boot: 2500 * time.Millisecond})
	if err != nil || !ok {
		t.Fatalf("markRunning = %v, %v; want true", ok, err)
	}
	vm, err = e.store.VM(bg, tn, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

func TestStoreTenantIsolation(t *testing.T) {
	eachDB(t, func(t *testing.T, e *storeEnv) {
		own := e.tenant(t, "iso-own")
		other := e.tenant(t, "iso-other")
		if _, err := e.store.SetPool(bg, admin, own, PoolSettings{VCPUs: 1, MemoryMiB: 256, MaxVMs: 4}); err != nil {
			t.Fatal(err)
		}
		vm := e.runningVM(t, own)
		if _, err := e.store.acquire(bg, own); err != nil {
			t.Fatal(err)
		}
		calls := []struct {
			name string
			call func(tenantID string) error
		}{
			{"VM", func(tn string) error { _, err := e.store.VM(bg, tn, vm.ID); return err }},
			{"beginStop", func(tn string) error {
				_, err := e.store.beginStop(bg, admin, tn, vm.ID, "test", audit.TypeVMStopped)
				return err
			}},
			{"release", func(tn string) error { return e.store.release(bg, tn, vm.ID) }},
			{"CreateVM replacing it", func(tn string) error {
				_, err := e.store.CreateVM(bg, admin, tn, NewVM{HostURI: "test:///host", Replaces: vm.ID})
				return err
			}},
		}
		for _, c := range calls {
			t.Run(c.name, func(t *testing.T) {
				before := e.rows(t)
				if err := c.call(other); !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("Got(%s from the other tenant) = %v; want ErrNotFound", c.name, err)
				}
				e.unchanged(t, before, c.name+" from the other tenant")
			})
		}
		list, err := e.store.VMs(bg, other)
		if err != nil || len(list) != 0 {
			t.Errorf("Got(VMs(other)) = %d VMs, %v; want none", len(list), err)
		}
		if _, err := e.store.acquire(bg, other); !errors.Is(err, ErrNoIdleVM) {
			t.Errorf("Got(acquire(other)) = %v; want ErrNoIdleVM", err)
		}
		// The VM is untouched and still works for its own tenant.
		got, err := e.store.VM(bg, own, vm.ID)
		if err != nil || got.State != StateRunning || got.AcquiredAt == nil {
			t.Errorf("Got(VM(own)) = %+v, %v; want running and acquired", got, err)
		}
		if err := e.store.release(bg, own, vm.ID); err != nil {
			t.Errorf("release(own) = %v", err)
		}
	})
}

func TestAcquireRelease(t *testing.T) {
	eachDB(t, func(t *testing.T, e *storeEnv) {
		tn := e.tenant(t, "acquire")
		if _, err := e.store.SetPool(bg, admin, tn, PoolSettings{VCPUs: 1, MemoryMiB: 256, MaxVMs: 4}); err != nil {
			t.Fatal(err)
		}
		a, b := e.runningVM(t, tn), e.runningVM(t, tn)
		if _, err := e.store.CreateVM(bg, admin, tn, NewVM{HostURI: "test:///host"}); err != nil { // booting: not acquirable
			t.Fatal(err)
		}
		var (
			mu  sync.Mutex
			got = map[string]int{}
			wg  sync.WaitGroup
		)
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				vm, err := e.store.acquire(bg, tn)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					got[vm.ID]++
				} else if !errors.Is(err, ErrNoIdleVM) {
					t.Errorf("acquire = %v; want nil or ErrNoIdleVM", err)
				}
			}()
		}
		wg.Wait()
		if len(got) != 2 || got[a.ID] != 1 || got[b.ID] != 1 {
			t.Fatalf("Got(acquired) = %v; want %s and %s once each", got, a.ID, b.ID)
		}
		if err := e.store.release(bg, tn, a.ID); err != nil {
			t.Fatal(err)
		}
		if err := e.store.release(bg, tn, a.ID); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("Got(second release) = %v; want ErrConflict", err)
		}
		vm, err := e.store.acquire(bg, tn)
		if err != nil || vm.ID != a.ID || vm.SandboxesServed != 2 {
			t.Errorf("Got(acquire after release) = %s served %d, %v; want %s served 2", vm.ID, vm.SandboxesServed, err, a.ID)
		}
	})
}

func TestEndRecordsOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, e *storeEnv) {
		tn := e.tenant(t, "end-once")
		vm := e.runningVM(t, tn)
		var wg sync.WaitGroup
		changed := make(chan bool, 4)
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, ch, err := e.store.end(bg, vm.ID, []State{StateBooting, StateRunning}, StateLost, "qemu died",
					eventPtr(SystemActor().Event(tn, audit.TypeVMLost, "vm", vm.ID, nil)))
				if err != nil {
					t.Errorf("end = %v", err)
				}
				changed <- ch
			}()
		}
		wg.Wait()
		close(changed)
		n := 0
		for c := range changed {
			if c {
				n++
			}
		}
		evs := e.events(t, tn, audit.TypeVMLost)
		if n != 1 || len(evs) != 1 || evs[0].Code != "SV7003W" || evs[0].Details["state"] != "lost" {
			t.Errorf("Got(changed, vm.lost events) = %d, %+v; want exactly one", n, evs)
		}
		got, _ := e.store.VM(bg, tn, vm.ID)
		if got.State != StateLost || got.EndedAt == nil || got.StateReason != "qemu died" {
			t.Errorf("Got(VM after end) = %+v; want lost, ended, reason recorded", got)
		}
	})
}

func TestRecycleDueAndReplace(t *testing.T) {
	eachDB(t, func(t *testing.T, e *storeEnv) {
		tn := e.tenant(t, "recycle")
		if _, err := e.store.SetPool(bg, admin, tn, PoolSettings{VCPUs: 1, MemoryMiB: 256, MaxVMs: 1, RecycleAfterHours: 1}); err != nil {
			t.Fatal(err)
		}
		vm := e.runningVM(t, tn)
		if due, err := e.store.recycleDue(bg); err != nil || len(due) != 0 {
			t.Fatalf("Got(recycleDue at once) = %v, %v; want none", due, err)
		}
		e.advance(61 * time.Minute)
		due, err := e.store.recycleDue(bg)
		if err != nil || len(due) != 1 || due[0].ID != vm.ID {
			t.Fatalf("Got(recycleDue after an hour) = %v, %v; want %s", due, err, vm.ID)
		}

		// max_vms is 1, yet the replacement fits: the VM it replaces stops counting.
		repl, err := e.store.CreateVM(bg, admin, tn, NewVM{HostURI: "test:///host", Replaces: vm.ID})
		if err != nil {
			t.Fatalf("CreateVM replacing %s = %v", vm.ID, err)
		}
		old, _ := e.store.VM(bg, tn, vm.ID)
		if old.State != StateStopping || old.StateReason != "recycled" {
			t.Errorf("Got(replaced VM) = %s (%s); want stopping (recycled)", old.State, old.StateReason)
		}
		evs := e.events(t, tn, audit.TypeVMRecycled)
		if len(evs) != 1 || evs[0].TargetID != vm.ID || evs[0].Details["replacement"] != repl.ID {
			t.Errorf("Got(vm.recycled events) = %+v; want one for %s naming %s", evs, vm.ID, repl.ID)
		}
		// A VM that is not running cannot be replaced.
		if _, err := e.store.CreateVM(bg, admin, tn, NewVM{HostURI: "test:///host", Replaces: repl.ID}); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("Got(replacing a booting VM) = %v; want ErrConflict", err)
		}
	})
}
