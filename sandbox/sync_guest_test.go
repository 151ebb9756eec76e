package sandbox_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// stopInGuest makes the guest report sb stopped by its idle timeout, with a
// final sample.
func stopInGuest(g *guest, sb sandbox.Sandbox) {
	g.set(func(g *guest) {
		a := g.sandboxes[sb.ID]
		a.State, a.Reason, a.Final = agentproto.SandboxStopped, "idle timeout", &agentproto.SandboxStats{ID: sb.ID}
		g.sandboxes[sb.ID] = a
	})
}

// waitEnded waits until the sandbox's record is no longer running, failing
// the test if fail fires first.
func (e *guestEnv) waitEnded(t *testing.T, tenantID, id string, fail <-chan agentproto.Op, why string) {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for e.state(t, tenantID, id) == sandbox.StateRunning {
		select {
		case op := <-fail:
			t.Fatalf("%s (the host gave up on %s first)", why, op)
		case <-deadline:
			t.Fatalf("sandbox %s is still running after 2 min", id)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestSyncHostileVMDoesNotStallOthers: a guest that never answers
// sandbox.list holds up its own VM only. The other tenant's VM is synced
// (its stopped sandbox recorded) while the hostile list is still open, and
// a later pass skips the VM whose sync is still running instead of asking
// it again. The old loop synced VMs one after another: the good VM waited
// for the host to give up on the hostile one.
func TestSyncHostileVMDoesNotStallOthers(t *testing.T) {
	e := sqliteGuestEnv(t, sandbox.Config{VMSyncTimeout: time.Hour})
	good, bad := e.tenant(t, "good"), e.tenant(t, "hostile")
	gvm, g := e.vm(t, good.ID)
	hvm, h := e.vm(t, bad.ID)
	// The pool lists newer VMs first: the hostile VM comes first in a pass.
	all, err := e.vms.ListAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].VM.ID != hvm.ID || all[1].VM.ID != gvm.ID {
		t.Fatalf("Got(ListAll order) = %v; want the hostile vm %s first", all, hvm.ID)
	}
	sb1, sb2 := e.sandbox(t, good.ID, gvm, g, 1), e.sandbox(t, good.ID, gvm, g, 1)
	e.sandbox(t, bad.ID, hvm, h, 1)
	release := make(chan struct{})
	held, abandoned := make(chan agentproto.Op, 16), make(chan agentproto.Op, 16)
	h.set(func(g *guest) {
		g.hold = map[agentproto.Op]chan struct{}{agentproto.OpSandboxList: release}
		g.held, g.abandoned = held, abandoned
	})
	stopInGuest(g, sb1)

	pass1 := make(chan error, 1)
	go func() { pass1 <- e.svc.SyncPass(ctx) }()
	if op := <-held; op != agentproto.OpSandboxList {
		t.Fatalf("Got(held op) = %s; want %s", op, agentproto.OpSandboxList)
	}
	e.waitEnded(t, good.ID, sb1.ID, abandoned, "the good vm was synced only after the hostile one")

	// The next pass: the hostile VM is still being synced, so it is not
	// asked again; the good one is, and the pass ends without waiting.
	// (The good VM's part of pass 1 may still be cleaning up: then that
	// pass skips it too, and the next one takes it.)
	stopInGuest(g, sb2)
	for pass := 0; e.state(t, good.ID, sb2.ID) == sandbox.StateRunning; pass++ {
		if pass == 100 {
			t.Fatalf("Got(state of the good vm's second stopped sandbox after %d passes) = running; want it ended", pass)
		}
		if err := e.svc.SyncPass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case op := <-held:
		t.Errorf("Got(a second %s to the hostile vm while its first was open); want the vm skipped", op)
	default:
	}
	select {
	case op := <-abandoned:
		t.Errorf("Got(host gave up on %s before its deadline); want it held", op)
	default:
	}
	close(release)
	if err := <-pass1; err != nil {
		t.Errorf("Got(SyncPass() #1) = %v; want nil", err)
	}
}

// TestSyncVMDeadline: a VM's sync ends at VMSyncTimeout; the host gives up
// the call the guest holds.
func TestSyncVMDeadline(t *testing.T) {
	e := sqliteGuestEnv(t, sandbox.Config{VMSyncTimeout: 50 * time.Millisecond})
	tn := e.tenant(t, "deadline")
	vm, g := e.vm(t, tn.ID)
	e.sandbox(t, tn.ID, vm, g, 1)
	release := make(chan struct{})
	defer close(release)
	abandoned := make(chan agentproto.Op, 4)
	g.set(func(g *guest) {
		g.hold = map[agentproto.Op]chan struct{}{agentproto.OpSandboxList: release}
		g.abandoned = abandoned
	})
	if err := e.svc.SyncPass(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case op := <-abandoned:
		if op != agentproto.OpSandboxList {
			t.Errorf("Got(abandoned op) = %s; want %s", op, agentproto.OpSandboxList)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the host never gave up the held sandbox.list")
	}
}

// TestSyncGuestListedIDs: what a guest lists is checked before the host
// acts on it. Ids that cannot be sandbox ids are never destroyed or
// audited; of the well-formed ones no record accounts for, a pass destroys
// and audits at most MaxOrphansPerPass per VM, and the audit rows they cause
// stay within GuestLogBurst however many passes run. The old loop called
// the guest and wrote an audit row for every id it listed, every pass.
func TestSyncGuestListedIDs(t *testing.T) {
	e := sqliteGuestEnv(t, sandbox.Config{})
	tn := e.tenant(t, "fakeids")
	vm, g := e.vm(t, tn.ID)
	real := e.sandbox(t, tn.ID, vm, g, 1)
	up := strings.ToUpper(uuid.NewString())
	invalid := []string{"", "../../etc/passwd", up, "{" + uuid.NewString() + "}", "urn:uuid:" + uuid.NewString(),
		uuid.NewString() + "x", strings.Repeat("a", 4096), "sandbox; rm -rf /", uuid.NewString()[:35]}
	var fakes []agentproto.SandboxInfo
	for _, id := range invalid {
		fakes = append(fakes, agentproto.SandboxInfo{ID: id, State: agentproto.SandboxRunning})
	}
	const wellFormed = 3*sandbox.GuestLogBurst + 7
	valid := map[string]bool{}
	for range wellFormed {
		id := uuid.NewString()
		valid[id] = true
		fakes = append(fakes, agentproto.SandboxInfo{ID: id, State: agentproto.SandboxRunning})
	}
	g.set(func(g *guest) { g.extra = fakes })

	audited := func() int64 {
		var n int64
		if err := e.db.Model(&audit.Event{}).Where("tenant_id = ? AND type = ?", tn.ID, audit.TypeSandboxDestroyed).Count(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	passes := wellFormed/sandbox.MaxOrphansPerPass + 1
	for pass := 1; pass <= passes; pass++ {
		if err := e.svc.SyncPass(ctx); err != nil {
			t.Fatal(err)
		}
		calls := g.destroyCalls()
		for _, id := range calls {
			if !valid[id] {
				t.Fatalf("Got(DestroySandbox(%.60q) after pass %d); want ids that are no sandbox ids never acted on", id, pass)
			}
		}
		if max := pass * sandbox.MaxOrphansPerPass; len(calls) > max {
			t.Fatalf("Got(%d DestroySandbox calls after %d passes); want at most %d per pass", len(calls), pass, sandbox.MaxOrphansPerPass)
		}
		if n, max := audited(), int64(min(pass*sandbox.MaxOrphansPerPass, sandbox.GuestLogBurst)); n > max {
			t.Fatalf("Got(%d sandbox.destroyed audit rows after %d passes); want at most %d", n, pass, max)
		}
	}
	// Every well-formed orphan was cleaned up in the end, each once.
	calls := g.destroyCalls()
	slices.Sort(calls)
	if distinct := slices.Compact(calls); len(distinct) != wellFormed || len(g.destroyCalls()) != wellFormed {
		t.Errorf("Got(%d calls for %d distinct orphans after %d passes); want each of the %d once", len(g.destroyCalls()), len(distinct), passes, wellFormed)
	}
	if got := e.state(t, tn.ID, real.ID); got != sandbox.StateRunning {
		t.Errorf("Got(state of the vm's real sandbox) = %s; want running", got)
	}

}
