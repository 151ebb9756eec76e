package image

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// derivedPackages are the Debian packages a template adds to the debian
// tree; nil for debian itself. libc6-dev is named because gcc only
// recommends it, and a compiler without the C library's headers and crt
// files cannot build hello.c.
func derivedPackages(name string) []string {
	switch name {
	case TemplateNode:
		return []string{"nodejs", "npm"}
	case TemplateBuild:
		return []string{"make", "gcc", "g++", "libc6-dev", "pkg-config"}
	}
	return nil
}

// derivedFiles are files a template adds to its tree (path inside the tree
// -> content), after its packages; they are part of the template's inputs.
//
// node: npm's global config (Debian's npm reads /etc/npmrc). Under TCG every
// extra request and timer of npm costs seconds: no update check against the
// npm registry (which the sandbox's egress policy usually denies, so the
// check only waits), no funding banner, no progress bar. npm audit stays on:
// it is a security check, and a project or CI turns it off itself
// (`--no-audit`, or `audit=false` in the project's .npmrc).
func derivedFiles(name string) map[string]string {
	switch name {
	case TemplateNode:
		return map[string]string{"etc/npmrc": "update-notifier=false\nfund=false\nprogress=false\n"}
	}
	return nil
}

// fromDebian is a Debian-based template (debian, node, build): a copy of
// the build's one debootstrapped debian tree (debootstrap runs once for
// all three, ~1 min saved per derived template), plus its packages,
// installed with the tree's own apt from the host's package index and
// Debian mirror, then apt's caches dropped.
func (b *builder) fromDebian(ctx context.Context, tree string, inputs map[string]string, pkgs []string, files map[string]string, logPath string) error {
	base, err := b.debianBase(ctx, inputs)
	if err != nil {
		return err
	}
	// --one-file-system: a mount left inside the base (see unmountUnder) is
	// never copied.
	if _, err := command(ctx, "", "cp", "-a", "--one-file-system", base+"/.", tree); err != nil {
		return fmt.Errorf("copy the debian tree: %w", err)
	}
	if len(pkgs) > 0 {
		err := aptInstall(ctx, tree, pkgs, logPath)
		if uerr := unmountUnder(tree); err == nil {
			err = uerr
		}
		if err != nil {
			return err
		}
	}
	for p, body := range files {
		if err := os.WriteFile(filepath.Join(tree, p), []byte(body), 0o644); err != nil {
			return fmt.Errorf("template file %s: %w", p, err)
		}
	}
	if err := cleanApt(tree); err != nil {
		return err
	}
	return sandboxDirs(tree)
}

// debianBase debootstraps the debian tree (minbase, debianIncludes and the
// sandbox user) once per build, into a temporary folder Build removes at
// its end.
func (b *builder) debianBase(ctx context.Context, inputs map[string]string) (string, error) {
	if b.base != "" {
		return b.base, nil
	}
	dir, err := os.MkdirTemp(b.root, ".template-base-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	cacheDir := filepath.Join(b.cache, "debootstrap")
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	logPath := filepath.Join(b.cache, "debootstrap-"+versionOf(inputs)+".log")
	if err := debootstrapDebian(ctx, dir, inputs["suite"], inputs["mirror"], cacheDir, logPath); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	b.base = dir
	return dir, nil
}

// aptInstall installs pkgs (and what they depend on, no recommends) into
// tree with the tree's apt in a chroot, from the mirror debootstrap used.
// policy-rc.d keeps any package from starting a service on the host. log
// receives apt's output.
func aptInstall(ctx context.Context, tree string, pkgs []string, logPath string) error {
	// debootstrap leaves the index it installed from in the tree (the
	// template's inputs name its date); fetch one only when it did not.
	index, _ := filepath.Glob(filepath.Join(tree, "var/lib/apt/lists/*_Packages*"))
	policy := filepath.Join(tree, "usr/sbin/policy-rc.d")
	if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		return fmt.Errorf("apt install: %w", err)
	}
	defer os.Remove(policy)
	logf, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("apt install: %w", err)
	}
	defer logf.Close()
	run := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "chroot", append([]string{tree}, args...)...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Run(); err != nil {
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("chroot %s: %w: %s", strings.Join(args, " "), err, tail(string(b), 800))
		}
		return nil
	}
	if len(index) == 0 {
		if err := run("apt-get", "update", "-q"); err != nil {
			return fmt.Errorf("apt install: %w", err)
		}
	}
	if err := run(append([]string{"apt-get", "install", "-y", "-q", "--no-install-recommends"}, pkgs...)...); err != nil {
		return fmt.Errorf("apt install %s: %w", strings.Join(pkgs, " "), err)
	}
	return nil
}
