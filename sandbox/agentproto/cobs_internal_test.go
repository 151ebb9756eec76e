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

// cobsEncodeLoop and cobsDecodeLoop: COBS in plain byte loops, to compare
// with the IndexByte/copy versions inside a TCG guest (where SSE code runs
// through helpers).
func cobsEncodeLoop(dst, src []byte) []byte {
	start := len(dst)
	dst = append(dst, 0)
	code := byte(1)
	for _, c := range src {
		if c != 0 {
			dst = append(dst, c)
			code++
			if code != 0xFF {
				continue
			}
		}
		dst[start] = code
		start = len(dst)
		dst = append(dst, 0)
		code = 1
	}
	dst[start] = code
	return dst
}

func benchData(n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{3}).Read(b)
	return b
}

func BenchmarkCOBSEncodeIndexByte(b *testing.B) {
	data := benchData(MaxLinkData)
	b.SetBytes(int64(len(data)))
	dst := make([]byte, 0, maxLinkEncoded)
	for b.Loop() {
		dst = cobsEncode(dst[:0], data)
	}
}

func BenchmarkCOBSEncodeLoop(b *testing.B) {
	data := benchData(MaxLinkData)
	b.SetBytes(int64(len(data)))
	dst := make([]byte, 0, maxLinkEncoded)
	for b.Loop() {
		dst = cobsEncodeLoop(dst[:0], data)
	}
}

func BenchmarkCOBSDecodeInPlace(b *testing.B) {
	enc := cobsEncode(nil, benchData(MaxLinkData))
	buf := make([]byte, len(enc))
	b.SetBytes(int64(MaxLinkData))
	for b.Loop() {
		copy(buf, enc)
		cobsDecodeInPlace(buf)
	}
}

func BenchmarkCOBSDecodeOld(b *testing.B) {
	enc := cobsEncode(nil, benchData(MaxLinkData))
	b.SetBytes(int64(MaxLinkData))
	for b.Loop() {
		cobsDecodeRef(enc)
	}
}

func BenchmarkIndexByte254(b *testing.B) {
	data := bytes.Repeat([]byte{1}, 254)
	b.SetBytes(254)
	for b.Loop() {
		bytes.IndexByte(data, 0)
	}
}

func TestCOBSEncodeLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 500 {
		plain := make([]byte, rng.IntN(1500))
		for j := range plain {
			if rng.IntN(4) > 0 {
				plain[j] = byte(rng.IntN(256))
			}
		}
		if got, want := cobsEncodeLoop(nil, plain), cobsEncode(nil, plain); !bytes.Equal(got, want) {
			t.Fatalf("Got(cobsEncodeLoop(% x)) = % x; want % x", plain, got, want)
		}
	}
}
