package templates_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

var testActor = audit.Actor{Kind: audit.ActorUser, ID: "u-1", Name: "dev@example.test"}

func newTenant(t testing.TB, db *gorm.DB, slug string) string {
	t.Helper()
	tn, err := tenants.NewStore(db, nil).CreateTenant(context.Background(), audit.Actor{Kind: audit.ActorSystem, ID: "test"}, slug, "")
	if err != nil {
		t.Fatal(err)
	}
	return tn.ID
}

func newService(t *testing.T, db *gorm.DB) (*templates.Service, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := templates.New(templates.Config{DB: db, DataDir: dir, Builtins: func() []image.Template {
		return []image.Template{{Name: "busybox", Version: "b1", SizeBytes: 4 << 20}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

// smallTree is a template root with one file.
func smallTree(t *testing.T) string {
	t.Helper()
	tree := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tree, "opt/tool"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "opt/tool/hello.txt"), []byte("hello from a tenant template\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return tree
}

func images(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(filepath.Join(dir, "tenant-templates"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, strings.TrimPrefix(p, dir))
		}
		return nil
	})
	return out
}

// TestTemplateLifecycle: Begin, Finish, List/Get/Resolve, a second version,
// Delete; on SQLite and PostgreSQL.
func TestTemplateLifecycle(t *testing.T) {
	ctx := context.Background()
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			s, dir := newService(t, d.DB)
			acme := newTenant(t, d.DB, "acme")
			v, err := s.Begin(ctx, acme, templates.Begin{Name: "tool", Source: templates.SourceRecipe, SourceRef: "sha256:abc",
				Actor: testActor, Estimate: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if v.State != templates.StateBuilding || v.Seq != 1 || !strings.HasPrefix(v.InVMName, "t") || v.CreatedBy != testActor.Name {
				t.Fatalf("Got(Begin) = %+v; want building seq 1 by %s", v, testActor.Name)
			}
			if _, err := s.Resolve(ctx, acme, "tool"); !errdefs.IsNotFound(err) {
				t.Errorf("Got(Resolve while building) = %v; want not found", err)
			}
			st, err := s.Staging(acme, v.ID)
			if err != nil {
				t.Fatal(err)
			}
			defs := templates.Defaults{Env: map[string]string{"TOOL_HOME": "/opt/tool"}, User: "root", Workdir: "/opt/tool"}
			fin, err := s.Finish(ctx, acme, v.ID, smallTree(t), defs)
			if err != nil {
				t.Fatal(err)
			}
			if fin.State != templates.StateReady || !strings.HasPrefix(fin.Digest, "sha256:") || fin.SizeBytes <= 0 {
				t.Fatalf("Got(Finish) = %+v; want ready with digest and size", fin)
			}
			if _, err := os.Stat(st); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("Got(staging after Finish) = %v; want removed", err)
			}
			r, err := s.Resolve(ctx, acme, "tool")
			if err != nil || r.ID != v.ID || r.Defaults.Env["TOOL_HOME"] != "/opt/tool" || r.Defaults.Workdir != "/opt/tool" {
				t.Fatalf("Got(Resolve) = %+v, %v; want version %s with its defaults", r, err, v.ID)
			}
			if fi, err := os.Stat(r.Path); err != nil || fi.Size() != r.SizeBytes {
				t.Fatalf("Got(image %s) = %v, %v; want %d bytes", r.Path, fi, err, r.SizeBytes)
			}
			// A second version of the same kind; another kind is a conflict.
			if _, err := s.Begin(ctx, acme, templates.Begin{Name: "tool", Source: templates.SourceOCI}); !errdefs.IsConflict(err) {
				t.Errorf("Got(Begin oci over a recipe template) = %v; want conflict", err)
			}
			v2, err := s.Begin(ctx, acme, templates.Begin{Name: "tool", Source: templates.SourceRecipe, Actor: testActor})
			if err != nil || v2.Seq != 2 {
				t.Fatalf("Got(Begin v2) = %+v, %v; want seq 2", v2, err)
			}
			if _, err := s.Finish(ctx, acme, v2.ID, smallTree(t), templates.Defaults{}); err != nil {
				t.Fatal(err)
			}
			if r, _ := s.Resolve(ctx, acme, "tool"); r.ID != v2.ID {
				t.Errorf("Got(Resolve after v2) = %s; want %s", r.ID, v2.ID)
			}
			list, err := s.List(ctx, acme)
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 2 || list[0].Name != "busybox" || !list[0].Builtin || list[1].Name != "tool" || len(list[1].Versions) != 2 ||
				list[1].Current.ID != v2.ID {
				t.Fatalf("Got(List) = %+v; want busybox then tool with 2 versions", list)
			}
			// A sandbox running v1 holds the template.
			if err := d.DB.Exec(`INSERT INTO sandboxes (id, tenant_id, template, template_version, state, vcpus, memory_mib, timeout_seconds,
				created_at, expires_at) VALUES ('sb-1', ?, 'tool', ?, 'running', 1, 64, 60, ?, ?)`,
				acme, v.ID, fin.CreatedAt, fin.CreatedAt).Error; err != nil {
				t.Fatal(err)
			}
			if e, _ := s.Get(ctx, acme, "tool"); e.InUse != 1 {
				t.Errorf("Got(Get InUse) = %d; want 1", e.InUse)
			}
			if _, err := s.Delete(ctx, testActor, acme, "tool"); !errdefs.IsConflict(err) {
				t.Fatalf("Got(Delete in use) = %v; want conflict", err)
			}
			if err := d.DB.Exec(`UPDATE sandboxes SET state = 'destroyed' WHERE id = 'sb-1'`).Error; err != nil {
				t.Fatal(err)
			}
			gone, err := s.Delete(ctx, testActor, acme, "tool")
			if err != nil || len(gone) != 2 {
				t.Fatalf("Got(Delete) = %d, %v; want 2 versions gone", len(gone), err)
			}
			if left := images(t, dir); len(left) != 0 {
				t.Errorf("Got(files after Delete) = %v; want none", left)
			}
			if _, err := s.Get(ctx, acme, "tool"); !errdefs.IsNotFound(err) {
				t.Errorf("Got(Get after Delete) = %v; want not found", err)
			}
			var n int64
			d.DB.Model(&audit.Event{}).Where("tenant_id = ? AND type IN ?", acme,
				[]string{audit.TypeTemplateCreated, audit.TypeTemplateDeleted}).Count(&n)
			if n != 3 {
				t.Errorf("Got(template audit events) = %d; want 3 (2 created, 1 deleted)", n)
			}
			// The name is free again.
			if _, err := s.Begin(ctx, acme, templates.Begin{Name: "tool", Source: templates.SourceOCI}); err != nil {
				t.Errorf("Got(Begin after Delete) = %v; want ok", err)
			}
		})
	}
}

// TestTemplateBadInput: bad names, a built-in's name, bad defaults, the
// quota on the estimate and on the real size; each refused with nothing
// left behind.
func TestTemplateBadInput(t *testing.T) {
	ctx := context.Background()
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			s, dir := newService(t, d.DB)
			acme := newTenant(t, d.DB, "acme")
			before := dbtest.Count(t, d.DB)
			for _, tc := range []struct {
				name string
				b    templates.Begin
				is   func(error) bool
			}{
				{"bad name", templates.Begin{Name: "Bad Name", Source: templates.SourceRecipe}, errdefs.IsInvalid},
				{"too long", templates.Begin{Name: strings.Repeat("a", 33), Source: templates.SourceRecipe}, errdefs.IsInvalid},
				{"built-in", templates.Begin{Name: "busybox", Source: templates.SourceRecipe}, errdefs.IsConflict},
				{"reserved", templates.Begin{Name: "node", Source: templates.SourceOCI}, errdefs.IsConflict},
				{"source", templates.Begin{Name: "x", Source: "docker"}, errdefs.IsInvalid},
				{"workdir", templates.Begin{Name: "x", Source: templates.SourceOCI, Defaults: templates.Defaults{Workdir: "../etc"}}, errdefs.IsInvalid},
				{"env", templates.Begin{Name: "x", Source: templates.SourceOCI, Defaults: templates.Defaults{Env: map[string]string{"A=B": "c"}}}, errdefs.IsInvalid},
				{"quota", templates.Begin{Name: "x", Source: templates.SourceOCI, Estimate: 11 << 30}, errdefs.IsQuota},
			} {
				if _, err := s.Begin(ctx, acme, tc.b); !tc.is(err) {
					t.Errorf("Got(Begin %s) = %v; want the right error", tc.name, err)
				}
			}
			// LockQuota made the tenant's quota row: that one is expected.
			after := dbtest.Count(t, d.DB)
			after["tenant_quotas"] = before["tenant_quotas"]
			if ok, diff := dbtest.Equal(before, after); !ok {
				t.Errorf("Got(rows after refusals) changed: %s; want none", diff)
			}
			// The quota on the real size: a 1 MiB quota, a tree bigger than it.
			q, _ := tenants.NewStore(d.DB, nil).Quota(ctx, acme)
			q.MaxTemplateMiB = 1
			if _, err := tenants.NewStore(d.DB, nil).SetQuota(ctx, testActor, acme, q); err != nil {
				t.Fatal(err)
			}
			v, err := s.Begin(ctx, acme, templates.Begin{Name: "big", Source: templates.SourceOCI})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Finish(ctx, acme, v.ID, smallTree(t), templates.Defaults{}); !errdefs.IsQuota(err) {
				t.Fatalf("Got(Finish over quota) = %v; want quota", err)
			}
			if left := images(t, dir); len(left) != 0 {
				t.Errorf("Got(files after a refused Finish) = %v; want none", left)
			}
			got, err := s.VersionByID(ctx, acme, v.ID)
			if err != nil || got.State != templates.StateFailed || !strings.Contains(got.Reason, "max_template_mib") {
				t.Errorf("Got(version after a refused Finish) = %+v, %v; want failed naming the quota", got, err)
			}
			if _, err := s.Get(ctx, acme, "big"); !errdefs.IsNotFound(err) {
				t.Errorf("Got(Get of a template whose only build failed) = %v; want not found", err)
			}
			// Fail of a build: its staging goes.
			v, err = s.Begin(ctx, acme, templates.Begin{Name: "broken", Source: templates.SourceRecipe})
			if err != nil {
				t.Fatal(err)
			}
			st, _ := s.Staging(acme, v.ID)
			os.WriteFile(filepath.Join(st, "junk"), []byte("x"), 0o644)
			if err := s.Fail(ctx, acme, v.ID, errors.New("setup command exited 1")); err != nil {
				t.Fatal(err)
			}
			if left := images(t, dir); len(left) != 0 {
				t.Errorf("Got(files after Fail) = %v; want none", left)
			}
		})
	}
}

// TestTemplateTenantScope: another tenant's template is not found for
// every read and write.
func TestTemplateTenantScope(t *testing.T) {
	ctx := context.Background()
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			s, _ := newService(t, d.DB)
			acme, other := newTenant(t, d.DB, "acme"), newTenant(t, d.DB, "other")
			v, err := s.Begin(ctx, acme, templates.Begin{Name: "tool", Source: templates.SourceRecipe})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Staging(other, v.ID); !errdefs.IsNotFound(err) {
				t.Errorf("Got(other's Staging) = %v; want not found", err)
			}
			if _, err := s.Finish(ctx, other, v.ID, smallTree(t), templates.Defaults{}); !errdefs.IsNotFound(err) {
				t.Errorf("Got(other's Finish) = %v; want not found", err)
			}
			if err := s.Fail(ctx, other, v.ID, nil); !errdefs.IsNotFound(err) {
				t.Errorf("Got(other's Fail) = %v; want not found", err)
			}
			if _, err := s.Finish(ctx, acme, v.ID, smallTree(t), templates.Defaults{}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Resolve(ctx, other, "tool"); !errdefs.IsNotFound(err) {
				t.Errorf("Got(other's Resolve) = %v; want not found", err)
			}
			if _, err := s.Get(ctx, other, "tool"); !errdefs.IsNotFound(err) {
				t.Errorf("Got(other's Get) = %v; want not found", err)
			}
			if _, err := s.VersionByID(ctx, other, v.ID); !errdefs.IsNotFound(err) {
				t.Errorf("Got(other's VersionByID) = %v; want not found", err)
			}
			if _, err := s.Delete(ctx, testActor, other, "tool"); !errdefs.IsNotFound(err) {
				t.Errorf("Got(other's Delete) = %v; want not found", err)
			}
			list, _ := s.List(ctx, other)
			for _, e := range list {
				if e.Name == "tool" {
					t.Errorf("Got(other's List) has tool; want only built-ins")
				}
			}
			// The same name in another tenant is its own template.
			if _, err := s.Begin(ctx, other, templates.Begin{Name: "tool", Source: templates.SourceOCI}); err != nil {
				t.Errorf("Got(other's Begin of the same name) = %v; want ok", err)
			}
		})
	}
}
