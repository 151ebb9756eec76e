package oci

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/zstd"
)

// Image is an image whose manifest and config match their digests; each
// layer is checked against its digests as Flatten reads it.
type Image struct {
	// Digest is the manifest's digest; for a docker save tarball, which
	// has no manifest of its own, the config's (the image id).
	Digest v1.Hash
	Config *v1.ConfigFile
	layers []layerSrc
}

// layerSrc is one layer and what it must match.
type layerSrc struct {
	// digest is the blob's digest the manifest (or the archive's blob
	// name) claims; zero when nothing claims one (a docker save layer.tar).
	digest v1.Hash
	// size is the blob's claimed size, -1 when none.
	size   int64
	diffID v1.Hash
	open   func() (io.ReadCloser, error)
}

// Layers is how many layers the image has.
func (im *Image) Layers() int { return len(im.layers) }

// CompressedSize is what the layers' blobs claim to weigh (0 for those
// that claim nothing).
func (im *Image) CompressedSize() int64 {
	var n int64
	for _, l := range im.layers {
		if l.size > 0 {
			n += l.size
		}
	}
	return n
}

// Platform is the only platform imported.
const (
	PlatformOS   = "linux"
	PlatformArch = "amd64"
)

// maxLayers bounds an image's layers (Docker's own limit is 127).
const maxLayers = 256

// maxMeta bounds a manifest, an index or a config.
const maxMeta = 4 << 20

var hexDigest = regexp.MustCompile(`(?:^|/)(?:sha256[:/])?([a-f0-9]{64})(?:\.json|\.tar|\.tar\.gz)?$`)

// OpenArchive reads an uploaded image: an OCI image layout as a tar of its
// folder (extracted into scratch first, files and folders only), or a
// `docker save` tarball. A docker save of Docker 25 or later is also an
// OCI layout, which is then preferred (it has the manifest's digests).
func OpenArchive(file, scratch string, maxEntries int) (*Image, error) {
	names, err := archiveNames(file, maxEntries)
	if err != nil {
		return nil, err
	}
	switch {
	case names["oci-layout"] && names["index.json"]:
		dir := filepath.Join(scratch, "layout")
		if err := extractLayout(file, dir, maxEntries); err != nil {
			return nil, err
		}
		p, err := layout.FromPath(dir)
		if err != nil {
			return nil, refusal("oci_layout", "not an OCI image layout: %v", err)
		}
		idx, err := p.ImageIndex()
		if err != nil {
			return nil, refusal("oci_layout", "the layout's index.json: %v", err)
		}
		return FromIndex(idx)
	case names["manifest.json"]:
		return openDocker(file)
	}
	return nil, refusal("image_format", "neither an OCI image layout (oci-layout and index.json) nor a docker save tarball (manifest.json)")
}

// archiveNames lists the regular files at the top of an archive's tree.
func archiveNames(file string, maxEntries int) (map[string]bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("open upload: %w", err)
	}
	defer f.Close()
	out := map[string]bool{}
	tr := tar.NewReader(bufio.NewReader(f))
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, refusal("image_format", "not a tar archive: %v", err)
		}
		if n > maxEntries {
			return nil, refusal("entries", "the archive holds more than %d entries", maxEntries)
		}
		out[path.Clean(strings.TrimPrefix(hdr.Name, "./"))] = true
	}
}

// extractLayout writes an OCI layout tar into dir: folders and regular
// files only, every name checked (no '..', nothing absolute).
func extractLayout(file, dir string, maxEntries int) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("open upload: %w", err)
	}
	defer f.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("extract layout: %w", err)
	}
	t := newTree(dir, Limits{MaxBytes: 1 << 62, MaxEntries: maxEntries})
	t.chown = false
	t.added = map[string]bool{}
	tr := tar.NewReader(bufio.NewReader(f))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return refusal("image_format", "not a tar archive: %v", err)
		}
		rel, err := cleanName(hdr.Name)
		if err != nil {
			return err
		}
		if rel == "" {
			continue
		}
		switch hdr.Typeflag {
		case tar.TypeDir, tar.TypeReg, tar.TypeRegA:
		default:
			return refusal("oci_layout", "%q: an OCI layout archive holds only files and folders", rel)
		}
		hdr.Mode = 0o700
		if hdr.Typeflag != tar.TypeDir {
			hdr.Mode = 0o600
		}
		if _, err := t.parentDirs(rel, true); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeDir {
			err = t.dir(rel, hdr)
		} else {
			err = t.file(rel, hdr, tr)
		}
		if err != nil {
			return err
		}
	}
}

// FromIndex picks the linux/amd64 image of an index (nested indexes
// included), each manifest checked against the digest that names it.
func FromIndex(idx v1.ImageIndex) (*Image, error) {
	img, d, err := pick(idx, 0)
	if err != nil {
		return nil, err
	}
	return FromImage(img, d)
}

func pick(idx v1.ImageIndex, depth int) (v1.Image, v1.Descriptor, error) {
	if depth > 3 {
		return nil, v1.Descriptor{}, refusal("index", "image indexes nested more than 3 deep")
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, v1.Descriptor{}, refusal("index", "the image index: %v", err)
	}
	var seen []string
	var loose *v1.Descriptor
	for i := range im.Manifests {
		d := im.Manifests[i]
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, v1.Descriptor{}, refusal("index", "nested index %s: %v", d.Digest, err)
			}
			raw, err := child.RawManifest()
			if err != nil {
				return nil, v1.Descriptor{}, refusal("index", "nested index %s: %v", d.Digest, err)
			}
			if err := checkBlob("nested index", raw, d); err != nil {
				return nil, v1.Descriptor{}, err
			}
			img, cd, err := pick(child, depth+1)
			if err == nil {
				return img, cd, nil
			}
			seen = append(seen, "an index without linux/amd64")
		case d.MediaType.IsImage():
			if d.Platform == nil {
				if loose == nil {
					loose = &d
				}
				continue
			}
			if d.Platform.OS == PlatformOS && d.Platform.Architecture == PlatformArch {
				img, err := idx.Image(d.Digest)
				if err != nil {
					return nil, v1.Descriptor{}, refusal("manifest", "image %s: %v", d.Digest, err)
				}
				return img, d, nil
			}
			seen = append(seen, d.Platform.OS+"/"+d.Platform.Architecture)
		}
	}
	if loose != nil {
		// No platform named: the config says (FromImage checks it).
		img, err := idx.Image(loose.Digest)
		if err != nil {
			return nil, v1.Descriptor{}, refusal("manifest", "image %s: %v", loose.Digest, err)
		}
		return img, *loose, nil
	}
	if len(seen) == 0 {
		return nil, v1.Descriptor{}, refusal("platform", "the index lists no image")
	}
	return nil, v1.Descriptor{}, refusal("platform", "no linux/amd64 image in the index (it has %s)", strings.Join(seen, ", "))
}

// checkBlob compares raw with the digest and size d claims.
func checkBlob(what string, raw []byte, d v1.Descriptor) error {
	if d.Digest.Algorithm != "sha256" {
		return refusal("digest", "%s: digest algorithm %q (only sha256)", what, d.Digest.Algorithm)
	}
	sum := sha256.Sum256(raw)
	if got := hex.EncodeToString(sum[:]); got != d.Digest.Hex {
		return refusal("digest", "%s does not match its digest: it is sha256:%s, %s was claimed", what, got, d.Digest)
	}
	if d.Size > 0 && d.Size != int64(len(raw)) {
		return refusal("digest", "%s is %d bytes, %d were claimed", what, len(raw), d.Size)
	}
	return nil
}

// FromImage checks img's manifest against d (the descriptor that named
// it), its config against the manifest, and lists its layers.
func FromImage(img v1.Image, d v1.Descriptor) (*Image, error) {
	raw, err := img.RawManifest()
	if err != nil {
		return nil, refusal("manifest", "read the manifest: %v", err)
	}
	if len(raw) > maxMeta {
		return nil, refusal("manifest", "a manifest of %d bytes", len(raw))
	}
	if err := checkBlob("the manifest", raw, d); err != nil {
		return nil, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, refusal("manifest", "the manifest: %v", err)
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return nil, refusal("config", "read the config: %v", err)
	}
	if err := checkBlob("the image config", rawCfg, m.Config); err != nil {
		return nil, err
	}
	cfg, err := parseConfig(rawCfg)
	if err != nil {
		return nil, err
	}
	if len(m.Layers) != len(cfg.RootFS.DiffIDs) {
		return nil, refusal("config", "the manifest lists %d layers, the config %d diff ids", len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	im := &Image{Digest: d.Digest, Config: cfg}
	for i, ld := range m.Layers {
		if len(ld.URLs) > 0 {
			return nil, refusal("layer", "layer %d is a foreign layer (fetched from %s): not supported", i+1, ld.URLs[0])
		}
		if ld.Digest.Algorithm != "sha256" {
			return nil, refusal("digest", "layer %d: digest algorithm %q (only sha256)", i+1, ld.Digest.Algorithm)
		}
		h := ld.Digest
		im.layers = append(im.layers, layerSrc{digest: h, size: ld.Size, diffID: cfg.RootFS.DiffIDs[i], open: func() (io.ReadCloser, error) {
			l, err := img.LayerByDigest(h)
			if err != nil {
				return nil, err
			}
			return l.Compressed()
		}})
	}
	return im, nil
}

func parseConfig(raw []byte) (*v1.ConfigFile, error) {
	cfg, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return nil, refusal("config", "the image config: %v", err)
	}
	if (cfg.OS != "" && cfg.OS != PlatformOS) || (cfg.Architecture != "" && cfg.Architecture != PlatformArch) {
		return nil, refusal("platform", "the image is for %s/%s; only linux/amd64 images run here", cfg.OS, cfg.Architecture)
	}
	if len(cfg.RootFS.DiffIDs) > maxLayers {
		return nil, refusal("layers", "%d layers (at most %d)", len(cfg.RootFS.DiffIDs), maxLayers)
	}
	for i, d := range cfg.RootFS.DiffIDs {
		if d.Algorithm != "sha256" {
			return nil, refusal("digest", "layer %d: diff id algorithm %q (only sha256)", i+1, d.Algorithm)
		}
	}
	return cfg, nil
}

// openDocker reads a docker save tarball (pkg/v1/tarball): one image, its
// config named by its digest, its layers checked against the config's
// diff ids (and against the digest in a layer's name, when it has one).
func openDocker(file string) (*Image, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(file) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, refusal("docker_archive", "manifest.json: %v", err)
	}
	if len(m) != 1 {
		return nil, refusal("docker_archive", "manifest.json lists %d images; upload one image per tarball", len(m))
	}
	img, err := tarball.Image(opener, nil)
	if err != nil {
		return nil, refusal("docker_archive", "read the image: %v", err)
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return nil, refusal("config", "read the config: %v", err)
	}
	sum := sha256.Sum256(rawCfg)
	cfgDigest := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	if sub := hexDigest.FindStringSubmatch(m[0].Config); sub != nil && sub[1] != cfgDigest.Hex {
		return nil, refusal("digest", "the image config does not match its digest: it is %s, its name %s says sha256:%s", cfgDigest, m[0].Config, sub[1])
	}
	cfg, err := parseConfig(rawCfg)
	if err != nil {
		return nil, err
	}
	if len(m[0].Layers) != len(cfg.RootFS.DiffIDs) {
		return nil, refusal("config", "manifest.json lists %d layers, the config %d diff ids", len(m[0].Layers), len(cfg.RootFS.DiffIDs))
	}
	im := &Image{Digest: cfgDigest, Config: cfg}
	for i, name := range m[0].Layers {
		l := layerSrc{size: -1, diffID: cfg.RootFS.DiffIDs[i]}
		if sub := hexDigest.FindStringSubmatch(name); sub != nil && strings.HasPrefix(name, "blobs/") {
			l.digest = v1.Hash{Algorithm: "sha256", Hex: sub[1]}
		}
		n := name
		l.open = func() (io.ReadCloser, error) { return tarEntry(file, n) }
		im.layers = append(im.layers, l)
	}
	return im, nil
}

// tarEntry opens the file called name inside the tar archive file,
// following the archive's own links (docker save shares layers so) by name.
func tarEntry(file, name string) (io.ReadCloser, error) {
	for hops := 0; hops < 8; hops++ {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		tr := tar.NewReader(f)
		var next string
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				f.Close()
				return nil, fmt.Errorf("%s: not in the archive", name)
			}
			if err != nil {
				f.Close()
				return nil, err
			}
			if path.Clean(hdr.Name) != path.Clean(name) {
				continue
			}
			if hdr.Typeflag == tar.TypeSymlink || hdr.Typeflag == tar.TypeLink {
				next = hdr.Linkname
				if hdr.Typeflag == tar.TypeSymlink {
					next = path.Join(path.Dir(name), hdr.Linkname)
				}
				break
			}
			return struct {
				io.Reader
				io.Closer
			}{tr, f}, nil
		}
		f.Close()
		name = next
	}
	return nil, fmt.Errorf("%s: too many links", name)
}

// hashingReader hashes everything read through it.
type hashingReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

func (h *hashingReader) sum() v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.h.Sum(nil))}
}

// decompress sniffs a blob's compression (gzip, zstd or none).
func decompress(br *bufio.Reader) (io.ReadCloser, error) {
	magic, _ := br.Peek(4)
	switch {
	case len(magic) >= 3 && magic[0] == 0x1f && magic[1] == 0x8b && magic[2] == 8:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		return zr, nil
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		return zr.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}

// countingLimit fails a read past n bytes (an archive whose tar ends but
// whose stream does not: a decompression bomb of padding).
type countingLimit struct {
	r    io.Reader
	n    *int64
	over error
}

func (c *countingLimit) Read(p []byte) (int, error) {
	if *c.n <= 0 {
		return 0, c.over
	}
	if int64(len(p)) > *c.n {
		p = p[:*c.n]
	}
	n, err := c.r.Read(p)
	*c.n -= int64(n)
	return n, err
}
