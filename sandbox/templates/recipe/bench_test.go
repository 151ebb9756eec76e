package recipe_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/benchrec"
	"github.com/stockade-dev/stockade/sandbox/templates/recipe"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// BenchmarkRecipeBuild: a recipe adding jq and tree to the debian base
// (the whole build: base tree, packages, files, pack into a ready version)
// against debootstrap alone making the same root (debian's packages plus
// jq and tree), as a built-in template would be made.
// recipe_build_vs_debootstrap-ratio is the recipe's time over debootstrap's.
func BenchmarkRecipeBuild(b *testing.B) {
	needTools(b, "debootstrap")
	ctx := context.Background()
	e := newEnv(b, dbtest.SQLite(b))
	src := strings.Replace(jqRecipe, "packages: [jq]", "packages: [jq, tree]", 1)
	var recipeTime, debootTime time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		build, _, err := e.b.Start(ctx, actor, e.tenant, []byte(strings.Replace(src, "jq-tools", "bench"+string(rune('a'+i%26)), 1)))
		if err != nil {
			b.Fatal(err)
		}
		e.b.Wait()
		recipeTime += time.Since(start)
		got, err := e.b.Store().Get(ctx, e.tenant, build.TemplateName, build.ID)
		if err != nil || got.State != recipe.StateSucceeded {
			b.Fatalf("build = %+v, %v; want succeeded", got, err)
		}

		dir := filepath.Join(b.TempDir(), "root")
		start = time.Now()
		out, err := exec.CommandContext(ctx, "debootstrap", "--variant=minbase",
			"--include=bash,coreutils,git,curl,ca-certificates,python3,jq,tree", "--components=main",
			"bookworm", dir, "http://deb.debian.org/debian").CombinedOutput()
		if err != nil {
			b.Fatalf("debootstrap: %v: %s", err, out[max(0, len(out)-2000):])
		}
		debootTime += time.Since(start)
		os.RemoveAll(dir)
	}
	n := float64(b.N)
	b.ReportMetric(recipeTime.Seconds()/n, "recipe-s")
	b.ReportMetric(debootTime.Seconds()/n, "debootstrap-s")
	benchrec.Record(b, benchrec.Result{Name: "recipe_build_vs_debootstrap", Value: recipeTime.Seconds() / n, Unit: "s", Baseline: debootTime.Seconds() / n})
}
