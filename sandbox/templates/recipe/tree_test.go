package recipe_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/templates/recipe"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// debianImage is the built-in debian template of the test data dir (its
// ext4 file), or the test fails under CI and skips otherwise.
func debianImage(t testing.TB) string {
	t.Helper()
	m, err := image.Load(sandboxtest.DataDir())
	tpl, ok := m.Template(image.TemplateDebian)
	if err != nil || !ok {
		if os.Getenv("CI") != "" {
			t.Fatalf("no debian template in %s (%v); `make test` builds it", sandboxtest.DataDir(), err)
		}
		t.Skipf("no debian template in %s (%v)", sandboxtest.DataDir(), err)
	}
	return tpl.Path
}

func needTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is missing: %v", tool, err)
			}
			t.Skipf("%s is missing: %v", tool, err)
		}
	}
}

// TestBaseAndPackages lays the debian image out, resolves jq against its
// installed set (its libraries come along, what debian has already does
// not), unpacks it through usrmerge's symlinks and runs it in the tree.
func TestBaseAndPackages(t *testing.T) {
	needTools(t, "debugfs", "apt-get", "dpkg", "chroot")
	ctx := context.Background()
	tree := filepath.Join(t.TempDir(), "root")
	if err := recipe.ExtractBase(ctx, debianImage(t), tree); err != nil {
		t.Fatal(err)
	}
	pkgs, err := recipe.ResolvePackages(ctx, tree, []string{"jq", "tree"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"jq", "libjq1", "libonig5", "tree"} {
		if !slices.Contains(pkgs, want) {
			t.Errorf("ResolvePackages(jq, tree) = %v; want %s in it", pkgs, want)
		}
	}
	for _, base := range []string{"bash", "libc6", "coreutils"} {
		if slices.Contains(pkgs, base) {
			t.Errorf("ResolvePackages(jq, tree) = %v; want no %s (the base has it)", pkgs, base)
		}
	}
	if err := recipe.InstallPackages(ctx, filepath.Join(t.TempDir(), "cache"), tree, pkgs, os.Stderr); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(tree, "bin")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("Lstat(/bin) after unpacking = %v, %v; want usrmerge's symlink kept", fi, err)
	}
	out, err := exec.Command("chroot", tree, "/usr/bin/jq", "-n", `{"a":1}|.a`).CombinedOutput()
	if err != nil || string(out) != "1\n" {
		t.Errorf("jq in the tree = %q, %v; want 1", out, err)
	}
}

func TestResolveUnknownPackage(t *testing.T) {
	needTools(t, "debugfs", "apt-get")
	ctx := context.Background()
	tree := filepath.Join(t.TempDir(), "root")
	if err := recipe.ExtractBase(ctx, debianImage(t), tree); err != nil {
		t.Fatal(err)
	}
	_, err := recipe.ResolvePackages(ctx, tree, []string{"jq", "no-such-package-stockade"})
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("ResolvePackages(unknown) = %v; want ErrInvalid", err)
	}
	if got := fields(err); !slices.Equal(got, []string{"/packages/1:unknown"}) {
		t.Errorf("ResolvePackages(unknown) fields = %v; want [/packages/1:unknown]", got)
	}
}

// TestFilesStayInRoot: a file written through the base's symlinks (an
// absolute one, a relative one climbing out) lands inside the tree.
func TestFilesStayInRoot(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	for _, d := range []string{"etc", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{"bin": "usr/bin", "abs": outside, "up": "../../../../" + outside, "etc/loop": "/etc/loop"}
	for l, target := range links {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]recipe.File{
		"/bin/tool":       {Content: "#!/bin/sh\n", Mode: "0755"},
		"/abs/x":          {Content: "a"},
		"/up/y":           {Content: "b"},
		"/etc/new/dir/cf": {Content: "c"},
	}
	if err := recipe.WriteFiles(root, files); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 0 {
		t.Errorf("ReadDir(outside) = %v; want nothing written outside the root", ents)
	}
	checks := map[string]os.FileMode{"usr/bin/tool": 0o755, filepath.Join(outside[1:], "x"): 0o644, "etc/new/dir/cf": 0o644}
	for p, mode := range checks {
		fi, err := os.Stat(filepath.Join(root, p))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("Stat(%s) = %v, %v; want mode %v", p, fi, err, mode)
		}
	}
	if _, err := recipe.ResolveIn(root, "/etc/loop/x"); err == nil {
		t.Errorf("ResolveIn(a symlink loop) = nil error; want too many symlinks")
	}
}
