package oci

import (
	"io"
)

// ApplyLayer applies one uncompressed layer (a tar stream, OCI whiteouts
// included) over root, a tree already laid out: everything in root counts
// as lower layers, so a whiteout removes it. It writes with the same
// safety as Flatten (nothing through a symlink, no '..' or absolute names,
// no devices, setuid and setgid stripped) within lim, and ends with the
// symlink check. A refusal is a *errdefs.FieldError on "image"; the
// caller drops root on any error.
func ApplyLayer(root string, r io.Reader, lim Limits) (Stats, error) {
	t := newTree(root, lim)
	budget := lim.MaxBytes + int64(t.lim.MaxEntries)*2048 + 1<<20
	over := refusal("layer_size", "the layer is larger than the template storage left allows")
	if err := t.apply(&countingLimit{r: r, n: &budget, over: over}); err != nil {
		return Stats{}, err
	}
	if err := t.checkLinks(); err != nil {
		return Stats{}, err
	}
	return Stats{Bytes: t.bytes, Entries: t.entries}, nil
}
