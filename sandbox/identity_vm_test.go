package sandbox_test

import (
	"bytes"
	"crypto/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// clockSlack bounds how far a guest's clock may sit from what the host set
// it to, by the time a command in a sandbox reads it: the commands and
// calls in between (seconds under TCG on a loaded host), not a speed target.
const clockSlack = 60 * time.Second

// sandboxOutput runs sh -c script in the sandbox and returns its stdout.
func sandboxOutput(t *testing.T, svc *sandbox.Service, tenantID, id, script string) string {
	t.Helper()
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test", Name: "identity test"}
	var out, errOut bytes.Buffer
	r, err := svc.Exec(ctx, sys, tenantID, id, sandbox.ExecRequest{Cmd: []string{"sh", "-c", script}}, &out, &errOut)
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("Got(%s) = %+v, %v (stderr %q); want exit 0", script, r, err, errOut.String())
	}
	return out.String()
}

// guestClock reads the guest's CLOCK_REALTIME from inside a sandbox.
func guestClock(t *testing.T, svc *sandbox.Service, tenantID, id string) time.Time {
	t.Helper()
	out := strings.TrimSpace(sandboxOutput(t, svc, tenantID, id, "date +%s"))
	sec, err := strconv.ParseInt(out, 10, 64)
	if err != nil {
		t.Fatalf("Got(date +%%s) = %q; want seconds", out)
	}
	return time.Unix(sec, 0)
}

func near(got, want time.Time, slack time.Duration) bool {
	d := got.Sub(want)
	return d > -slack && d < slack
}

// TestVMIdentity (real VM): the pool gave the warm VM its identity at boot
// (the agent's generation is its VM id); later identities reseed again and
// step the clock, which commands in a sandbox see, and so does the identity
// a restarted control plane gives the VM it adopts; the kernel's boot id
// stays the one it made (sandboxes read the same).
func TestVMIdentity(t *testing.T) {
	e := need(t)
	svc := e.service()
	c := e.agent(t)
	if st, err := c.Stats(ctx); err != nil || st.Generation != e.warmVM {
		t.Fatalf("Got(Stats().Generation) = %q, %v; want the vm id %s (set at boot)", st.Generation, err, e.warmVM)
	}
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test", Name: "identity test"}
	sb, err := svc.Create(ctx, sys, e.a.ID, sandbox.Spec{MemoryMiB: 64})
	if err != nil {
		t.Fatalf("Create() = %v", err)
	}
	defer func() { e.service().Destroy(ctx, sys, e.a.ID, sb.ID) }()
	bootIDBefore := strings.TrimSpace(sandboxOutput(t, svc, e.a.ID, sb.ID, "cat /proc/sys/kernel/random/boot_id"))

	identity := func(now time.Time) agentproto.IdentityResult {
		t.Helper()
		seed := make([]byte, 48)
		rand.Read(seed)
		res, err := c.SetIdentity(ctx, agentproto.IdentityRequest{Seed: seed, Now: now, Generation: e.warmVM})
		if err != nil {
			t.Fatalf("SetIdentity(now %v) = %v", now, err)
		}
		if !res.Reseeded {
			t.Errorf("Got(Reseeded) = false; want true")
		}
		return res
	}
	// Whatever happens below, the guest's clock ends where the host's is.
	defer func() {
		seed := make([]byte, 48)
		rand.Read(seed)
		if _, err := e.agent(t).SetIdentity(ctx, agentproto.IdentityRequest{Seed: seed, Now: time.Now(), Generation: e.warmVM}); err != nil {
			t.Errorf("set the guest clock back: %v", err)
		}
	}()

	const offset = 10 * time.Minute
	ahead := identity(time.Now().Add(offset))
	if ahead.ClockStepped < offset-clockSlack || ahead.ClockStepped > offset+clockSlack {
		t.Errorf("Got(ClockStepped forward) = %v; want about %v", ahead.ClockStepped, offset)
	}
	if got, want := guestClock(t, svc, e.a.ID, sb.ID), time.Now().Add(offset); !near(got, want, clockSlack) {
		t.Errorf("Got(guest clock after +%v) = %v; want about %v", offset, got, want)
	}
	back := identity(time.Now())
	if back.ClockStepped > -offset+clockSlack || back.ClockStepped < -offset-clockSlack {
		t.Errorf("Got(ClockStepped back) = %v; want about %v", back.ClockStepped, -offset)
	}
	if got := guestClock(t, svc, e.a.ID, sb.ID); !near(got, time.Now(), clockSlack) {
		t.Errorf("Got(guest clock after setting it back) = %v; want about %v", got, time.Now())
	}

	// A restarted control plane adopts the running VM and gives it its
	// identity again: the clock is the host's once more.
	identity(time.Now().Add(offset))
	e.stop()
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	svc = e.service()
	if got := guestClock(t, svc, e.a.ID, sb.ID); !near(got, time.Now(), clockSlack) {
		t.Errorf("Got(guest clock after the adoption) = %v; want about %v (set by the adopting host)", got, time.Now())
	}
	if st, err := e.agent(t).Stats(ctx); err != nil || st.Generation != e.warmVM {
		t.Errorf("Got(Stats().Generation after the adoption) = %q, %v; want %s", st.Generation, err, e.warmVM)
	}

	bootIDAfter := strings.TrimSpace(sandboxOutput(t, svc, e.a.ID, sb.ID, "cat /proc/sys/kernel/random/boot_id"))
	if ahead.BootID == "" || ahead.BootID != back.BootID || bootIDBefore != ahead.BootID || bootIDAfter != ahead.BootID {
		t.Errorf("Got(boot ids) = sandbox %q, identity %q, identity %q, sandbox %q; want one and the same",
			bootIDBefore, ahead.BootID, back.BootID, bootIDAfter)
	}
}
