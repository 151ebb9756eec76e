package vmpool_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"
	"libvirt.org/go/libvirt"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web/webtest"
)

var ctx = context.Background()

var operatorActor = audit.Actor{Kind: audit.ActorUser, ID: "u-op", Name: "op@example.com"}

// vmJSON is what the API says about a VM.
type vmJSON struct {
	ID          string `json:"id"`
	State       string `json:"state"`
	StateReason string `json:"state_reason"`
	Progress    struct {
		Phase string `json:"phase"`
		Step  int    `json:"step"`
		Of    int    `json:"of"`
	} `json:"progress"`
	AgentVersion   string   `json:"agent_version"`
	KernelVersion  string   `json:"kernel_version"`
	AgentConnected bool     `json:"agent_connected"`
	VCPUs          int      `json:"vcpus"`
	MemoryMiB      int      `json:"memory_mib"`
	CPUTimeMS      int64    `json:"cpu_time_ms"`
	CPUPercent     *float64 `json:"cpu_percent"`
	UptimeSeconds  float64  `json:"uptime_seconds"`
	BootMS         int64    `json:"boot_ms"`
	Guest          *struct {
		UptimeSeconds float64 `json:"uptime_seconds"`
		MemTotalBytes uint64  `json:"mem_total_bytes"`
		CPUs          int     `json:"cpus"`
	} `json:"guest"`
}

// fixture is the shared environment of TestVMs: one database, one service
// (replaced once by the restart test), the web app, two tenants.
type fixture struct {
	top     *testing.T // owns the service and the web app across subtests
	db      *gorm.DB
	dataDir string
	svc     *vmpool.Service
	web     *webtest.Env
	a, b    tenants.Tenant

	tokA, tokB, tokDev, tokAud string
	apiA, apiB, apiDev, apiAud *webtest.Client
	annA, bobB, op             *webtest.Client // signed-in browsers
}

func (f *fixture) connectWeb() {
	t := f.top
	t.Helper()
	f.web = newWeb(t, f.db, f.svc, "op@example.com")
	f.apiA, f.apiB = f.web.WithToken(f.tokA), f.web.WithToken(f.tokB)
	f.apiDev, f.apiAud = f.web.WithToken(f.tokDev), f.web.WithToken(f.tokAud)
	f.annA = f.web.Login(t, "ann@a.example")
	f.bobB = f.web.Login(t, "bob@b.example")
	f.op = f.web.Login(t, "op@example.com")
}

func newFixture(t *testing.T) *fixture {
	dataDir, _ := needVMs(t)
	f := &fixture{top: t, db: freshDB(t), dataDir: dataDir}
	f.svc = newService(t, f.db, dataDir)
	cleanupInstallation(t, f.svc.InstallationID())
	ts := tenants.NewStore(f.db, nil)
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
	var err error
	if f.a, err = ts.CreateTenantWithAdmin(ctx, sys, "vm-a", "Tenant A", "ann@a.example"); err != nil {
		t.Fatal(err)
	}
	if f.b, err = ts.CreateTenantWithAdmin(ctx, sys, "vm-b", "Tenant B", "bob@b.example"); err != nil {
		t.Fatal(err)
	}
	token := func(tn tenants.Tenant, role tenants.Role) string {
		secret, _, err := ts.CreateToken(ctx, sys, tn.ID, tenants.NewToken{Name: "vm-" + string(role), Role: role})
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	f.tokA, f.tokB = token(f.a, tenants.RoleAdmin), token(f.b, tenants.RoleAdmin)
	f.tokDev, f.tokAud = token(f.a, tenants.RoleDeveloper), token(f.a, tenants.RoleAuditor)
	f.connectWeb()
	return f
}

// waitVM polls the store until the VM is in state want, failing early when
// it ends in another state. It returns the phases it saw on the way.
func (f *fixture) waitVM(t *testing.T, tenantID, id string, want vmpool.State, timeout time.Duration) (vmpool.VM, map[vmpool.Phase]bool) {
	t.Helper()
	phases := map[vmpool.Phase]bool{}
	deadline := time.Now().Add(timeout)
	for {
		vm, err := f.svc.Store().VM(ctx, tenantID, id)
		if err != nil {
			t.Fatalf("VM(%s) = %v", id, err)
		}
		phases[vm.Phase] = true
		if vm.State == want {
			return vm, phases
		}
		if !vm.State.Active() {
			t.Fatalf("VM %s ended %s (%s); want %s", id, vm.State, vm.StateReason, want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("VM %s still %s/%s after %v; want %s", id, vm.State, vm.Phase, timeout, want)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// domainExists asks libvirt directly, not through our driver.
func domainExists(t *testing.T, id string) bool {
	t.Helper()
	_, ok := hypervisortest.RawInfo(t, systemURI, hypervisor.DomainName(id))
	return ok
}

func qemuPID(t *testing.T, id string) int {
	t.Helper()
	b, err := os.ReadFile("/run/libvirt/qemu/" + hypervisor.DomainName(id) + ".pid")
	if err != nil {
		t.Fatalf("QEMU pid of %s: %v", id, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("QEMU pid of %s: %v", id, err)
	}
	return pid
}

func (f *fixture) events(t *testing.T, tenantID, typ, target string) []audit.Event {
	t.Helper()
	evs, err := audit.NewLog(f.db, nil).List(ctx, tenantID, audit.Filter{Type: typ, Limit: audit.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Event
	for _, e := range evs {
		if target == "" || e.TargetID == target {
			out = append(out, e)
		}
	}
	return out
}

func (f *fixture) setPool(t *testing.T, vcpus, mem, maxVMs, warm int) {
	t.Helper()
	status, body := f.apiA.JSON(t, http.MethodPut, "/api/v1/vm-pool",
		map[string]int{"vcpus": vcpus, "memory_mib": mem, "max_vms": maxVMs, "warm_vms": warm, "recycle_after_hours": 24}, nil)
	if status != http.StatusOK {
		t.Fatalf("PUT /api/v1/vm-pool = %d %s; want 200", status, body)
	}
}

// TestVMs boots a handful of real VMs with the real image and runs every
// acceptance check on them in order, sharing them where it can (each TCG
// boot costs seconds of both CPUs).
func TestVMs(t *testing.T) {
	f := newFixture(t)

	// No boots: rejected input, permissions.
	t.Run("BadInput", f.testBadInput)
	t.Run("Permissions", f.testPermissions)

	var vm1, vm4 string
	t.Run("BootViaAPI", func(t *testing.T) {
		f.setPool(t, 1, 512, 3, 0)
		var got [2]vmJSON
		for i := range got {
			status, body := f.apiA.JSON(t, http.MethodPost, "/api/v1/vms", nil, &got[i])
			if status != http.StatusAccepted || got[i].State != "booting" || got[i].ID == "" {
				t.Fatalf("POST /api/v1/vms = %d %s; want 202 with a booting VM", status, body)
			}
			if got[i].AgentVersion != "" {
				t.Errorf("Got(agent_version before the handshake) = %q; want none", got[i].AgentVersion)
			}
		}
		start := time.Now()
		vm, phases := f.waitVM(t, f.a.ID, got[0].ID, vmpool.StateRunning, 3*time.Minute)
		f.waitVM(t, f.a.ID, got[1].ID, vmpool.StateRunning, 3*time.Minute)
		t.Logf("MEASURED two VMs booted together: running after %v (first boot_ms %d)", time.Since(start).Round(time.Millisecond), vm.BootMS)
		if vm.AgentVersion == "" || vm.KernelVersion == "" || vm.DomainUUID == "" || vm.BootMS <= 0 {
			t.Errorf("Got(running VM) = %+v; want agent and kernel version, domain uuid, boot time", vm)
		}
		if !phases[vmpool.PhaseBooting] {
			t.Errorf("Got(phases seen while booting) = %v; want booting among them", phases)
		}
		if evs := f.events(t, f.a.ID, audit.TypeVMCreated, vm.ID); len(evs) != 1 || evs[0].ActorKind != audit.ActorToken {
			t.Errorf("Got(vm.created of %s) = %+v; want one by the token", vm.ID, evs)
		}
		for _, g := range got {
			if _, err := os.Stat(f.scratchFile(g.ID)); err != nil {
				t.Errorf("Got(scratch disk of %s) = %v; want a file in the data dir", g.ID, err)
			}
		}
		vm1, vm4 = got[0].ID, got[1].ID
	})
	if vm1 == "" {
		t.Fatal("no VMs booted: the remaining checks need them")
	}

	t.Run("Stats", func(t *testing.T) {
		var got vmJSON
		deadline := time.Now().Add(10 * time.Second)
		for {
			if status, body := f.apiA.JSON(t, http.MethodGet, "/api/v1/vms/"+vm1, nil, &got); status != http.StatusOK {
				t.Fatalf("GET /api/v1/vms/%s = %d %s", vm1, status, body)
			}
			if got.CPUPercent != nil || time.Now().After(deadline) {
				break // the monitor has sampled it twice
			}
			time.Sleep(500 * time.Millisecond)
		}
		if got.State != "running" || got.AgentVersion == "" || !got.AgentConnected || got.VCPUs != 1 || got.MemoryMiB != 512 {
			t.Errorf("Got(GET vm) = %+v; want running, agent version, connected, 1 vCPU, 512 MiB", got)
		}
		if got.Progress.Phase != "running" || got.Progress.Step != got.Progress.Of {
			t.Errorf("Got(progress) = %+v; want running, all steps", got.Progress)
		}
		if got.CPUTimeMS <= 0 || got.CPUPercent == nil {
			t.Errorf("Got(cpu_time_ms, cpu_percent) = %d, %v; want libvirt's CPU time and a sampled percentage", got.CPUTimeMS, got.CPUPercent)
		}
		if got.Guest == nil || got.Guest.UptimeSeconds <= 0 || got.Guest.MemTotalBytes < 256<<20 || got.Guest.CPUs != 1 {
			t.Fatalf("Got(guest stats) = %+v; want the agent's uptime, memory and 1 CPU", got.Guest)
		}
		if got.UptimeSeconds != got.Guest.UptimeSeconds {
			t.Errorf("Got(uptime_seconds) = %v; want the guest's %v", got.UptimeSeconds, got.Guest.UptimeSeconds)
		}
		// The page shows it with its live state, and polls for updates.
		status, page := f.annA.GetPage(t, "/vms")
		if status != http.StatusOK || !strings.Contains(page, `data-vm="`+vm1+`" data-state="running"`) || !strings.Contains(page, got.AgentVersion) {
			t.Errorf("GET /vms = %d; want the running VM %s with agent %s in the table", status, vm1, got.AgentVersion)
		}
		status, frag := f.annA.GetPage(t, "/vms/table")
		if status != http.StatusOK || !strings.Contains(frag, `hx-get="/vms/table"`) || !strings.Contains(frag, `hx-trigger="every 2s"`) ||
			!strings.Contains(frag, vm1) || strings.Contains(frag, "<html") {
			t.Errorf("GET /vms/table = %d; want the polling table fragment with %s", status, vm1)
		}
	})

	t.Run("TenantIsolation", func(t *testing.T) { f.testIsolation(t, vm1) })

	t.Run("Destroy", func(t *testing.T) {
		if !domainExists(t, vm4) {
			t.Fatalf("domain of %s missing before destroy", vm4)
		}
		var got vmJSON
		status, body := f.apiA.JSON(t, http.MethodDelete, "/api/v1/vms/"+vm4, nil, &got)
		if status != http.StatusOK || got.State != "stopped" {
			t.Fatalf("DELETE /api/v1/vms/%s = %d %s; want 200 stopped", vm4, status, body)
		}
		if domainExists(t, vm4) {
			t.Errorf("domain of %s still exists after DELETE", vm4)
		}
		if _, err := os.Stat(f.scratchFile(vm4)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Got(scratch disk of %s after DELETE) = %v; want it removed", vm4, err)
		}
		if evs := f.events(t, f.a.ID, audit.TypeVMDestroyed, vm4); len(evs) != 1 {
			t.Errorf("Got(vm.destroyed of %s) = %d events; want 1", vm4, len(evs))
		}
		status, body = f.apiA.JSON(t, http.MethodDelete, "/api/v1/vms/"+vm4, nil, nil)
		if status != http.StatusConflict {
			t.Errorf("second DELETE = %d %s; want 409", status, body)
		}
	})

	// A scratch disk no active VM accounts for (a crash between its boot
	// and its end) is swept by the reconcile.
	t.Run("OrphanScratchDiskSwept", func(t *testing.T) {
		orphan := f.scratchFile("0b6c9e0e-0000-4000-8000-00000000dead")
		if err := os.WriteFile(orphan, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if _, err := os.Stat(orphan); errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				os.Remove(orphan)
				t.Fatalf("Got(orphan scratch disk after 2 min) = still there; want it swept")
			}
			time.Sleep(200 * time.Millisecond)
		}
		if _, err := os.Stat(f.scratchFile(vm1)); err != nil {
			t.Errorf("Got(scratch disk of running %s after the sweep) = %v; want it kept", vm1, err)
		}
	})

	t.Run("DestroyWhileBooting", func(t *testing.T) {
		var got vmJSON
		if status, body := f.apiA.JSON(t, http.MethodPost, "/api/v1/vms", nil, &got); status != http.StatusAccepted {
			t.Fatalf("POST /api/v1/vms = %d %s; want 202", status, body)
		}
		// Let it get as far as libvirt, then cancel the boot.
		deadline := time.Now().Add(30 * time.Second)
		for !domainExists(t, got.ID) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		var del vmJSON
		status, body := f.apiA.JSON(t, http.MethodDelete, "/api/v1/vms/"+got.ID, nil, &del)
		if status != http.StatusOK || del.State != "stopped" || del.AgentVersion != "" {
			t.Fatalf("DELETE of a booting VM = %d %s; want 200 stopped, never handshaken", status, body)
		}
		time.Sleep(time.Second) // the cancelled boot must not bring it back
		if domainExists(t, got.ID) {
			t.Errorf("domain of %s exists after destroying it mid-boot", got.ID)
		}
		if vm, _ := f.svc.Store().VM(ctx, f.a.ID, got.ID); vm.State != vmpool.StateStopped {
			t.Errorf("Got(state after destroy mid-boot) = %s (%s); want stopped", vm.State, vm.StateReason)
		}
	})

	t.Run("RestartAdoptsWithoutReboot", func(t *testing.T) { f.testRestart(t, vm1) })
	t.Run("RestartWithChannelHeldLeavesVM", func(t *testing.T) { f.testChannelBusy(t, vm1) })

	var vm2 string
	t.Run("KilledQEMUIsLostAndReplaced", func(t *testing.T) { vm2 = f.testKill(t, vm1) })

	var vm3 string
	t.Run("Recycle", func(t *testing.T) {
		if vm2 == "" {
			t.Fatal("no replacement VM: KilledQEMUIsLostAndReplaced failed")
		}
		var out struct {
			Recycled    vmJSON `json:"recycled"`
			Replacement vmJSON `json:"replacement"`
		}
		status, body := f.apiA.JSON(t, http.MethodPost, "/api/v1/vms/"+vm2+"/recycle", nil, &out)
		if status != http.StatusAccepted || out.Recycled.State != "stopped" || out.Replacement.State != "booting" {
			t.Fatalf("POST recycle = %d %s; want 202, old stopped, new booting", status, body)
		}
		if domainExists(t, vm2) {
			t.Errorf("domain of recycled %s still exists", vm2)
		}
		if _, err := os.Stat(f.scratchFile(vm2)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Got(scratch disk of recycled %s) = %v; want it removed", vm2, err)
		}
		if evs := f.events(t, f.a.ID, audit.TypeVMRecycled, vm2); len(evs) != 1 {
			t.Errorf("Got(vm.recycled of %s) = %d events; want 1", vm2, len(evs))
		}
		vm3 = out.Replacement.ID
		f.waitVM(t, f.a.ID, vm3, vmpool.StateRunning, 3*time.Minute)
		active, err := f.svc.Store().VMs(ctx, f.a.ID)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, vm := range active {
			if vm.State.Active() {
				n++
			}
		}
		if n != 1 {
			t.Errorf("Got(active VMs after recycle with warm=1) = %d; want 1 (the replacement counts as warm)", n)
		}
	})

	t.Run("GracefulStopThroughAgent", func(t *testing.T) {
		if vm3 == "" {
			t.Fatal("no recycled VM replacement: Recycle failed")
		}
		f.setPool(t, 1, 512, 3, 0) // no replacement after the stop
		var got vmJSON
		status, body := f.apiA.JSON(t, http.MethodPost, "/api/v1/vms/"+vm3+"/stop", nil, &got)
		if status != http.StatusAccepted || got.State != "stopping" {
			t.Fatalf("POST stop = %d %s; want 202 stopping", status, body)
		}
		start := time.Now()
		vm, _ := f.waitVM(t, f.a.ID, vm3, vmpool.StateStopped, 30*time.Second)
		t.Logf("MEASURED graceful stop through the agent: %v (%s)", time.Since(start).Round(time.Millisecond), vm.StateReason)
		if !strings.HasPrefix(vm.StateReason, "shut down") {
			t.Errorf("Got(reason) = %q; want the guest's shutdown", vm.StateReason)
		}
		if domainExists(t, vm3) {
			t.Errorf("domain of %s still exists after the guest powered off", vm3)
		}
		evs := f.events(t, f.a.ID, audit.TypeVMStopped, vm3)
		if len(evs) != 1 || evs[0].ActorKind != audit.ActorToken {
			t.Errorf("Got(vm.stopped of %s) = %+v; want one, by the token that asked", vm3, evs)
		}
	})

	t.Run("OperatorHosts", func(t *testing.T) {
		var out struct {
			Hosts []struct {
				URI    string `json:"uri"`
				Health string `json:"health"`
				CPUs   int    `json:"cpus"`
			} `json:"hosts"`
		}
		status, body := f.op.JSON(t, http.MethodGet, "/api/v1/hosts", nil, &out)
		if status != http.StatusOK || len(out.Hosts) != 1 || out.Hosts[0].URI != systemURI || out.Hosts[0].Health != "ok" || out.Hosts[0].CPUs < 1 {
			t.Errorf("GET /api/v1/hosts = %d %s; want %s healthy with its CPUs", status, body, systemURI)
		}
		status, page := f.op.GetPage(t, "/operator/hosts")
		if status != http.StatusOK || !strings.Contains(page, systemURI) || !strings.Contains(page, vm1) || !strings.Contains(page, "vm-a") {
			t.Errorf("GET /operator/hosts = %d; want the host and tenant vm-a's VMs", status)
		}
		if status, _ := f.apiA.JSON(t, http.MethodGet, "/api/v1/hosts", nil, nil); status != http.StatusForbidden {
			t.Errorf("GET /api/v1/hosts as a tenant admin = %d; want 403", status)
		}
	})
}

func (f *fixture) testBadInput(t *testing.T) {
	put := func(in any) (int, problem) {
		status, body := f.apiA.JSON(t, http.MethodPut, "/api/v1/vm-pool", in, nil)
		if status == http.StatusOK {
			return status, problem{}
		}
		return status, decodeProblem(t, body)
	}
	valid := map[string]any{"vcpus": 1, "memory_mib": 512, "max_vms": 2, "warm_vms": 0, "recycle_after_hours": 24}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for a, b := range valid {
			m[a] = b
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name   string
		in     any
		status int
		field  string
	}{
		{"vcpus zero", with("vcpus", 0), 422, "vcpus"},
		{"vcpus 17", with("vcpus", 17), 422, "vcpus"},
		{"memory too small", with("memory_mib", 100), 422, "memory_mib"},
		{"memory too large", with("memory_mib", 70000), 422, "memory_mib"},
		{"max vms 101", with("max_vms", 101), 422, "max_vms"},
		{"warm above max", with("warm_vms", 3), 422, "warm_vms"},
		{"recycle negative", with("recycle_after_hours", -1), 422, "recycle_after_hours"},
		{"missing field", with("max_vms", nil), 422, "max_vms"},
		{"wrong type", with("vcpus", "two"), 400, "vcpus"},
		{"unknown field", with("color", "red"), 400, "color"},
		{"over the quota's vms", with("max_vms", 5), 429, tenants.QuotaMaxVMs},
		{"over the quota's vcpus", map[string]any{"vcpus": 4, "memory_mib": 512, "max_vms": 3, "warm_vms": 0, "recycle_after_hours": 0}, 429, tenants.QuotaMaxVCPUs},
		{"over the quota's memory", map[string]any{"vcpus": 1, "memory_mib": 4096, "max_vms": 3, "warm_vms": 0, "recycle_after_hours": 0}, 429, tenants.QuotaMaxMemoryMiB},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := counts(t, f.db)
			status, p := put(tc.in)
			if status != tc.status || len(p.Errors) != 1 || p.Errors[0].Field != tc.field {
				t.Fatalf("PUT /api/v1/vm-pool %v = %d %+v; want %d naming %s", tc.in, status, p, tc.status, tc.field)
			}
			sameCounts(t, f.db, before, "rejected PUT")
		})
	}

	t.Run("create over quota", func(t *testing.T) {
		ts := tenants.NewStore(f.db, nil)
		if _, err := ts.SetQuota(ctx, operatorActor, f.a.ID, tenants.Quota{MaxVMs: 0, MaxVCPUs: 8, MaxMemoryMiB: 8192, MaxSandboxes: 4}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if _, err := ts.SetQuota(ctx, operatorActor, f.a.ID, tenants.DefaultQuota()); err != nil {
				t.Fatal(err)
			}
		}()
		before := counts(t, f.db)
		status, body := f.apiA.JSON(t, http.MethodPost, "/api/v1/vms", nil, nil)
		p := decodeProblem(t, body)
		if status != http.StatusTooManyRequests || len(p.Errors) != 1 || p.Errors[0].Field != tenants.QuotaMaxVMs {
			t.Fatalf("POST /api/v1/vms over quota = %d %s; want 429 naming %s", status, body, tenants.QuotaMaxVMs)
		}
		sameCounts(t, f.db, before, "over-quota POST")
	})

	t.Run("pages show errors in place", func(t *testing.T) {
		form := url.Values{"vcpus": {"two"}, "memory_mib": {"512"}, "max_vms": {"2"}, "warm_vms": {"0"}, "recycle_after_hours": {"24"}}
		before := counts(t, f.db)
		status, body, _ := f.annA.Post(t, "/vms/pool", form)
		if status != http.StatusUnprocessableEntity || !strings.Contains(body, `aria-invalid="true"`) || !strings.Contains(body, "must be a whole number") ||
			!strings.Contains(body, `value="two"`) {
			t.Errorf("POST /vms/pool vcpus=two = %d; want 422 with the error beside the field and the typed value kept", status)
		}
		form.Set("vcpus", "1")
		form.Set("warm_vms", "5")
		status, body, _ = f.annA.Post(t, "/vms/pool", form)
		if status != http.StatusUnprocessableEntity || !strings.Contains(body, "pool-warm-vms-error") {
			t.Errorf("POST /vms/pool warm_vms=5 = %d; want 422 with the warm_vms error in place", status)
		}
		form.Set("warm_vms", "0")
		form.Set("max_vms", "9")
		status, body, _ = f.annA.Post(t, "/vms/pool", form)
		if status != http.StatusTooManyRequests || !strings.Contains(body, "Over the tenant quota") || !strings.Contains(body, tenants.QuotaMaxVMs) {
			t.Errorf("POST /vms/pool max_vms=9 = %d; want 429 naming %s", status, tenants.QuotaMaxVMs)
		}
		sameCounts(t, f.db, before, "rejected pool forms")
	})
}

func (f *fixture) testPermissions(t *testing.T) {
	before := counts(t, f.db)
	cases := []struct {
		name   string
		client *webtest.Client
		method string
		path   string
		body   any
		want   int
	}{
		{"developer lists VMs", f.apiDev, http.MethodGet, "/api/v1/vms", nil, 200},
		{"developer reads the pool", f.apiDev, http.MethodGet, "/api/v1/vm-pool", nil, 200},
		{"developer cannot start a VM", f.apiDev, http.MethodPost, "/api/v1/vms", nil, 403},
		{"developer cannot change the pool", f.apiDev, http.MethodPut, "/api/v1/vm-pool", map[string]int{"vcpus": 1}, 403},
		{"auditor cannot list VMs", f.apiAud, http.MethodGet, "/api/v1/vms", nil, 403},
		{"tenant admin cannot list hosts", f.apiA, http.MethodGet, "/api/v1/hosts", nil, 403},
		{"operator lists hosts", f.op, http.MethodGet, "/api/v1/hosts", nil, 200},
		{"anonymous", f.web.Anonymous(), http.MethodGet, "/api/v1/vms", nil, 401},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if status, body := tc.client.JSON(t, tc.method, tc.path, tc.body, nil); status != tc.want {
				t.Errorf("%s %s = %d %s; want %d", tc.method, tc.path, status, body, tc.want)
			}
		})
	}
	// Failed attempts may be audited as denials, but nothing else is written.
	after := counts(t, f.db)
	if after["vms"] != before["vms"] || after["vm_pools"] != before["vm_pools"] {
		t.Errorf("denied calls wrote VMs or pools: %v -> %v", before, after)
	}
}

// testIsolation: tenant B, over the API (token and session) and the pages,
// never sees or acts on A's VM; A's own callers do see it.
func (f *fixture) testIsolation(t *testing.T, id string) {
	auditBefore := len(f.events(t, f.a.ID, "vm.", id))
	type call struct {
		method, path string
		page         bool
	}
	calls := []call{
		{http.MethodGet, "/api/v1/vms/" + id, false},
		{http.MethodDelete, "/api/v1/vms/" + id, false},
		{http.MethodPost, "/api/v1/vms/" + id + "/stop", false},
		{http.MethodPost, "/api/v1/vms/" + id + "/recycle", false},
		{http.MethodPost, "/vms/" + id + "/stop", true},
		{http.MethodPost, "/vms/" + id + "/destroy", true},
		{http.MethodPost, "/vms/" + id + "/recycle", true},
	}
	for _, who := range []struct {
		name   string
		client *webtest.Client
	}{{"B token", f.apiB}, {"B session", f.bobB}} {
		for _, c := range calls {
			if c.page && who.client.Bearer != "" {
				continue // pages are for browsers
			}
			t.Run(who.name+" "+c.method+" "+c.path, func(t *testing.T) {
				var status int
				var body string
				if c.page {
					status, body, _ = who.client.Post(t, c.path, nil)
				} else {
					status, body = who.client.JSON(t, c.method, c.path, nil, nil)
				}
				if status != http.StatusNotFound {
					t.Errorf("%s %s as %s = %d; want 404", c.method, c.path, who.name, status)
				}
				if strings.Contains(body, f.a.ID) || strings.Contains(body, "vm-a") {
					t.Errorf("%s %s as %s leaks tenant A: %s", c.method, c.path, who.name, body)
				}
			})
		}
	}
	lists := []struct {
		name   string
		client *webtest.Client
		path   string
		sees   bool
	}{
		{"A token lists it", f.apiA, "/api/v1/vms", true},
		{"A session lists it", f.annA, "/api/v1/vms", true},
		{"A page shows it", f.annA, "/vms", true},
		{"A fragment shows it", f.annA, "/vms/table", true},
		{"B token does not list it", f.apiB, "/api/v1/vms", false},
		{"B session does not list it", f.bobB, "/api/v1/vms", false},
		{"B page does not show it", f.bobB, "/vms", false},
		{"B fragment does not show it", f.bobB, "/vms/table", false},
	}
	for _, l := range lists {
		t.Run(l.name, func(t *testing.T) {
			status, body := l.client.GetPage(t, l.path)
			if status != http.StatusOK || strings.Contains(body, id) != l.sees {
				t.Errorf("GET %s = %d, contains %s = %v; want 200, %v", l.path, status, id, strings.Contains(body, id), l.sees)
			}
		})
	}
	vm, err := f.svc.Store().VM(ctx, f.a.ID, id)
	if err != nil || vm.State != vmpool.StateRunning || !domainExists(t, id) {
		t.Errorf("A's VM after B's attempts: %s, %v, domain %v; want running with its domain", vm.State, err, domainExists(t, id))
	}
	if n := len(f.events(t, f.a.ID, "vm.", id)); n != auditBefore {
		t.Errorf("B's attempts wrote %d audit events on A's VM; want none", n-auditBefore)
	}
}

// testRestart closes the service while vm runs, puts foreign domains and an
// orphan of our own installation on libvirt, and starts a new service on
// the same database.
func (f *fixture) testRestart(t *testing.T, id string) {
	before, err := f.svc.Get(ctx, f.a.ID, id)
	if err != nil || before.Guest == nil {
		t.Fatalf("Get before restart = %+v, %v; want guest stats", before, err)
	}
	beforeAt := time.Now()
	pid := qemuPID(t, id)

	// Domains the restart must leave alone, and one it must destroy.
	noMeta := hypervisortest.NewID("vmpool-nometa-")
	hypervisortest.DefineRaw(t, systemURI, fmt.Sprintf(
		`<domain type='qemu'><name>stockade-%s</name><memory unit='MiB'>64</memory><os><type arch='x86_64'>hvm</type></os></domain>`, noMeta))
	otherInstall := f.defineSpec(t, hypervisortest.NewID("vmpool-foreign-"), hypervisortest.NewID("other-install-"), true)
	orphan := f.defineSpec(t, hypervisortest.NewID("vmpool-orphan-"), f.svc.InstallationID(), false)

	f.svc.Close()
	if !domainExists(t, id) {
		t.Fatal("closing the service stopped the VM; want it left running")
	}
	f.svc = newService(f.top, f.db, f.dataDir)
	f.connectWeb()

	vm, err := f.svc.Store().VM(ctx, f.a.ID, id)
	if err != nil || vm.State != vmpool.StateRunning || vm.DomainUUID != before.DomainUUID {
		t.Fatalf("after restart: %+v, %v; want running with domain uuid %s", vm, err, before.DomainUUID)
	}
	if got := qemuPID(t, id); got != pid {
		t.Errorf("Got(QEMU pid after restart) = %d; want %d (the same process)", got, pid)
	}
	var after vmJSON
	if status, body := f.apiA.JSON(t, http.MethodGet, "/api/v1/vms/"+id, nil, &after); status != http.StatusOK || !after.AgentConnected || after.Guest == nil {
		t.Fatalf("GET after restart = %d %s; want the agent connected again", status, body)
	}
	elapsed := time.Since(beforeAt).Seconds()
	if after.Guest.UptimeSeconds < before.Guest.Uptime.Seconds()+elapsed*0.5 {
		t.Errorf("Got(guest uptime) = %.2fs after restart, %.2fs before, %.2fs apart; want it to keep growing (no reboot)",
			after.Guest.UptimeSeconds, before.Guest.Uptime.Seconds(), elapsed)
	}
	t.Logf("MEASURED adopted after restart: guest uptime %.2fs -> %.2fs", before.Guest.Uptime.Seconds(), after.Guest.UptimeSeconds)
	if evs := f.events(t, f.a.ID, audit.TypeVMLost, id); len(evs) != 0 {
		t.Errorf("Got(vm.lost of %s) = %d events after restart; want 0", id, len(evs))
	}

	if domainExists(t, orphan) {
		t.Errorf("orphan domain %s (our installation, no row) survived the restart", orphan)
	}
	if evs := f.events(t, f.a.ID, audit.TypeVMDestroyed, orphan); len(evs) != 1 || evs[0].ActorKind != audit.ActorSystem {
		t.Errorf("Got(vm.destroyed of the orphan) = %+v; want one by the system", evs)
	}
	for _, foreign := range []string{noMeta, otherInstall} {
		if st, ok := hypervisortest.RawInfo(t, systemURI, hypervisor.DomainName(foreign)); !ok || st != libvirt.DOMAIN_SHUTOFF {
			t.Errorf("foreign domain %s: exists %v, state %v; want left defined and shut off", foreign, ok, st)
		}
	}
}

// defineSpec defines (does not start) a domain carrying our metadata for
// installation. withCleanup undefines it at the end; without, the test
// expects reconcile to remove it and only undefines a survivor.
func (f *fixture) defineSpec(t *testing.T, id, installation string, withCleanup bool) string {
	t.Helper()
	_, guest := needVMs(t)
	def, err := hypervisor.BuildDomain(hypervisor.DomainSpec{ID: id, TenantID: f.a.ID, InstallationID: installation, VCPUs: 1, MemoryMiB: 64,
		Type: hypervisor.TypeQEMU, Kernel: guest.Kernel})
	if err != nil {
		t.Fatal(err)
	}
	xml, err := def.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if withCleanup {
		hypervisortest.DefineRaw(t, systemURI, xml)
		return id
	}
	conn, err := libvirt.NewConnect(systemURI)
	if err != nil {
		t.Fatal(err)
	}
	dom, err := conn.DomainDefineXML(xml)
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	dom.Free()
	t.Cleanup(func() {
		defer conn.Close()
		if d, err := conn.LookupDomainByName(hypervisor.DomainName(id)); err == nil {
			_ = d.Undefine()
			d.Free()
		}
	})
	return id
}

// testChannelBusy restarts the service while another client holds the VM's
// agent channel (as a second server of the installation would): the VM
// must not be destroyed or failed, and once the channel is free the new
// service opens its session.
func (f *fixture) testChannelBusy(t *testing.T, id string) {
	pid := qemuPID(t, id)
	f.svc.Close()
	hctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	other, err := hypervisor.Connect(hctx, hypervisor.Config{URI: systemURI, InstallationID: f.svc.InstallationID()})
	if err != nil {
		t.Fatalf("connect the other client: %v", err)
	}
	defer other.Close()
	held, err := other.OpenChannel(hctx, id, agentproto.ChannelName)
	if err != nil {
		t.Fatalf("hold the agent channel: %v", err)
	}
	defer held.Close()
	failedBefore := len(f.events(t, f.a.ID, audit.TypeVMFailed, id))

	f.svc = newService(f.top, f.db, f.dataDir) // Start returns once reconcile has tried to adopt it
	f.connectWeb()
	vm, err := f.svc.Store().VM(ctx, f.a.ID, id)
	if err != nil || vm.State != vmpool.StateRunning {
		t.Fatalf("Got(VM after a restart with its channel held) = %s (%s), %v; want running", vm.State, vm.StateReason, err)
	}
	if !domainExists(t, id) || qemuPID(t, id) != pid {
		t.Fatalf("the VM's domain was destroyed or restarted because its channel was busy")
	}
	if n := len(f.events(t, f.a.ID, audit.TypeVMFailed, id)); n != failedBefore {
		t.Errorf("Got(vm.failed events) = %d new; want none for a busy channel", n-failedBefore)
	}
	// libvirt answers: ready.
	var ready struct {
		Checks map[string]string `json:"checks"`
	}
	if status, body := f.apiA.JSON(t, http.MethodGet, "/readyz", nil, &ready); status != http.StatusOK || ready.Checks["libvirt"] != "ok" {
		t.Errorf("Got(GET /readyz with libvirt up) = %d %s; want 200, libvirt ok", status, body)
	}
	held.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var got vmJSON
		if status, body := f.apiA.JSON(t, http.MethodGet, "/api/v1/vms/"+id, nil, &got); status != http.StatusOK {
			t.Fatalf("GET /api/v1/vms/%s = %d %s", id, status, body)
		}
		if got.AgentConnected {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent session never re-opened once the channel was free: %+v", got)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if got := qemuPID(t, id); got != pid {
		t.Errorf("Got(QEMU pid) = %d; want %d (never rebooted)", got, pid)
	}
}

// testKill kills vm's QEMU and expects it lost within 5 s, audited, and
// replaced by a warm VM. It returns the replacement.
func (f *fixture) testKill(t *testing.T, id string) string {
	f.setPool(t, 1, 512, 3, 1) // the running VM is the one warm VM: nothing boots yet
	time.Sleep(500 * time.Millisecond)
	active, err := f.svc.Store().VMs(ctx, f.a.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range active {
		if vm.State.Active() && vm.ID != id {
			t.Fatalf("VM %s (%s) booted although the running one is warm", vm.ID, vm.State)
		}
	}
	pid := qemuPID(t, id)
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill QEMU %d: %v", pid, err)
	}
	var noticed time.Duration
	for {
		vm, err := f.svc.Store().VM(ctx, f.a.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		if vm.State == vmpool.StateLost {
			noticed = time.Since(killed)
			break
		}
		if time.Since(killed) > 15*time.Second {
			t.Fatalf("VM %s still %s 15 s after its QEMU was killed; want lost within 5 s", id, vm.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("MEASURED killed QEMU marked lost after %v", noticed.Round(time.Millisecond))
	if noticed > 5*time.Second {
		t.Errorf("Got(kill -> lost) = %v; want within 5 s", noticed)
	}
	evs := f.events(t, f.a.ID, audit.TypeVMLost, id)
	if len(evs) != 1 || evs[0].ActorKind != audit.ActorSystem || evs[0].Code != "SV7003W" {
		t.Errorf("Got(vm.lost of %s) = %+v; want one system event", id, evs)
	}
	// The pool replaces it: a new VM, booted by the pool itself.
	var repl string
	deadline := time.Now().Add(30 * time.Second)
	for repl == "" {
		vms, err := f.svc.Store().VMs(ctx, f.a.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, vm := range vms {
			if vm.State.Active() && vm.ID != id && vm.CreatedBy == vmpool.SystemActorID {
				repl = vm.ID
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no replacement VM within 30 s of the loss; want the warm pool to boot one")
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.waitVM(t, f.a.ID, repl, vmpool.StateRunning, 3*time.Minute)
	if domainExists(t, id) {
		t.Errorf("domain of the lost VM %s still exists", id)
	}
	return repl
}

// TestHypervisorUnavailable runs the service against a libvirt that cannot
// be reached (a socket that does not exist; the shared libvirtd is never
// stopped): the server works, VM pages say so, the API answers 503 with a
// problem document, and nothing is written.
func TestHypervisorUnavailable(t *testing.T) {
	db := freshDB(t)
	dataDir := t.TempDir() // no image either: availability is checked first
	bogus := "qemu+unix:///system?socket=" + t.TempDir() + "/no-libvirt-sock"
	svc := newService(t, db, dataDir, bogus)
	if err := svc.Available(); !errors.Is(err, vmpool.ErrUnavailable) {
		t.Fatalf("Got(Available) = %v; want ErrUnavailable", err)
	}
	env := newWeb(t, db, svc, "op@example.com")
	// Not ready while no libvirt host answers, and the answer says so.
	var ready struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	if status, body := env.Anonymous().JSON(t, http.MethodGet, "/readyz", nil, &ready); status != http.StatusServiceUnavailable ||
		ready.Status != "unavailable" || !strings.Contains(ready.Checks["libvirt"], bogus) || ready.Checks["server"] != "ok" {
		t.Errorf("Got(GET /readyz with libvirt down) = %d %s; want 503 naming libvirt at %s", status, body, bogus)
	}
	check := func(t *testing.T, env *webtest.Env, what string) {
		ts := tenants.NewStore(db, nil)
		tn, err := ts.CreateTenantWithAdmin(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, "down-"+what, "", "admin@"+what+".example")
		if err != nil {
			t.Fatal(err)
		}
		secret, _, err := ts.CreateToken(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, tn.ID, tenants.NewToken{Name: "t", Role: tenants.RoleAdmin})
		if err != nil {
			t.Fatal(err)
		}
		api := env.WithToken(secret)
		before := counts(t, db)
		status, body, hdr := api.Request(t, http.MethodPost, "/api/v1/vms", "", nil)
		p := decodeProblem(t, body)
		if status != http.StatusServiceUnavailable || hdr.Get("Content-Type") != "application/problem+json" ||
			!strings.HasSuffix(p.Type, "/hypervisor-unavailable") || p.Detail == "" {
			t.Errorf("POST /api/v1/vms with libvirt down = %d %s %s; want 503 problem+json hypervisor-unavailable", status, hdr.Get("Content-Type"), body)
		}
		sameCounts(t, db, before, "POST /api/v1/vms with libvirt down")

		var list struct {
			VMs        []vmJSON `json:"vms"`
			Hypervisor struct {
				Available bool `json:"available"`
			} `json:"hypervisor"`
		}
		status, body = api.JSON(t, http.MethodGet, "/api/v1/vms", nil, &list)
		// Pools that never started ("none": a server without libvirt) say
		// so like pools whose host is down: the records, and why not more.
		if status != http.StatusOK || list.Hypervisor.Available {
			t.Errorf("GET /api/v1/vms with libvirt down (%s) = %d %s; want 200 saying the hypervisor is unavailable", what, status, body)
		}

		browser := env.Login(t, "admin@"+what+".example")
		before = counts(t, db) // signing in is audited
		status, page := browser.GetPage(t, "/vms")
		if status != http.StatusOK || !strings.Contains(page, "Hypervisor unavailable") || !strings.Contains(page, `id="vm-unavailable"`) {
			t.Errorf("GET /vms with libvirt down = %d; want the page to say the hypervisor is unavailable", status)
		}
		status, _, hdr = browser.Post(t, "/vms", nil)
		if status != http.StatusSeeOther {
			t.Fatalf("POST /vms with libvirt down = %d; want 303 back to the page", status)
		}
		_, page = browser.GetPage(t, hdr.Get("Location"))
		if !strings.Contains(page, "Hypervisor unavailable: ") {
			t.Errorf("page after POST /vms with libvirt down does not say why it failed")
		}
		sameCounts(t, db, before, "POST /vms with libvirt down")
	}
	t.Run("service", func(t *testing.T) { check(t, env, "service") })
	t.Run("destroy keeps the row", func(t *testing.T) {
		// A VM recorded while libvirt was up, now unreachable.
		tn, err := tenants.NewStore(db, nil).CreateTenant(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, "down-destroy", "")
		if err != nil {
			t.Fatal(err)
		}
		vm, err := svc.Store().CreateVM(ctx, operatorActor, tn.ID, vmpool.NewVM{HostURI: bogus})
		if err != nil {
			t.Fatal(err)
		}
		before := counts(t, db)
		if _, err := svc.Destroy(ctx, operatorActor, tn.ID, vm.ID); !errors.Is(err, vmpool.ErrUnavailable) {
			t.Errorf("Got(Destroy with libvirt down) = %v; want ErrUnavailable", err)
		}
		sameCounts(t, db, before, "Destroy with libvirt down")
		if got, _ := svc.Store().VM(ctx, tn.ID, vm.ID); got.State != vmpool.StateBooting {
			t.Errorf("Got(state after a failed destroy) = %s; want booting, unchanged", got.State)
		}
	})
	t.Run("none", func(t *testing.T) { check(t, newWeb(t, db, nil), "none") })

	op := env.Login(t, "op@example.com")
	var hosts struct {
		Hosts []struct {
			URI    string `json:"uri"`
			Health string `json:"health"`
			Reason string `json:"reason"`
		} `json:"hosts"`
	}
	if status, body := op.JSON(t, http.MethodGet, "/api/v1/hosts", nil, &hosts); status != http.StatusOK || len(hosts.Hosts) != 1 ||
		hosts.Hosts[0].Health != "unavailable" || hosts.Hosts[0].Reason == "" {
		t.Errorf("GET /api/v1/hosts with libvirt down = %d %s; want one unavailable host with a reason", status, body)
	}
	rows, err := svc.Store().Hosts(ctx)
	if err != nil || len(rows) != 1 || rows[0].Health != vmpool.HealthUnavailable || rows[0].LastSeenAt != nil {
		t.Errorf("Got(hosts table) = %+v, %v; want one unavailable host never seen", rows, err)
	}
}

// scratchFile is where the service keeps the scratch disk of VM id.
func (f *fixture) scratchFile(id string) string {
	return filepath.Join(f.dataDir, "scratch", f.svc.InstallationID(), id+".img")
}
