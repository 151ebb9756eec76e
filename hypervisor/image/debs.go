package image

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// debPackage is one Debian package as apt's index describes it.
type debPackage struct {
	Name     string
	Version  string
	Arch     string
	Filename string // pool path; its base name is the cache file name
	SHA256   string
	Depends  string
}

// String names the exact package version, as apt-get accepts it.
func (p debPackage) String() string { return p.Name + "=" + p.Version }

// aptShow reads the candidate versions of names from apt's index, in one
// apt-cache call (each costs about half a second).
func aptShow(ctx context.Context, names ...string) ([]debPackage, error) {
	out, err := command(ctx, "", "apt-cache", append([]string{"show", "--no-all-versions"}, names...)...)
	if err != nil {
		return nil, fmt.Errorf("look up packages %s (has `apt-get update` run?): %w", strings.Join(names, " "), err)
	}
	got := map[string]debPackage{}
	for _, p := range parseControl(out) {
		if _, dup := got[p.Name]; !dup {
			got[p.Name] = p
		}
	}
	pkgs := make([]debPackage, len(names))
	for i, name := range names {
		p, ok := got[name]
		if !ok || p.Version == "" || p.Filename == "" || p.SHA256 == "" {
			return nil, fmt.Errorf("look up package %s: apt-cache answered no usable record", name)
		}
		pkgs[i] = p
	}
	return pkgs, nil
}

// parseControl reads the stanzas of Debian control records.
func parseControl(b []byte) []debPackage {
	var pkgs []debPackage
	var p debPackage
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if p.Name != "" {
				pkgs = append(pkgs, p)
			}
			p = debPackage{}
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, " ") {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "Package":
			p.Name = val
		case "Version":
			p.Version = val
		case "Architecture":
			p.Arch = val
		case "Filename":
			p.Filename = val
		case "SHA256":
			p.SHA256 = val
		case "Depends":
			p.Depends = val
		}
	}
	if p.Name != "" {
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// kernelDependency names the versioned kernel package a meta package
// (linux-image-amd64) depends on.
func kernelDependency(meta debPackage) (string, error) {
	for _, dep := range strings.Split(meta.Depends, ",") {
		alt, _, _ := strings.Cut(strings.TrimSpace(dep), "|")
		name, _, _ := strings.Cut(strings.TrimSpace(alt), " ")
		if strings.HasPrefix(name, "linux-image-") {
			return name, nil
		}
	}
	return "", fmt.Errorf("resolve %s: no linux-image-* dependency in %q", meta.Name, meta.Depends)
}

// fetchDeb returns the path of p's .deb in cacheDir, downloading it with
// apt-get when absent. A cached file is trusted only if its SHA-256 matches.
func fetchDeb(ctx context.Context, cacheDir string, p debPackage) (string, error) {
	dst := filepath.Join(cacheDir, filepath.Base(p.Filename))
	if sum, err := fileSHA256(dst); err == nil && sum == p.SHA256 {
		return dst, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("download %s: %w", p, err)
	}
	tmp, err := os.MkdirTemp(cacheDir, ".download-")
	if err != nil {
		return "", fmt.Errorf("download %s: %w", p, err)
	}
	defer os.RemoveAll(tmp)
	// apt's sandbox user cannot write into a root-only folder; apt checks
	// the index hash either way.
	if _, err := command(ctx, tmp, "apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", p.String()); err != nil {
		return "", fmt.Errorf("download %s: %w", p, err)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("download %s: got %d .deb files, want 1", p, len(debs))
	}
	sum, err := fileSHA256(debs[0])
	if err != nil {
		return "", fmt.Errorf("download %s: %w", p, err)
	}
	if sum != p.SHA256 {
		return "", fmt.Errorf("download %s: sha256 %s, index says %s", p, sum, p.SHA256)
	}
	if err := os.Rename(debs[0], dst); err != nil {
		return "", fmt.Errorf("download %s: %w", p, err)
	}
	return dst, nil
}

// extractDeb unpacks deb (dpkg -x) into cacheDir/<sha>/ once and returns that folder.
func extractDeb(ctx context.Context, cacheDir string, p debPackage, deb string) (string, error) {
	dst := filepath.Join(cacheDir, p.Name+"_"+p.SHA256[:16])
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("extract %s: %w", p, err)
	}
	tmp, err := os.MkdirTemp(cacheDir, ".extract-")
	if err != nil {
		return "", fmt.Errorf("extract %s: %w", p, err)
	}
	defer os.RemoveAll(tmp)
	if _, err := command(ctx, "", "dpkg", "-x", deb, tmp); err != nil {
		return "", fmt.Errorf("extract %s: %w", p, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", fmt.Errorf("extract %s: %w", p, err)
	}
	return dst, nil
}

// command runs name in dir and returns its stdout; on failure the error
// carries the tail of stderr.
func command(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, tail(stderr.String(), 800))
	}
	return out, nil
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func bytesSHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// isNotExist is fs.ErrNotExist through wrapping.
func isNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }

// FetchPackages downloads apt's candidate of each of names (checked against
// the index's SHA-256) into cacheDir/debs and unpacks each once (dpkg -x)
// under cacheDir/extract, returning those folders in order. Tenant recipes
// use it; their packages never reach a guest's apt.
func FetchPackages(ctx context.Context, cacheDir string, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	pkgs, err := aptShow(ctx, names...)
	if err != nil {
		return nil, err
	}
	dirs := make([]string, len(pkgs))
	for i, p := range pkgs {
		deb, err := fetchDeb(ctx, filepath.Join(cacheDir, "debs"), p)
		if err != nil {
			return nil, err
		}
		if dirs[i], err = extractDeb(ctx, filepath.Join(cacheDir, "extract"), p, deb); err != nil {
			return nil, err
		}
	}
	return dirs, nil
}
