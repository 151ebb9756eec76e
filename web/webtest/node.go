package webtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// NodeModules installs the npm package spec ("name@version", pinned) once
// (npm, from the registry) into a folder shared by runs and returns its
// node_modules; pkg is the package's folder in it ("e2b",
// "@modelcontextprotocol/sdk"). Without node or npm the test fails under
// CI=true (CI must run it; scripts/deps.sh installs them) and is skipped
// elsewhere.
func NodeModules(t testing.TB, spec, pkg string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is missing (%v): CI must run the Node tests (scripts/deps.sh installs nodejs and npm)", tool, err)
			}
			t.Skipf("%s is missing (%v): skipping a Node test", tool, err)
		}
	}
	root := filepath.Join(os.TempDir(), "stockade-npm", strings.NewReplacer("@", "", "/", "-").Replace(spec))
	mods := filepath.Join(root, "node_modules")
	if _, err := os.Stat(filepath.Join(mods, pkg, "package.json")); err == nil {
		return mods
	}
	if err := os.MkdirAll(filepath.Dir(root), 0o755); err != nil {
		t.Fatal(err)
	}
	// Installed aside and renamed into place: a run that stops half way
	// leaves no half-installed folder behind for the next.
	tmp, err := os.MkdirTemp(filepath.Dir(root), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"private":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", "--save-exact", spec)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s: %v\n%s", spec, err, out)
	}
	if err := os.Rename(tmp, root); err != nil && !os.IsExist(err) {
		if _, serr := os.Stat(mods); serr != nil { // not another run's install either
			t.Fatalf("install %s: %v", spec, err)
		}
	}
	return mods
}
