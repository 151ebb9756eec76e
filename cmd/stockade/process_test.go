package main

import (
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestProcessCLI: `stockade sandbox ps|logs|kill|timeout` against a server
// with a recorded, ended process (no VM: sandbox tests run them on real
// VMs): ps lists it, logs prints its status, kill of an ended process and
// of an unknown pid fail with the server's problem, bad arguments are
// usage errors, and another tenant's sandbox is not found.
func TestProcessCLI(t *testing.T) {
	db := dbtest.SQLite(t)
	e := webtest.New(t, webtest.Options{DB: db})
	acme := e.TenantNamed(t, "acme", "Acme")
	other := e.TenantNamed(t, "other", "Other")
	secret, _ := e.NewToken(t, acme, "cli", tenants.RoleDeveloper)
	sb := sandboxtest.Record(t, db, acme.ID, "ada@acme.test")
	theirs := sandboxtest.Record(t, db, other.ID, "bob@other.test")
	sandboxtest.RecordProcess(t, db, acme.ID, sb.ID, 42, sandbox.ProcessExited)
	getenv := env(map[string]string{"STOCKADE_URL": e.URL, "STOCKADE_TOKEN": secret})

	out, _, err := cli(t, getenv, "sandbox", "ps", sb.ID)
	if err != nil || !strings.Contains(out, "42") || !strings.Contains(out, "exited") || !strings.Contains(out, "sleep 600") {
		t.Errorf("Got(ps) = %q, %v; want the process, exited", out, err)
	}
	if out, errOut, err := cli(t, getenv, "sandbox", "logs", sb.ID, "42"); err != nil || out != "" {
		t.Errorf("Got(logs of an ended process) = %q %q, %v; want no output, no error", out, errOut, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sandbox", "kill", sb.ID, "42"}, "409"},
		{[]string{"sandbox", "kill", sb.ID, "7"}, "404"},
		{[]string{"sandbox", "ps", theirs.ID}, "404"},
		{[]string{"sandbox", "kill", "-s", "SIGFOO", sb.ID, "42"}, "signal"},
	} {
		if _, errOut, err := cli(t, getenv, tc.args...); err == nil || !strings.Contains(err.Error()+errOut, tc.want) {
			t.Errorf("Got(%v) = %v %q; want an error with %q", tc.args, err, errOut, tc.want)
		}
	}
	for _, args := range [][]string{
		{"sandbox", "kill", sb.ID, "notapid"},
		{"sandbox", "logs", sb.ID},
		{"sandbox", "timeout", sb.ID, "soon"},
		{"sandbox", "start", sb.ID},
	} {
		if _, _, err := cli(t, getenv, args...); err == nil || !strings.Contains(err.Error(), "2") {
			t.Errorf("Got(%v) = %v; want a usage error (exit 2)", args, err)
		}
	}
}
