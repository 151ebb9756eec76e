package sandbox_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// The kill test runs the control plane in a child process (this test
// binary again) and kills it with SIGKILL in the middle of a create: no
// deferred cleanup, no Close, exactly what a crash leaves.
const (
	childEnv       = "SANDBOX_TEST_CHILD"
	childDirEnv    = "SANDBOX_TEST_CHILD_DIR"
	childTenantEnv = "SANDBOX_TEST_CHILD_TENANT"
	childDataEnv   = "SANDBOX_TEST_CHILD_DATA"
	childTypeEnv   = "SANDBOX_TEST_CHILD_DOMAIN_TYPE"
	childKeyEnv    = "SANDBOX_TEST_CHILD_IDEMPOTENCY_KEY"
	childActorID   = "child-control-plane"
)

// runChild opens the shared database, starts the services (adopting the
// running VMs), says READY and creates one sandbox, then waits to be killed.
func runChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	db, err := tenants.Open(ctx, "", os.Getenv(childDirEnv))
	if err != nil {
		return fail(err)
	}
	log := testLogger()
	vms, err := vmpool.New(ctx, db, vmpool.Config{URIs: []string{systemURI}, DataDir: os.Getenv(childDataEnv), Logger: log,
		DomainType: os.Getenv(childTypeEnv)})
	if err != nil {
		return fail(err)
	}
	if err := vms.Start(ctx); err != nil {
		return fail(err)
	}
	svc := sandbox.New(db, vms, sandbox.Config{DataDir: os.Getenv(childDataEnv), Logger: log, DefaultTemplate: "busybox"})
	if err := svc.Start(ctx); err != nil {
		return fail(err)
	}
	fmt.Println("READY")
	if id := os.Getenv(childExecEnv); id != "" {
		return runExecChild(db, svc, id) // survive_vm_test.go
	}
	if id := os.Getenv(childProcEnv); id != "" {
		return runProcessChild(svc, id) // process_vm_test.go
	}
	sb, err := svc.Create(ctx, audit.Actor{Kind: audit.ActorUser, ID: childActorID, Name: "child@a.test"}, os.Getenv(childTenantEnv),
		sandbox.Spec{MemoryMiB: 64, IdempotencyKey: os.Getenv(childKeyEnv)})
	fmt.Println("CREATED", sb.ID, err)
	select {} // until killed
}

// killMidCreate stops the shared services, runs a child control plane that
// creates a sandbox, SIGKILLs it once the sandbox's record satisfies at,
// and starts the services again (which reconcile). It returns the sandbox.
func (e *testEnv) killMidCreate(t *testing.T, at func(sandbox.Sandbox) bool, key string) sandbox.Sandbox {
	t.Helper()
	e.stop()
	defer func() {
		if e.service() == nil {
			if err := e.start(); err != nil {
				t.Fatalf("restart the services: %v", err)
			}
		}
	}()
	var seen []string
	e.db.Model(&sandbox.Sandbox{}).Where("created_by = ?", childActorID).Pluck("id", &seen)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childDirEnv+"="+e.dbPath(), childTenantEnv+"="+e.a.ID, childDataEnv+"="+e.dataDir,
		childTypeEnv+"="+e.domainType, childKeyEnv+"="+key)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	ready := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ready <- sc.Text()
		}
		close(ready)
	}()
	select {
	case line := <-ready:
		if line != "READY" {
			t.Fatalf("child said %q; want READY", line)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the child control plane did not start within 2 min")
	}

	deadline := time.Now().Add(2 * time.Minute)
	for {
		var rows []sandbox.Sandbox
		q := e.db.Where("created_by = ?", childActorID)
		if len(seen) > 0 {
			q = q.Where("id NOT IN ?", seen)
		}
		if err := q.Find(&rows).Error; err != nil {
			t.Fatal(err)
		}
		if len(rows) == 1 && at(rows[0]) {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()
			killed = true
			t.Logf("killed the control plane with the sandbox %s, vm %q", rows[0].State, rows[0].VMID)
			if err := e.start(); err != nil {
				t.Fatalf("restart the services: %v", err)
			}
			return rows[0]
		}
		select {
		case line, ok := <-ready:
			if ok && strings.HasPrefix(line, "CREATED") {
				t.Fatalf("the child finished its create before the kill point: %s", line)
			}
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the child's sandbox never reached the kill point")
		}
		time.Sleep(time.Millisecond)
	}
}
