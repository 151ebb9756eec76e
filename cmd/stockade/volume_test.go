package main

import (
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestVolumeCommands: create, ls, resize and rm reach the API; a name
// clash, a shrink and an auditor's create are refused with the server's
// reason; --volume is parsed (a bad one is a usage error).
func TestVolumeCommands(t *testing.T) {
	e := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t)})
	tn := e.TenantNamed(t, "cli-vol", "CLI Volumes")
	dev := env(map[string]string{"STOCKADE_URL": e.URL, "STOCKADE_TOKEN": e.Token(t, tn, tenants.RoleDeveloper)})
	auditor := env(map[string]string{"STOCKADE_URL": e.URL, "STOCKADE_TOKEN": e.Token(t, tn, tenants.RoleAuditor)})

	if out, _, err := cli(t, dev, "volume", "create", "npm-cache", "2"); err != nil || strings.TrimSpace(out) != "npm-cache" {
		t.Fatalf("Got(volume create) = %q, %v; want npm-cache", out, err)
	}
	for _, c := range []struct {
		name string
		args []string
		env  func(string) string
		want string
	}{
		{"name clash", []string{"volume", "create", "npm-cache", "1"}, dev, "409"},
		{"over quota", []string{"volume", "create", "huge", "100"}, dev, "max_volume_gib"},
		{"auditor", []string{"volume", "create", "other", "1"}, auditor, "403"},
		{"shrink", []string{"volume", "resize", "npm-cache", "1"}, dev, "only grow"},
		{"bad volume flag", []string{"sandbox", "create", "--volume", "npm-cache"}, dev, "exit"},
	} {
		if _, _, err := cli(t, c.env, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Got(err) = %v; want it to say %q", c.name, err, c.want)
		}
	}
	if out, _, err := cli(t, dev, "volume", "resize", "npm-cache", "3"); err != nil || strings.TrimSpace(out) != "npm-cache 3 GiB" {
		t.Errorf("Got(volume resize) = %q, %v; want npm-cache 3 GiB", out, err)
	}
	if out, _, err := cli(t, auditor, "volume", "ls"); err != nil || !strings.Contains(out, "npm-cache") || !strings.Contains(out, "3 GiB") || !strings.Contains(out, "3 of 20 GiB") {
		t.Errorf("Got(volume ls) = %q, %v; want npm-cache, 3 GiB, the quota", out, err)
	}
	if out, _, err := cli(t, dev, "volume", "rm", "npm-cache"); err != nil || strings.TrimSpace(out) != "npm-cache" {
		t.Errorf("Got(volume rm) = %q, %v; want npm-cache", out, err)
	}
	if _, _, err := cli(t, dev, "volume", "show", "npm-cache"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("Got(volume show after rm) err = %v; want 404", err)
	}
}
