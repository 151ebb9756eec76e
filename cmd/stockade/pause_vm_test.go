package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
)

// TestSandboxPauseCLI: `stockade sandbox pause` and `resume` against
// `stockade serve` on a real VM: show says paused_at while paused, exec
// then fails with the server's 409, a second pause fails, resume brings
// exec back.
func TestSandboxPauseCLI(t *testing.T) {
	shared := sandboxtest.NeedVMs(t)
	dir := leaseDataDir(t, shared)
	vars := map[string]string{"STOCKADE_DATA_DIR": dir, "STOCKADE_DOMAIN_TYPE": "qemu", "STOCKADE_PROBE_INTERVAL": "0", "STOCKADE_ADDR": freeAddr(t)}
	getenv := env(vars)
	if _, _, err := cli(t, getenv, "tenant", "create", "pause", "--admin", "ann@pause.test"); err != nil {
		t.Fatal(err)
	}
	out, _, err := cli(t, getenv, "token", "create", "--tenant", "pause", "--role", "admin")
	if err != nil {
		t.Fatal(err)
	}
	destroyLeftovers(t, "", dir)
	s := startServe(t, getenv)
	vars["STOCKADE_URL"], vars["STOCKADE_TOKEN"] = s.base, strings.TrimSpace(out)
	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := cli(t, getenv, append([]string{"sandbox"}, args...)...)
		if err != nil {
			t.Fatalf("Got(stockade sandbox %s) = %v %s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	id := strings.TrimSpace(run("create", "--template", "busybox", "--memory", "64", "--timeout", "10m"))
	var shown struct {
		VMID     string  `json:"vm_id"`
		PausedAt *string `json:"paused_at"`
	}
	show := func() {
		t.Helper()
		shown.PausedAt = nil
		if err := json.Unmarshal([]byte(run("show", id)), &shown); err != nil {
			t.Fatalf("Got(sandbox show) = %v", err)
		}
	}
	show()
	defer func() {
		run("rm", id)
		req, _ := http.NewRequest(http.MethodDelete, s.base+"/api/v1/vms/"+shown.VMID, nil)
		req.Header.Set("Authorization", "Bearer "+vars["STOCKADE_TOKEN"])
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	if got := strings.TrimSpace(run("pause", id)); got != id {
		t.Errorf("Got(sandbox pause) = %q; want %q", got, id)
	}
	if show(); shown.PausedAt == nil {
		t.Errorf("Got(paused_at after pause) = nil; want set")
	}
	if _, _, err := cli(t, getenv, "sandbox", "pause", id); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("Got(sandbox pause twice) = %v; want the server's 409", err)
	}
	if _, _, err := cli(t, getenv, "sandbox", "exec", id, "--", "true"); err == nil || !strings.Contains(err.Error(), "paused") {
		t.Errorf("Got(sandbox exec while paused) = %v; want an error saying it is paused", err)
	}
	if got := strings.TrimSpace(run("resume", id)); got != id {
		t.Errorf("Got(sandbox resume) = %q; want %q", got, id)
	}
	if show(); shown.PausedAt != nil {
		t.Errorf("Got(paused_at after resume) = %v; want none", *shown.PausedAt)
	}
	if got := run("exec", id, "--", "echo", "back"); got != "back\n" {
		t.Errorf("Got(exec after resume) = %q; want %q", got, "back\n")
	}
	if _, _, err := cli(t, getenv, "sandbox", "resume"); err == nil {
		t.Errorf("Got(sandbox resume without an id) = nil; want a usage error")
	}
}
