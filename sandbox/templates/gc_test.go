package templates_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// TestTemplateGC: a superseded unused version goes, one a sandbox runs
// stays, the newest stays; a build left building past StaleBuild fails and
// its staging goes; a file no version owns goes; on SQLite and PostgreSQL.
func TestTemplateGC(t *testing.T) {
	ctx := context.Background()
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			dir := t.TempDir()
			clock := clockwork.NewFakeClockAt(time.Now().UTC())
			s, err := templates.New(templates.Config{DB: d.DB, DataDir: dir, Clock: clock, Builtins: func() []image.Template { return nil }})
			if err != nil {
				t.Fatal(err)
			}
			acme := newTenant(t, d.DB, "acme")
			build := func(name string) templates.Version {
				v, err := s.Begin(ctx, acme, templates.Begin{Name: name, Source: templates.SourceRecipe})
				if err != nil {
					t.Fatal(err)
				}
				if v, err = s.Finish(ctx, acme, v.ID, smallTree(t), templates.Defaults{}); err != nil {
					t.Fatal(err)
				}
				return v
			}
			v1, v2, v3 := build("tool"), build("tool"), build("tool")
			if err := d.DB.Exec(`INSERT INTO sandboxes (id, tenant_id, template, template_version, state, vcpus, memory_mib, timeout_seconds,
				created_at, expires_at) VALUES ('sb-gc', ?, 'tool', ?, 'running', 1, 64, 60, ?, ?)`, acme, v2.ID, v2.CreatedAt, v2.CreatedAt).Error; err != nil {
				t.Fatal(err)
			}
			stuck, err := s.Begin(ctx, acme, templates.Begin{Name: "stuck", Source: templates.SourceOCI})
			if err != nil {
				t.Fatal(err)
			}
			st, _ := s.Staging(acme, stuck.ID)
			os.WriteFile(filepath.Join(st, "layer"), []byte("x"), 0o644)
			orphan := filepath.Join(filepath.Dir(v1.Path), "01234567-dead-beef-0000-000000000000.ext4")
			os.WriteFile(orphan, []byte("orphan"), 0o644)

			// Not yet stale: the build stays.
			res, err := s.GC(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if res.Superseded != 1 || res.Stale != 0 || res.Files != 1 {
				t.Errorf("Got(GC) = %+v; want 1 superseded (v1), no stale build, 1 orphan file", res)
			}
			for _, c := range []struct {
				v    templates.Version
				kept bool
			}{{v1, false}, {v2, true}, {v3, true}} {
				_, err := os.Stat(c.v.Path)
				if got := err == nil; got != c.kept {
					t.Errorf("Got(image of v%d kept) = %v; want %v", c.v.Seq, got, c.kept)
				}
			}
			if _, err := os.Stat(orphan); err == nil {
				t.Errorf("Got(orphan file) kept; want removed")
			}
			if _, err := os.Stat(st); err != nil {
				t.Errorf("Got(staging of a live build) = %v; want kept", err)
			}
			clock.Advance(templates.StaleBuild + time.Minute)
			if res, err = s.GC(ctx); err != nil || res.Stale != 1 {
				t.Errorf("Got(GC after a day) = %+v, %v; want the stuck build failed", res, err)
			}
			if got, _ := s.VersionByID(ctx, acme, stuck.ID); got.State != templates.StateFailed {
				t.Errorf("Got(stuck build) = %s; want failed", got.State)
			}
			if _, err := os.Stat(st); err == nil {
				t.Errorf("Got(staging of the stale build) kept; want removed")
			}
		})
	}
}
