package main

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestTemplateBuildCommand: a bad recipe is refused here with every field
// named; a good one reaches the server, which checks it further (this
// harness has no template images, so its base is unknown there); an
// auditor may not build.
func TestTemplateBuildCommand(t *testing.T) {
	e := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t)})
	tn := e.TenantNamed(t, "cli-tpl", "CLI Templates")
	dev := env(map[string]string{"STOCKADE_URL": e.URL, "STOCKADE_TOKEN": e.Token(t, tn, tenants.RoleDeveloper)})
	auditor := env(map[string]string{"STOCKADE_URL": e.URL, "STOCKADE_TOKEN": e.Token(t, tn, tenants.RoleAuditor)})
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(bad, []byte("apiVersion: stockade.dev/template/v1\nname: Bad\nbase: debian\nbaes: x\n"), 0o644)
	os.WriteFile(good, []byte("apiVersion: stockade.dev/template/v1\nname: good\nbase: debian\npackages: [tree]\n"), 0o644)

	var ee exitError
	if _, _, err := cli(t, dev, "template", "build"); !errors.As(err, &ee) || ee != 2 {
		t.Errorf("Got(template build without -f) = %v; want exit 2", err)
	}
	_, _, err := cli(t, dev, "template", "build", "-f", bad)
	if err == nil || !strings.Contains(err.Error(), "/name:") || !strings.Contains(err.Error(), "/baes:") {
		t.Errorf("Got(build bad) err = %v; want /name and /baes named", err)
	}
	if _, _, err := cli(t, dev, "template", "build", "-f", good); err == nil || !strings.Contains(err.Error(), "422") || !strings.Contains(err.Error(), "/base") {
		t.Errorf("Got(build good, no images) err = %v; want the server's 422 on /base", err)
	}
	if _, _, err := cli(t, auditor, "template", "build", "-f", good); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("Got(build as auditor) err = %v; want 403", err)
	}
}

// TestTemplateBuildFollow: --follow streams a real build's log (debian +
// tree, the test data dir's images; no VM boots) and ends when it does.
func TestTemplateBuildFollow(t *testing.T) {
	dataDir := sandboxtest.NeedVMs(t)
	db := dbtest.SQLite(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	vms, sbx := sandboxtest.Start(t, db, vmpool.Config{DataDir: dataDir, Logger: log}, sandbox.Config{DefaultTemplate: "busybox"})
	e := webtest.New(t, webtest.Options{DB: db, VMs: vms, Sandboxes: sbx})
	tn := e.TenantNamed(t, "cli-follow", "CLI Follow")
	dev := env(map[string]string{"STOCKADE_URL": e.URL, "STOCKADE_TOKEN": e.Token(t, tn, tenants.RoleDeveloper)})
	file := filepath.Join(t.TempDir(), "r.yaml")
	os.WriteFile(file, []byte("apiVersion: stockade.dev/template/v1\nname: followed\nbase: debian\npackages: [tree]\n"), 0o644)
	out, stderr, err := cli(t, dev, "template", "build", "-f", file, "--follow")
	if err != nil {
		t.Fatalf("Got(build --follow) = %v\n%s\n%s", err, stderr, out)
	}
	for _, want := range []string{"step 1 of 5: base tree", "unpack tree", "step 5 of 5: pack", "build succeeded"} {
		if !strings.Contains(out, want) {
			t.Errorf("Got(followed log) lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "step 1 of 5") != 1 {
		t.Errorf("Got(followed log) repeats itself:\n%s", out)
	}
	if !strings.Contains(stderr, "template followed: version") || !strings.Contains(stderr, "ready") {
		t.Errorf("Got(stderr) = %q; want the ready version", stderr)
	}
	if out, _, err := cli(t, dev, "template", "build", "-f", file); err != nil || !strings.Contains(out, "built already") {
		t.Errorf("Got(the same recipe again) = %q, %v; want it reused", out, err)
	}
}
