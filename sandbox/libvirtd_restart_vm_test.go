package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// privateLibvirtd starts a libvirtd of the test's own (scripts/
// libvirtd-private.sh: its own socket, state and domains), so that
// restarting it never touches the shared one. It returns its URI and a
// func that restarts it.
func privateLibvirtd(t *testing.T) (uri string, restart func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		hypervisortest.Unavailable(t, "a private libvirtd needs root")
	}
	for _, tool := range []string{"unshare", "nsenter", "tini", "/usr/sbin/libvirtd"} {
		if _, err := exec.LookPath(tool); err != nil {
			hypervisortest.Unavailable(t, fmt.Sprintf("a private libvirtd needs %s: %v", tool, err))
		}
	}
	if out, err := exec.Command("unshare", "-m", "true").CombinedOutput(); err != nil {
		hypervisortest.Unavailable(t, fmt.Sprintf("a private libvirtd needs mount namespaces: unshare -m: %v: %s", err, out))
	}
	// A short path: the socket's must fit sun_path.
	dir, err := os.MkdirTemp("", "lvd-")
	if err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("../scripts/libvirtd-private.sh")
	if err != nil {
		t.Fatal(err)
	}
	run := func(cmd string) string {
		t.Helper()
		out, err := exec.Command(script, cmd, dir).CombinedOutput()
		if err != nil {
			t.Fatalf("libvirtd-private.sh %s: %v: %s", cmd, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	uri = run("start")
	t.Cleanup(func() {
		if out, err := exec.Command(script, "stop", dir).CombinedOutput(); err != nil {
			t.Errorf("libvirtd-private.sh stop: %v: %s", err, out)
		}
		os.RemoveAll(dir)
	})
	return uri, func() { run("restart") }
}

// TestLibvirtdRestartKeepsCommands (real VMs, on a libvirtd of its own):
// libvirtd restarts while a command streams in a sandbox. The host side
// must ride it out: the VM is neither lost nor failed, its agent session
// comes back on the new connection, the sandbox stays running and takes new
// commands. And the command itself must complete, whole, with exit 0: the
// agent channel runs over the libvirt connection and dies with it, so this
// part needs the agent to keep the process across the session loss and the
// host to re-attach to it.
func TestLibvirtdRestartKeepsCommands(t *testing.T) {
	uri, restart := privateLibvirtd(t)
	dataDir := sandboxtest.NeedVMs(t)
	db, err := tenants.Open(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := tenants.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test", Name: "libvirtd restart test"}
	tn, err := tenants.NewStore(db, nil).CreateTenantWithAdmin(ctx, sys, "lvd-a", "Libvirtd Restart", "ann@lvd.test")
	if err != nil {
		t.Fatal(err)
	}
	log := testLogger()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	pools, svc, err := sandboxtest.StartServices(sctx, db, vmpool.Config{URIs: []string{uri}, DataDir: dataDir, Logger: log,
		ConnectTimeout: 60 * time.Second, DomainType: "qemu"}, sandbox.Config{SyncInterval: 500 * time.Millisecond, DefaultTemplate: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	defer pools.Close()
	defer svc.Close()
	if _, err := pools.SetPool(ctx, sys, tn.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, WarmVMs: 1, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	vmID := waitAgent(t, pools, tn.ID, "", 5*time.Minute)
	sb, err := svc.Create(ctx, sys, tn.ID, sandbox.Spec{MemoryMiB: 64})
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	defer svc.Destroy(ctx, sys, tn.ID, sb.ID)

	var out streamBuffer
	end := make(chan error, 1)
	var res sandbox.ExecResult
	go func() {
		r, err := svc.Exec(ctx, sys, tn.ID, sb.ID, sandbox.ExecRequest{
			Cmd: []string{"sh", "-c", "for i in $(seq 1 40); do echo $i; sleep 0.5; done"}}, &out, io.Discard)
		res = r
		end <- err
	}()
	waitOutput(t, &out, "3\n", 2*time.Minute)
	restart()
	t.Logf("libvirtd restarted while the command had printed %q", strings.Fields(out.String()))

	// The host side: the VM survives, its agent comes back, the sandbox
	// takes new commands.
	if got := waitAgent(t, pools, tn.ID, vmID, 2*time.Minute); got != vmID {
		t.Fatalf("Got(running vm after the restart) = %s; want %s, the same VM", got, vmID)
	}
	var xerr error
	select {
	case xerr = <-end:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the command did not end within 3 min of the restart; output %q", out.String())
	}
	if got, err := svc.Get(ctx, tn.ID, sb.ID); err != nil || got.State != sandbox.StateRunning {
		t.Errorf("Got(sandbox after the restart) = %s (%s), %v; want running", got.State, got.StateReason, err)
	}
	if r, err := svc.Exec(ctx, sys, tn.ID, sb.ID, sandbox.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard); err != nil || r.ExitCode != 0 {
		t.Errorf("Got(a new command after the restart) = %+v, %v; want exit 0", r, err)
	}

	// The command itself. The agent channel runs over the libvirt
	// connection and dies with it, so this needs the agent to keep the
	// process across the session loss and the host to re-attach to it (the
	// agent side of the Resilience issue, not the host connection's).
	t.Run("CommandSurvivesSessionLoss", func(t *testing.T) {
		var want strings.Builder
		for i := 1; i <= 40; i++ {
			fmt.Fprintf(&want, "%d\n", i)
		}
		if xerr != nil || res.ExitCode != 0 || out.String() != want.String() {
			t.Errorf("Got(command across a libvirtd restart) = %+v, %v, output %q; want exit 0 and 1..40 unbroken "+
				"(needs the agent to keep the process across session loss and the host to re-attach)",
				res, xerr, out.String())
		}
	})
}

// waitAgent waits for a running VM of the tenant with its agent connected
// (vmID, when set) and returns its id. A lost or failed vmID fails at once.
func waitAgent(t *testing.T, pools *vmpool.Service, tenantID, vmID string, timeout time.Duration) string {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	id, err := sandboxtest.WaitVM(wctx, pools, tenantID, vmID)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
