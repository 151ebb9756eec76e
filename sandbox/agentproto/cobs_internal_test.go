package agentproto

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// cobsDecodeRef is the plain COBS decoder, into a buffer of its own: the
// reference the in-place decoder must match, valid input or not.
func cobsDecodeRef(src []byte) ([]byte, error) {
	var dst []byte
	for len(src) > 0 {
		code := int(src[0])
		if code == 0 || code-1 > len(src)-1 {
			return nil, errCOBS
		}
		dst = append(dst, src[1:code]...)
		src = src[code:]
		if code != 0xFF && len(src) > 0 {
			dst = append(dst, 0)
		}
	}
	return dst, nil
}

func TestCOBSDecodeInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		var enc []byte
		switch i % 3 {
		case 0: // a valid encoding of random bytes with zeros
			plain := make([]byte, rng.IntN(2000))
			for j := range plain {
				if rng.IntN(8) > 0 {
					plain[j] = byte(rng.IntN(256))
				}
			}
			enc = cobsEncode(nil, plain)
			got, err := cobsDecodeInPlace(bytes.Clone(enc))
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("Got(cobsDecodeInPlace(cobsEncode(%d bytes))) = %d bytes, %v; want them back", len(plain), len(got), err)
			}
			continue
		case 1: // a valid encoding, one byte flipped
			plain := make([]byte, 1+rng.IntN(600))
			enc = cobsEncode(nil, plain)
			enc[rng.IntN(len(enc))] = byte(rng.IntN(256))
		default: // garbage
			enc = make([]byte, rng.IntN(600))
			for j := range enc {
				enc[j] = byte(rng.IntN(256))
			}
		}
		want, werr := cobsDecodeRef(enc)
		got, err := cobsDecodeInPlace(bytes.Clone(enc))
		if (err != nil) != (werr != nil) || (err == nil && !bytes.Equal(got, want)) {
			t.Fatalf("Got(cobsDecodeInPlace(% x)) = % x, %v; want % x, %v", enc, got, err, want, werr)
		}
		if err != nil && !errors.Is(err, errCOBS) {
			t.Fatalf("Got(cobsDecodeInPlace) error %v; want errCOBS", err)
		}
	}
}
