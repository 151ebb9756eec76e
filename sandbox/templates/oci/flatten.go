package oci

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Stats says what Flatten laid out.
type Stats struct {
	Bytes   int64
	Entries int
}

// Flatten lays the image's layers, bottom first, into the folder dst
// (an empty folder of the caller's), with the OCI whiteouts applied, and
// checks each layer's blob against its digest and its content against the
// config's diff id as it goes: a mismatch is refused naming the layer, and
// the caller removes dst. It ends with the checks of what host code will
// touch (checkLinks, checkReserved) and the working folder made.
func (im *Image) Flatten(ctx context.Context, dst string, lim Limits) (Stats, error) {
	t := newTree(dst, lim)
	// What a layer may decompress to: its files, their headers and the
	// tar's padding; past it the stream is a bomb.
	budget := lim.MaxBytes + int64(t.lim.MaxEntries)*2048 + 1<<20
	for i, l := range im.layers {
		if err := ctx.Err(); err != nil {
			return Stats{}, err
		}
		if err := im.layer(t, i, l, &budget); err != nil {
			return Stats{}, err
		}
	}
	if err := t.checkReserved(im.Config.Config.WorkingDir); err != nil {
		return Stats{}, err
	}
	if err := t.checkLinks(); err != nil {
		return Stats{}, err
	}
	return Stats{Bytes: t.bytes, Entries: t.entries}, nil
}

func (im *Image) layerName(i int, l layerSrc) string {
	name := fmt.Sprintf("layer %d of %d", i+1, len(im.layers))
	switch {
	case l.digest.Hex != "":
		name += " (" + short(l.digest) + ")"
	default:
		name += " (diff id " + short(l.diffID) + ")"
	}
	return name
}

func short(h v1.Hash) string {
	if len(h.Hex) > 12 {
		return h.Algorithm + ":" + h.Hex[:12]
	}
	return h.String()
}

func (im *Image) layer(t *tree, i int, l layerSrc, budget *int64) (err error) {
	name := im.layerName(i, l)
	var blob *hashingReader
	wrap := func(err error) error {
		if blob != nil && l.size >= 0 && blob.n > l.size {
			// Read past what the manifest claims: that is the fault, not
			// what the surplus did to the decompressor.
			err = refusal("digest", "the blob is larger than the %d bytes the manifest says", l.size)
		}
		if fe := asRefusal(err); fe != nil {
			fe.Detail = name + ": " + fe.Detail
			return err
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	rc, err := l.open()
	if err != nil {
		return wrap(refusal("layer", "open it: %v", err))
	}
	defer rc.Close()
	var raw io.Reader = rc
	if l.size >= 0 {
		raw = io.LimitReader(rc, l.size+1)
	}
	blob = &hashingReader{r: raw, h: sha256.New()}
	br := bufio.NewReaderSize(blob, 64<<10)
	zr, err := decompress(br)
	if err != nil {
		return wrap(refusal("layer", "not a readable gzip or zstd stream: %v", err))
	}
	defer zr.Close()
	over := refusal("layer_size", "decompresses to more than the template storage left allows")
	content := &hashingReader{r: &countingLimit{r: zr, n: budget, over: over}, h: sha256.New()}
	if err := t.apply(content); err != nil {
		return wrap(err)
	}
	// The rest of the stream (the tar's end blocks) counts in the digests.
	if _, err := io.Copy(io.Discard, content); err != nil {
		return wrap(refusal("layer", "reading it: %v", err))
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return wrap(refusal("layer", "reading it: %v", err))
	}
	if l.digest.Hex != "" {
		if got := blob.sum(); got != l.digest {
			return wrap(refusal("digest", "the blob does not match its digest: it is %s, the manifest says %s", got, l.digest))
		}
	}
	if l.size >= 0 && blob.n != l.size {
		return wrap(refusal("digest", "the blob is %d bytes, the manifest says %d", blob.n, l.size))
	}
	if got := content.sum(); got != l.diffID {
		return wrap(refusal("digest", "its content does not match its diff id: it is %s, the image config says %s", got, l.diffID))
	}
	return nil
}
