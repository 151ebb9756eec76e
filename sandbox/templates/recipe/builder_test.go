package recipe_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/sandbox/templates/recipe"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

var actor = audit.Actor{Kind: audit.ActorUser, ID: "u-1", Name: "dev@example.test"}

type env struct {
	db      *gorm.DB
	reg     *templates.Service
	b       *recipe.Builder
	dataDir string
	tenant  string
}

// newEnv is a builder on the real registry and db, with the test data
// dir's built-in images as bases.
func newEnv(t testing.TB, db *gorm.DB) env {
	t.Helper()
	needTools(t, "debugfs", "apt-get", "dpkg", "mkfs.ext4")
	debianImage(t)
	m, err := image.Load(sandboxtest.DataDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	reg, err := templates.New(templates.Config{DB: db, DataDir: dir, Builtins: func() []image.Template { return m.Templates }})
	if err != nil {
		t.Fatal(err)
	}
	b, err := recipe.New(recipe.Options{Store: recipe.NewStore(db, nil), Registry: reg, Bases: func() []image.Template { return m.Templates }, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	tn, err := tenants.NewStore(db, nil).CreateTenant(context.Background(), audit.Actor{Kind: audit.ActorSystem, ID: "test"}, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	return env{db: db, reg: reg, b: b, dataDir: dir, tenant: tn.ID}
}

// leftovers lists the files under the registry's folder (images, staging).
func leftovers(t testing.TB, dir string) []string {
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

func auditTypes(t *testing.T, db *gorm.DB, tenant string) []string {
	t.Helper()
	var types []string
	if err := db.Model(&audit.Event{}).Where("tenant_id = ?", tenant).Order("occurred_at, id").Pluck("type", &types).Error; err != nil {
		t.Fatal(err)
	}
	return types
}

const jqRecipe = `apiVersion: stockade.dev/template/v1
name: jq-tools
base: debian
packages: [jq]
files:
  /opt/hello.txt: {content: "hello\n"}
env: {TOOL: jq}
workdir: /workspace
`

// TestBuildRecipe builds a recipe on the real debian base into a ready
// version whose image holds the package's binary and the file; the same
// recipe again reuses it; another tenant cannot see the build.
func TestBuildRecipe(t *testing.T) {
	ctx := context.Background()
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			e := newEnv(t, d.DB)
			b, reused, err := e.b.Start(ctx, actor, e.tenant, []byte(jqRecipe))
			if err != nil || reused {
				t.Fatalf("Start() = %v, reused %v; want a new build", err, reused)
			}
			e.b.Wait()
			got, err := e.b.Store().Get(ctx, e.tenant, "jq-tools", b.ID)
			if err != nil {
				t.Fatal(err)
			}
			_, rc, err := e.b.Log(ctx, e.tenant, "jq-tools", b.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			logText := readAll(t, rc)
			if got.State != recipe.StateSucceeded || got.Step != recipe.StepPack || got.EndedAt == nil {
				t.Fatalf("Got(build) = %+v; want succeeded at step 5\n%s", got, logText)
			}
			for _, want := range []string{"step 1 of 5: base tree", "step 2 of 5: packages", "unpack jq", "step 5 of 5: pack", "build succeeded"} {
				if !strings.Contains(logText, want) {
					t.Errorf("log lacks %q:\n%s", want, logText)
				}
			}
			v, err := e.reg.VersionByID(ctx, e.tenant, got.VersionID)
			if err != nil || v.State != templates.StateReady || v.SourceRef != got.RecipeDigest || v.Defaults.Env["TOOL"] != "jq" {
				t.Fatalf("Got(version) = %+v, %v; want ready from the recipe with env TOOL=jq", v, err)
			}
			for _, p := range []string{"/usr/bin/jq", "/opt/hello.txt", "/etc/stockade-template.json"} {
				out, err := exec.Command("debugfs", "-R", "stat "+p, v.Path).CombinedOutput()
				if err != nil || strings.Contains(string(out), "File not found") {
					t.Errorf("debugfs stat %s in the image = %v: %s; want it there", p, err, out)
				}
			}
			if types := auditTypes(t, d.DB, e.tenant); !slices.Contains(types, audit.TypeTemplateBuildStarted) ||
				!slices.Contains(types, audit.TypeTemplateBuildSucceeded) || !slices.Contains(types, audit.TypeTemplateCreated) {
				t.Errorf("audit = %v; want build started, succeeded and template created", types)
			}
			again, reused, err := e.b.Start(ctx, actor, e.tenant, []byte(jqRecipe))
			if err != nil || !reused || again.ID != b.ID {
				t.Errorf("Start(same recipe) = %s, reused %v, %v; want build %s reused", again.ID, reused, err, b.ID)
			}
			other, err := tenants.NewStore(d.DB, nil).CreateTenant(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, "other", "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.b.Store().Get(ctx, other.ID, "jq-tools", b.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Get(another tenant's build) = %v; want not found", err)
			}
			if bs, err := e.b.Store().List(ctx, other.ID, "jq-tools"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("List(another tenant) = %v, %v; want not found", bs, err)
			}
			if bs, err := e.b.Store().List(ctx, e.tenant, "jq-tools"); err != nil || len(bs) != 1 || bs[0].ID != b.ID {
				t.Errorf("List(own) = %v, %v; want the one build", bs, err)
			}
			if _, _, err := e.b.Log(ctx, other.ID, "jq-tools", b.ID, 0); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Log(another tenant's build) = %v; want not found", err)
			}
		})
	}
}

// TestBuildRefusedWritesNothing: a bad field, an unknown base or package,
// a built-in's name are refused before anything is written.
func TestBuildRefusedWritesNothing(t *testing.T) {
	ctx := context.Background()
	head := "apiVersion: stockade.dev/template/v1\n"
	tests := []struct {
		name, src string
		want      error
		field     string
	}{
		{"unknown package", head + "name: t1\nbase: debian\npackages: [jq, no-such-package-stockade]\n", errdefs.ErrInvalid, "/packages/1"},
		{"base not built", head + "name: t1\nbase: build\n", errdefs.ErrInvalid, "/base"},
		{"unknown base", head + "name: t1\nbase: alpine\n", errdefs.ErrInvalid, "/base"},
		{"built-in name", head + "name: debian\nbase: debian\n", errdefs.ErrConflict, ""},
		{"setup without a builder", head + "name: t1\nbase: debian\nsetup: [make]\n", errdefs.ErrInvalid, "/setup"},
	}
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			e := newEnv(t, d.DB)
			before := dbtest.Count(t, d.DB)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					b := e.b
					if tt.name == "base not built" {
						// The image here may hold the build template: a
						// builder whose bases lack it sees a known but
						// unbuilt base, as on a host that never built it.
						b = withoutBase(t, e, d.DB, "build")
					}
					_, _, err := b.Start(ctx, actor, e.tenant, []byte(tt.src))
					if !errors.Is(err, tt.want) {
						t.Fatalf("Start() = %v; want %v", err, tt.want)
					}
					if tt.field != "" {
						fes := errdefs.FieldErrors(err)
						if len(fes) != 1 || fes[0].Field != tt.field {
							t.Errorf("Start() fields = %v; want %s", err, tt.field)
						}
					}
					if ok, diff := dbtest.Equal(before, dbtest.Count(t, d.DB)); !ok {
						t.Errorf("rows changed: %s; want none", diff)
					}
					if files := leftovers(t, e.dataDir); len(files) != 0 {
						t.Errorf("files = %v; want none", files)
					}
				})
			}
		})
	}
}

// TestBuildFailureLeavesNothing: a build failing in the pipeline (a file
// over a directory of the base) is failed with its log, and leaves no
// image, no staging tree and no template.
func TestBuildFailureLeavesNothing(t *testing.T) {
	ctx := context.Background()
	db := dbtest.SQLite(t)
	e := newEnv(t, db)
	src := "apiVersion: stockade.dev/template/v1\nname: broken\nbase: debian\nfiles:\n  /etc/apt: {content: x}\n"
	b, _, err := e.b.Start(ctx, actor, e.tenant, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	e.b.Wait()
	got, err := e.b.Store().Get(ctx, e.tenant, "broken", b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != recipe.StateFailed || got.Step != recipe.StepFiles || !strings.Contains(got.Error, "/etc/apt") {
		t.Errorf("Got(build) = %+v; want failed at step 3 naming /etc/apt", got)
	}
	_, rc, err := e.b.Log(ctx, e.tenant, "broken", b.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if text := readAll(t, rc); !strings.Contains(text, "build failed") {
		t.Errorf("log = %q; want the failure at its end", text)
	}
	if files := leftovers(t, e.dataDir); len(files) != 0 {
		t.Errorf("files after a failed build = %v; want none", files)
	}
	if _, err := e.reg.Resolve(ctx, e.tenant, "broken"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Resolve(broken) = %v; want not found", err)
	}
	v, err := e.reg.VersionByID(ctx, e.tenant, got.VersionID)
	if err != nil || v.State != templates.StateFailed {
		t.Errorf("Got(version) = %+v, %v; want failed", v, err)
	}
	if types := auditTypes(t, db, e.tenant); !slices.Contains(types, audit.TypeTemplateBuildFailed) {
		t.Errorf("audit = %v; want template.build.failed", types)
	}
}

// withoutBase is a builder on e's registry whose built bases lack name.
func withoutBase(t *testing.T, e env, db *gorm.DB, name string) *recipe.Builder {
	t.Helper()
	var bases []image.Template
	for _, tpl := range mustManifest(t).Templates {
		if tpl.Name != name {
			bases = append(bases, tpl)
		}
	}
	b, err := recipe.New(recipe.Options{Store: recipe.NewStore(db, nil), Registry: e.reg, Bases: func() []image.Template { return bases }, DataDir: e.dataDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func mustManifest(t *testing.T) image.Manifest {
	m, err := image.Load(sandboxtest.DataDir())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func readAll(t *testing.T, rc interface {
	Read([]byte) (int, error)
	Close() error
}) string {
	t.Helper()
	defer rc.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := rc.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
