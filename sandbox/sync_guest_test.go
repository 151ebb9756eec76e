package sandbox_test

import (
	"testing"

	"github.com/stockade-dev/stockade/sandbox"
)

func TestGuestEnvSmoke(t *testing.T) {
	e := sqliteGuestEnv(t, sandbox.Config{})
	tn := e.tenant(t, "smoke")
	vm, g := e.vm(t, tn.ID)
	sb := e.sandbox(t, tn.ID, vm, g, 1)
	if err := e.svc.SyncPass(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.state(t, tn.ID, sb.ID); got != sandbox.StateRunning {
		t.Errorf("Got(state) = %s; want running", got)
	}
}
