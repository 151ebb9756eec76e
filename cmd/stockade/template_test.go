package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestTemplateCommands: template ls shows the tenant's own template (not
// another tenant's), rm deletes it (an auditor may not; another tenant's
// name is not found).
func TestTemplateCommands(t *testing.T) {
	e := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t)})
	tn := e.TenantNamed(t, "cli-tpl", "CLI Templates")
	other := e.TenantNamed(t, "cli-tpl-other", "Other")
	admin := env(map[string]string{"STOCKADE_URL": e.URL, "STOCKADE_TOKEN": e.Token(t, tn, tenants.RoleAdmin)})
	auditor := env(map[string]string{"STOCKADE_URL": e.URL, "STOCKADE_TOKEN": e.Token(t, tn, tenants.RoleAuditor)})
	otherAdmin := env(map[string]string{"STOCKADE_URL": e.URL, "STOCKADE_TOKEN": e.Token(t, other, tenants.RoleAdmin)})
	ctx := context.Background()
	v, err := e.App.Templates.Begin(ctx, tn.ID, templates.Begin{Name: "mytool", Source: templates.SourceOCI, SourceRef: "example/tool:1", CreatedBy: "cli test"})
	if err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	os.WriteFile(filepath.Join(tree, "hello.txt"), []byte("hi"), 0o644)
	if v, err = e.App.Templates.Finish(ctx, tn.ID, v.ID, tree, templates.Defaults{}); err != nil {
		t.Fatal(err)
	}

	out, _, err := cli(t, auditor, "template", "ls")
	if err != nil || !strings.Contains(out, "mytool") || !strings.Contains(out, "oci") || !strings.Contains(out, "v1") ||
		!strings.Contains(out, strings.TrimPrefix(v.Digest, "sha256:")[:12]) || !strings.Contains(out, "template storage:") {
		t.Errorf("Got(template ls) = %q, %v; want mytool (oci, v1, its digest) and the storage", out, err)
	}
	if out, _, err := cli(t, otherAdmin, "template", "ls"); err != nil || strings.Contains(out, "mytool") {
		t.Errorf("Got(other tenant's template ls) = %q, %v; want no mytool", out, err)
	}
	if _, _, err := cli(t, otherAdmin, "template", "rm", "mytool"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("Got(other tenant's template rm) err = %v; want 404", err)
	}
	if _, _, err := cli(t, auditor, "template", "rm", "mytool"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("Got(template rm as auditor) err = %v; want 403", err)
	}
	if out, _, err := cli(t, admin, "template", "rm", "mytool"); err != nil || strings.TrimSpace(out) != "mytool" {
		t.Fatalf("Got(template rm) = %q, %v; want mytool", out, err)
	}
	if out, _, err := cli(t, admin, "template", "ls"); err != nil || strings.Contains(out, "mytool") {
		t.Errorf("Got(template ls after rm) = %q, %v; want no mytool", out, err)
	}
	if _, err := os.Stat(v.Path); err == nil {
		t.Errorf("Got(image after rm) exists; want removed")
	}
}
