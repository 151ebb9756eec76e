package web_test

import (
	"context"
	"html"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/views"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestOperatorDestroyStuckVM boots a real VM of a tenant and, while it is
// still booting (stuck, as far as its tenant can tell), a platform
// operator destroys it from /operator/hosts: the page offers Destroy with
// a confirmation naming the VM and its tenant, the VM ends (its domain
// gone, state stopped, reason destroyed) and the tenant's audit log
// records vm.destroyed by the operator. The tenant's own admin cannot use
// the operators' route, a VM that does not exist is not found, and an
// ended VM is refused without a change.
func TestOperatorDestroyStuckVM(t *testing.T) {
	dataDir := sandboxtest.NeedVMs(t)
	ctx := context.Background()
	db := dbtest.SQLite(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	vms, sbx := sandboxtest.Start(t, db, vmpool.Config{DataDir: dataDir, Logger: log},
		sandbox.Config{SyncInterval: 500 * time.Millisecond, SampleInterval: time.Second, DefaultTemplate: "busybox"})
	env := webtest.New(t, webtest.Options{DB: db, VMs: vms, Sandboxes: sbx, Operators: []string{"olga@example.com"}})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "ada@example.com", tenants.RoleAdmin)
	vm, err := vms.Create(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, acme.ID)
	if err != nil {
		t.Fatalf("start a VM: %v", err)
	}

	olga := env.Login(t, "olga@example.com")
	_, page := olga.GetPage(t, "/operator/hosts")
	page = html.UnescapeString(page)
	action := `action="/operator/vms/` + vm.ID + `/destroy"`
	if !strings.Contains(page, action) {
		t.Fatalf("Got(/operator/hosts) without a Destroy form for VM %s; want one", vm.ID)
	}
	if want := "Destroy VM " + views.ShortID(vm.ID) + " of tenant acme-corp now"; !strings.Contains(page, want) {
		t.Errorf("Got(/operator/hosts) without the confirmation %q; want it", want)
	}

	// The tenant's admin may not use the operators' route.
	if st, _, _ := env.Login(t, "ada@example.com").Post(t, "/operator/vms/"+vm.ID+"/destroy", nil); st != http.StatusForbidden {
		t.Errorf("Got(POST /operator/vms/%s/destroy as the tenant's admin) = %d; want 403", vm.ID, st)
	}
	if st, _, _ := olga.Post(t, "/operator/vms/01a23304-0000-7000-8000-000000000000/destroy", nil); st != http.StatusNotFound {
		t.Errorf("Got(POST /operator/vms/<no such VM>/destroy) = %d; want 404", st)
	}

	st, _, hdr := olga.Post(t, "/operator/vms/"+vm.ID+"/destroy", nil)
	if st != http.StatusSeeOther || hdr.Get("Location") != "/operator/hosts" {
		t.Fatalf("Got(POST /operator/vms/%s/destroy) = %d to %q; want 303 to /operator/hosts", vm.ID, st, hdr.Get("Location"))
	}
	got, err := vms.Get(ctx, acme.ID, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != vmpool.StateStopped || got.StateReason != "destroyed" {
		t.Errorf("Got(VM after the operator's destroy) = %s (%s); want stopped (destroyed)", got.State, got.StateReason)
	}
	_, page = olga.GetPage(t, "/operator/hosts")
	if !strings.Contains(page, "VM "+views.ShortID(vm.ID)+" destroyed.") {
		t.Errorf("Got(/operator/hosts after destroy) without the success message; want it")
	}
	evs, err := env.Audit.List(ctx, acme.ID, audit.Filter{Type: audit.TypeVMDestroyed})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("vm.destroyed: %+v", evs)
	if len(evs) != 1 || evs[0].TargetID != vm.ID || evs[0].ActorName != "olga@example.com" {
		t.Errorf("Got(vm.destroyed events of the tenant) = %+v; want one for %s by the operator", evs, vm.ID)
	}

	// Ended: refused, nothing changes.
	st, _, _ = olga.Post(t, "/operator/vms/"+vm.ID+"/destroy", nil)
	_, page = olga.GetPage(t, "/operator/hosts")
	if st != http.StatusSeeOther || !strings.Contains(page, "Not done") {
		t.Errorf("Got(destroy of an ended VM) = %d, page without \"Not done\"; want the refusal shown", st)
	}
}
