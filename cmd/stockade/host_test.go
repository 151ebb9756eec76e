package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
)

// TestHostCommands: `stockade host` on the server's database: an
// unreachable URI and a duplicate are refused and write nothing; add,
// cordon, drain (refused for the last active host unless forced),
// uncordon, rm, each shown by ls. Adding connects for real (the system
// libvirtd).
func TestHostCommands(t *testing.T) {
	hypervisortest.NeedSystem(t)
	getenv := env(map[string]string{"STOCKADE_DATA_DIR": t.TempDir()})
	ls := func() []map[string]any {
		t.Helper()
		out, _, err := cli(t, getenv, "host", "ls", "--json")
		if err != nil {
			t.Fatalf("host ls: %v", err)
		}
		var rows []map[string]any
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("host ls --json: %v: %s", err, out)
		}
		return rows
	}
	if _, _, err := cli(t, getenv, "host", "add", "qemu+tcp://127.0.0.1:1/system"); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Errorf("host add (unreachable) = %v; want it does not answer", err)
	}
	if _, _, err := cli(t, getenv, "host", "add", "--labels", "zone", hypervisortest.SystemURI); err == nil || !strings.Contains(err.Error(), "key=value") {
		t.Errorf("host add --labels zone = %v; want a labels error", err)
	}
	if rows := ls(); len(rows) != 0 {
		t.Fatalf("Got(hosts after refused adds) = %v; want none", rows)
	}
	uri := hypervisortest.SystemURI
	out, _, err := cli(t, getenv, "host", "add", "--labels", "zone=a", uri)
	if err != nil || !strings.Contains(out, "active") || !strings.Contains(out, "zone=a") {
		t.Fatalf("host add = %v: %s; want it active with its label", err, out)
	}
	if _, _, err := cli(t, getenv, "host", "add", uri); err == nil || !strings.Contains(err.Error(), "already there") {
		t.Errorf("host add (duplicate) = %v; want already there", err)
	}
	if _, _, err := cli(t, getenv, "host", "drain", uri); err == nil || !strings.Contains(err.Error(), "last active host") {
		t.Errorf("host drain (last host) = %v; want refused", err)
	}
	for _, step := range []struct {
		args  []string
		state string
	}{
		{[]string{"cordon", "--force", "--reason", "maintenance", uri}, "cordoned"},
		{[]string{"uncordon", uri}, "active"},
		{[]string{"drain", "--force", uri}, "drained"},
	} {
		if _, _, err := cli(t, getenv, append([]string{"host"}, step.args...)...); err != nil {
			t.Fatalf("host %v = %v", step.args, err)
		}
		if rows := ls(); len(rows) != 1 || rows[0]["state"] != step.state {
			t.Errorf("Got(hosts after %v) = %v; want %s", step.args, rows, step.state)
		}
	}
	if out, _, err := cli(t, getenv, "host", "rm", uri); err != nil || !strings.Contains(out, "removed") {
		t.Errorf("host rm = %v %s", err, out)
	}
	if rows := ls(); len(rows) != 0 {
		t.Errorf("Got(hosts after rm) = %v; want none", rows)
	}
}
