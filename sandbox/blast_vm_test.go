package sandbox_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// streamBuffer collects a stream's output while a test reads it.
type streamBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *streamBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *streamBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitOutput waits until buf holds want, or fails after timeout (a
// correctness bound, never a speed target).
func waitOutput(t *testing.T, buf *streamBuffer, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(buf.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("Got(output) = %q after %v; want it to contain %q", buf.String(), timeout, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// qemuPIDOf reads the pid libvirt recorded for the VM's QEMU.
func qemuPIDOf(t testing.TB, vmID string) int {
	t.Helper()
	b, err := os.ReadFile("/run/libvirt/qemu/" + hypervisor.DomainName(vmID) + ".pid")
	if err != nil {
		t.Fatalf("QEMU pid of %s: %v", vmID, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("QEMU pid of %s: %v", vmID, err)
	}
	return pid
}

// TestOneVMDeathSparesOtherTenants (real VMs): tenant B's VM is killed
// (QEMU SIGKILL) on the host where tenant A's VM streams a command and
// holds a terminal. Only B's VM is touched: it is lost and B's command
// ends; A's command streams to its end and exits 0, A's terminal still
// answers, A's VM keeps the very same agent session, and the host never
// reads as disconnected.
func TestOneVMDeathSparesOtherTenants(t *testing.T) {
	e := need(t)
	pools, svc := e.pools(), e.service()
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test", Name: "blast radius test"}

	// Tenant B's VM on the same host (one warm, then none so that nothing
	// replaces it after the kill).
	if _, err := pools.SetPool(ctx, sys, e.b.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, WarmVMs: 1, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := pools.SetPool(ctx, sys, e.b.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, WarmVMs: 0, RecycleAfterHours: 24}); err != nil {
			t.Errorf("reset tenant B's pool: %v", err)
		}
	}()
	var vmB string
	deadline := time.Now().Add(5 * time.Minute)
	for vmB == "" {
		sts, err := pools.List(ctx, e.b.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range sts {
			if st.VM.State == vmpool.StateRunning && st.AgentConnected {
				vmB = st.VM.ID
			}
			if st.VM.State == vmpool.StateFailed {
				t.Fatalf("tenant B's vm failed to boot: %s", st.VM.StateReason)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("tenant B's vm did not boot within 5 min")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := pools.SetPool(ctx, sys, e.b.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, WarmVMs: 0, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := pools.Destroy(ctx, sys, e.b.ID, vmB); err != nil {
			t.Logf("destroy tenant B's vm: %v", err)
		}
	}()
	if vm, err := pools.VM(ctx, e.a.ID, e.warmVM); err != nil || vm.HostURI != systemURI {
		t.Fatalf("Got(tenant A's vm) = %+v, %v; want it on %s", vm, err, systemURI)
	}

	sbA, err := svc.Create(ctx, sys, e.a.ID, sandbox.Spec{MemoryMiB: 64})
	if err != nil {
		t.Fatalf("Create(A) = %v", err)
	}
	defer svc.Destroy(ctx, sys, e.a.ID, sbA.ID)
	sbB, err := svc.Create(ctx, sys, e.b.ID, sandbox.Spec{MemoryMiB: 64})
	if err != nil {
		t.Fatalf("Create(B) = %v", err)
	}
	if sbB.VMID != vmB || sbA.VMID != e.warmVM {
		t.Fatalf("Got(placement) = A on %s, B on %s; want A on %s, B on %s", sbA.VMID, sbB.VMID, e.warmVM, vmB)
	}
	sessionA := e.agent(t)

	// A: a streaming command and a terminal. B: a command that would
	// outlive the test.
	type execEnd struct {
		res sandbox.ExecResult
		err error
	}
	var outA streamBuffer
	endA := make(chan execEnd, 1)
	go func() {
		r, err := svc.Exec(ctx, sys, e.a.ID, sbA.ID, sandbox.ExecRequest{
			Cmd: []string{"sh", "-c", "for i in $(seq 1 60); do echo $i; sleep 0.5; done"}}, &outA, io.Discard)
		endA <- execEnd{r, err}
	}()
	var term streamBuffer
	tty, err := svc.StartTerminal(ctx, e.a.ID, sbA.ID, []string{"sh"}, nil, agentproto.Winsize{Rows: 24, Cols: 80}, &term)
	if err != nil {
		t.Fatalf("StartTerminal(A) = %v", err)
	}
	defer tty.Close()
	say := func(marker string) {
		t.Helper()
		// The shell echoes the line; its output, computed, proves it ran.
		if _, err := fmt.Fprintf(tty, "echo %s-$((6*7))\n", marker); err != nil {
			t.Fatalf("write to A's terminal: %v", err)
		}
		waitOutput(t, &term, marker+"-42", 60*time.Second)
	}
	say("before")
	endB := make(chan execEnd, 1)
	var outB streamBuffer
	go func() {
		r, err := svc.Exec(ctx, sys, e.b.ID, sbB.ID, sandbox.ExecRequest{
			Cmd: []string{"sh", "-c", "echo started; sleep 600"}}, &outB, io.Discard)
		endB <- execEnd{r, err}
	}()
	waitOutput(t, &outB, "started", 60*time.Second)
	waitOutput(t, &outA, "3\n", 60*time.Second)

	pid := qemuPIDOf(t, vmB)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill tenant B's QEMU %d: %v", pid, err)
	}
	t.Logf("killed tenant B's QEMU (pid %d) while A's command had printed %q", pid, strings.Fields(outA.String()))

	select {
	case r := <-endB:
		if r.err == nil {
			t.Errorf("Got(B's command after its VM died) = %+v, nil; want an error", r.res)
		}
	case <-time.After(2 * time.Minute):
		t.Errorf("B's command still running 2 min after its VM died")
	}
	deadline = time.Now().Add(time.Minute)
	for {
		vm, err := pools.VM(ctx, e.b.ID, vmB)
		if err != nil {
			t.Fatal(err)
		}
		if vm.State == vmpool.StateLost {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Got(B's vm) = %s 1 min after its QEMU died; want lost", vm.State)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A is untouched.
	say("after")
	select {
	case r := <-endA:
		if r.err != nil || r.res.ExitCode != 0 {
			t.Errorf("Got(A's command) = %+v, %v; want exit 0", r.res, r.err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("A's command did not finish within 3 min; output %q", outA.String())
	}
	var want strings.Builder
	for i := 1; i <= 60; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if got := outA.String(); got != want.String() {
		t.Errorf("Got(A's output) = %q; want 1..60 unbroken", got)
	}
	say("end")
	select {
	case <-tty.Done():
		t.Errorf("A's terminal ended")
	default:
	}
	if got := e.agent(t); got != sessionA {
		t.Errorf("Got(A's agent session) = a new one; want the session from before the kill kept")
	}
	hs, err := pools.Hosts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.URI == systemURI && !h.Connected {
			t.Errorf("Got(host %s) = disconnected (%s); want connected", h.URI, h.Reason)
		}
	}
	if got, err := svc.Get(ctx, e.a.ID, sbA.ID); err != nil || got.State != sandbox.StateRunning {
		t.Errorf("Got(A's sandbox) = %s, %v; want running", got.State, err)
	}
}
