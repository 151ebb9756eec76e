package image

import (
	"path/filepath"
	"strings"
)

// On disk the manifest names every file inside the data dir relative to
// it, so a data dir copied or moved elsewhere keeps working; in memory
// (what Load and Build return) every path is absolute. Absolute paths on
// disk (the manifests of older builds, and guest.json and the template
// records, which keep the form older builds read) that lie inside the data
// dir they were written in (the folder above the nearest "images") are read
// as inside this one. Manifests are not rewritten on load: the next build
// writes the relative form.

// within returns p relative to dir when p is dir or below it.
func within(dir, p string) (string, bool) {
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// writtenIn guesses the data dir an absolute path was written for: the
// folder holding the nearest "images" above it ("" when there is none).
func writtenIn(p string) string {
	if !filepath.IsAbs(p) {
		return ""
	}
	for d := filepath.Dir(p); d != filepath.Dir(d); d = filepath.Dir(d) {
		if filepath.Base(d) == "images" {
			return filepath.Dir(d)
		}
	}
	return ""
}

// diskPath is p as written into a record of dataDir.
func diskPath(dataDir, p string) string {
	if rel, ok := within(dataDir, p); ok && rel != "." {
		return filepath.ToSlash(rel)
	}
	return p
}

// memPath is p of a record of dataDir, written for the data dir old (the
// same one unless it was copied or moved), as an absolute path.
func memPath(dataDir, old, p string) string {
	if p == "" {
		return ""
	}
	if !filepath.IsAbs(p) {
		return filepath.Join(dataDir, filepath.FromSlash(p))
	}
	if _, ok := within(dataDir, p); ok {
		return p
	}
	if old != "" {
		if rel, ok := within(old, p); ok {
			return filepath.Join(dataDir, rel)
		}
	}
	return p
}

// mapKeys returns m with every key passed through f.
func mapKeys[V any](m map[string]V, f func(string) string) map[string]V {
	if m == nil {
		return nil
	}
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[f(k)] = v
	}
	return out
}

// mapPaths returns m with every path passed through f.
func (m Manifest) mapPaths(f func(string) string) Manifest {
	m.Guest = m.Guest.mapPaths(f)
	ts := make([]Template, len(m.Templates))
	for i, t := range m.Templates {
		t.Path = f(t.Path)
		ts[i] = t
	}
	if m.Templates != nil {
		m.Templates = ts
	}
	m.Checksums = mapKeys(m.Checksums, f)
	m.Files = mapKeys(m.Files, f)
	return m
}

func (g Guest) mapPaths(f func(string) string) Guest {
	g.Kernel, g.Initramfs = f(g.Kernel), f(g.Initramfs)
	return g
}

// onDisk and inMemory convert between the two forms for dataDir.
func (m Manifest) onDisk(dataDir string) Manifest {
	return m.mapPaths(func(p string) string { return diskPath(dataDir, p) })
}

func (m Manifest) inMemory(dataDir string) Manifest {
	old := writtenIn(m.Guest.Kernel)
	return m.mapPaths(func(p string) string { return memPath(dataDir, old, p) })
}

func (r guestRecord) inMemory(dataDir string) guestRecord {
	old := writtenIn(r.Guest.Kernel)
	f := func(p string) string { return memPath(dataDir, old, p) }
	r.Guest, r.Checksums = r.Guest.mapPaths(f), mapKeys(r.Checksums, f)
	return r
}

func (r templateRecord) inMemory(dataDir string) templateRecord {
	r.Template.Path = memPath(dataDir, writtenIn(r.Template.Path), r.Template.Path)
	return r
}
