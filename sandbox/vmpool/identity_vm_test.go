package vmpool_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/escapetest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
)

// restoredVM is a VM restored from a memory snapshot, with its agent
// session.
type restoredVM struct {
	id, uuid string
	agent    *agentproto.Client
}

// readIdentity is what a command in a sandbox reads of its VM's identity.
type readIdentity struct {
	random, bootID string
	clock          time.Time
	// before and after are the host's clock around the command.
	before, after time.Time
}

// identityInSandbox reads 64 bytes of /dev/urandom, the kernel's boot id
// and the clock inside a fresh sandbox of the VM.
func identityInSandbox(t *testing.T, vm restoredVM) readIdentity {
	t.Helper()
	ctx := context.Background()
	sb := "id-" + vm.id[len(vm.id)-8:]
	if _, err := vm.agent.CreateSandbox(ctx, agentproto.SandboxSpec{ID: sb, Template: "busybox"}); err != nil {
		t.Fatalf("CreateSandbox in %s = %v", vm.id, err)
	}
	defer vm.agent.DestroySandbox(ctx, sb)
	return identityIn(t, vm, sb)
}

// identityIn reads the identity in the running sandbox sb of the VM.
func identityIn(t *testing.T, vm restoredVM, sb string) readIdentity {
	t.Helper()
	ctx := context.Background()
	var out, errOut bytes.Buffer
	before := time.Now()
	st, err := vm.agent.Exec(ctx, agentproto.ExecRequest{Sandbox: sb, Argv: []string{"sh", "-c",
		"head -c 64 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; cat /proc/sys/kernel/random/boot_id; date +%s"}}, nil, &out, &errOut)
	after := time.Now()
	if err != nil || st.Code != 0 {
		t.Fatalf("Exec in %s = %+v, %v (stderr %q); want exit 0", vm.id, st, err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || len(lines[0]) != 128 {
		t.Fatalf("Got(identity read in %s) = %q; want 64 random bytes in hex, the boot id and the clock", vm.id, out.String())
	}
	sec, err := strconv.ParseInt(lines[2], 10, 64)
	if err != nil {
		t.Fatalf("Got(date +%%s in %s) = %q", vm.id, lines[2])
	}
	return readIdentity{random: lines[0], bootID: lines[1], clock: time.Unix(sec, 0), before: before, after: after}
}

// checkOwnIdentities: VMs restored from one snapshot each have their own
// VM id and libvirt UUID, the agent's generation is their VM id, and a
// sandbox in each reads other random bytes and another boot id than in any
// other, and a clock within seconds of the host's.
func checkOwnIdentities(t *testing.T, vms []restoredVM) {
	t.Helper()
	ctx := context.Background()
	seen := map[string]string{}
	unique := func(what, v, vmID string) {
		t.Helper()
		if other, dup := seen[what+" "+v]; dup {
			t.Errorf("Got(%s of %s) = %q; the same as %s's, want its own", what, vmID, v, other)
		}
		seen[what+" "+v] = vmID
	}
	for _, vm := range vms {
		unique("vm id", vm.id, vm.id)
		unique("libvirt uuid", vm.uuid, vm.id)
		if st, err := vm.agent.Stats(ctx); err != nil || st.Generation != vm.id {
			t.Errorf("Got(Stats().Generation of %s) = %q, %v; want its vm id", vm.id, st.Generation, err)
		}
		got := identityInSandbox(t, vm)
		unique("/dev/urandom", got.random, vm.id)
		unique("boot id", got.bootID, vm.id)
		// date +%s truncates; a second either side for the command's start.
		if got.clock.Before(got.before.Add(-2*time.Second)) || got.clock.After(got.after.Add(2*time.Second)) {
			t.Errorf("Got(clock in %s) = %v; want between %v and %v (the host's)", vm.id, got.clock, got.before, got.after)
		}
	}
}

// escapesIn runs the sandbox suite's escape checks in a VM (two sandboxes
// of it, side by side).
func escapesIn(t *testing.T, vm restoredVM) {
	t.Helper()
	ctx := context.Background()
	limits := agentproto.Limits{VCPUs: 1, MemoryMiB: 96, PidsMax: 64, DiskMiB: 32, WorkspaceMiB: 32}
	for _, sb := range []agentproto.SandboxSpec{
		{ID: "esc-a", Template: "busybox", Limits: limits, Hostname: "alpha"},
		{ID: "esc-b", Template: "busybox", Limits: limits},
	} {
		if _, err := vm.agent.CreateSandbox(ctx, sb); err != nil {
			t.Fatalf("CreateSandbox(%s) in %s = %v", sb.ID, vm.id, err)
		}
		defer vm.agent.DestroySandbox(ctx, sb.ID)
	}
	t.Run("escapes fail", func(t *testing.T) {
		escapetest.Run(ctx, t, vm.agent, escapetest.Pair{A: "esc-a", B: "esc-b", Hostname: "alpha", Limits: limits})
	})
	t.Run("quota project escape", func(t *testing.T) { escapetest.QuotaProjects(ctx, t, vm.agent, "esc-a") })
}

// checkRestored is the acceptance of VMs the pool restored from one memory
// snapshot (TestSnapshotBoot): each has its own VM id and libvirt UUID, and
// the identity the pool gave it after its handshake (its generation is its
// VM id; other random bytes and another boot id than any other's, its clock
// the host's); the sandbox suite's escape checks pass in one of them.
func (e *snapEnv) checkRestored(t *testing.T, vms []vmpool.VM) {
	t.Helper()
	var rvms []restoredVM
	for _, vm := range vms {
		if vm.BootKind != vmpool.BootRestored {
			t.Fatalf("Got(boot kind of %s) = %q; want %q", vm.ID, vm.BootKind, vmpool.BootRestored)
		}
		c, err := e.svc.Agent(ctx, e.tn.ID, vm.ID)
		if err != nil {
			t.Fatalf("Agent(%s) = %v", vm.ID, err)
		}
		rvms = append(rvms, restoredVM{id: vm.ID, uuid: vm.DomainUUID, agent: c})
	}
	checkClaimed(t, rvms)
	checkOwnIdentities(t, rvms)
	escapesIn(t, rvms[0])
}

// checkClaimed: the first sandbox of each VM restored from one snapshot
// claims the pre-started sandbox the snapshot holds (started before the
// save, in the snapshot VM); claimed in two VMs, they read other random
// bytes and boot ids and the host's clock (the VM's identity was applied
// before the claim), and the escape checks pass in one, beside a fresh
// sandbox.
func checkClaimed(t *testing.T, vms []restoredVM) {
	t.Helper()
	ctx := context.Background()
	limits := agentproto.Limits{VCPUs: 1, MemoryMiB: 96, PidsMax: 64, DiskMiB: 32, WorkspaceMiB: 32}
	seen := map[string]string{}
	for _, vm := range vms {
		info, err := vm.agent.CreateSandbox(ctx, agentproto.SandboxSpec{ID: "claimed", Template: "busybox", Limits: limits, Hostname: "alpha"})
		if err != nil {
			t.Fatalf("CreateSandbox(claimed) in %s = %v", vm.id, err)
		}
		defer vm.agent.DestroySandbox(ctx, "claimed")
		if !info.Prestarted {
			t.Fatalf("Got(first sandbox of restored vm %s prestarted) = false; want the snapshot's pre-started sandbox claimed", vm.id)
		}
		got := identityIn(t, vm, "claimed")
		for what, v := range map[string]string{"/dev/urandom": got.random, "boot id": got.bootID} {
			if other, dup := seen[what+" "+v]; dup {
				t.Errorf("Got(%s in the claimed sandbox of %s) = %q; the same as in %s's, want its own", what, vm.id, v, other)
			}
			seen[what+" "+v] = vm.id
		}
		if got.clock.Before(got.before.Add(-2*time.Second)) || got.clock.After(got.after.Add(2*time.Second)) {
			t.Errorf("Got(clock in the claimed sandbox of %s) = %v; want between %v and %v (the host's)", vm.id, got.clock, got.before, got.after)
		}
	}
	vm := vms[0]
	if _, err := vm.agent.CreateSandbox(ctx, agentproto.SandboxSpec{ID: "fresh", Template: "busybox", Limits: limits}); err != nil {
		t.Fatalf("CreateSandbox(fresh) in %s = %v", vm.id, err)
	}
	defer vm.agent.DestroySandbox(ctx, "fresh")
	t.Run("escapes fail in a claimed sandbox", func(t *testing.T) {
		escapetest.Run(ctx, t, vm.agent, escapetest.Pair{A: "claimed", B: "fresh", Hostname: "alpha", Limits: limits})
	})
	t.Run("quota project escape in a claimed sandbox", func(t *testing.T) { escapetest.QuotaProjects(ctx, t, vm.agent, "claimed") })
}
