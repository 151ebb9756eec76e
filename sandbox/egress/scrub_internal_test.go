package egress

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"io"
	"net/url"
	"strings"
	"testing"
)

// chunkReader returns at most n bytes per read: a value straddles reads
// at every offset as n varies.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(c.n, len(p), len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

const (
	testSecret = "ghp_RealToken+/With_Odd=Chars0123456789"
	testPH     = "stockade-placeholder-GH_TOKEN-abcdefghijklmnop"
)

func TestScrubReaderAcrossReads(t *testing.T) {
	m := newMatcher(secretPatterns("GH_TOKEN", testSecret, testPH),
		// A second secret that starts like the first: the longer one wins.
		secretPatterns("LONGER", testSecret+"-and-more", "stockade-placeholder-LONGER-x"))
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	input := "start " + testSecret + " mid " + testSecret + testSecret + " q=" + url.QueryEscape(testSecret) +
		" longer=" + testSecret + "-and-more" +
		" b64a=" + b64(testSecret) + " b64b=" + b64("x"+testSecret) + " b64c=" + b64("xy"+testSecret) +
		" url64=" + base64.URLEncoding.EncodeToString([]byte("u:"+testSecret)) + " end " + testSecret[:10]
	var want string
	for n := 1; n <= len(input); n++ {
		hits := map[string]int{}
		r := newScrubReader(&chunkReader{b: []byte(input), n: n}, m, func(name string) { hits[name]++ }, nil)
		got, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			want = string(got)
			t.Logf("scrubbed: %s", got)
		}
		if string(got) != want {
			t.Fatalf("Got(scrub in %d-byte reads) = %q; want %q (as in 1-byte reads)", n, got, want)
		}
		if hits["GH_TOKEN"] != 8 || hits["LONGER"] != 1 {
			t.Fatalf("Got(hits in %d-byte reads) = %v; want GH_TOKEN 8, LONGER 1", n, hits)
		}
	}
	if strings.Contains(want, testSecret) || !strings.Contains(want, "start "+testPH+" mid "+testPH+testPH) ||
		!strings.Contains(want, "longer=stockade-placeholder-LONGER-x ") || !strings.HasSuffix(want, " end "+testSecret[:10]) {
		t.Errorf("Got(scrubbed) = %q; want placeholders in place of every value", want)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for _, word := range strings.Fields(want) {
			_, v, _ := strings.Cut(word, "=")
			raw, _ := enc.DecodeString(v)
			if bytes.Contains(raw, []byte(testSecret[2:len(testSecret)-2])) {
				t.Errorf("Got(%s decoded) = %q; want no real value", word, raw)
			}
		}
	}
}

// TestScrubReaderDoesNotHold: bytes that cannot start a secret are passed
// on at once, before the upstream sends more (a server-sent event stream
// is not delayed); a possible start is held until it is decided.
func TestScrubReaderDoesNotHold(t *testing.T) {
	m := newMatcher(secretPatterns("GH_TOKEN", testSecret, testPH))
	pr, pw := io.Pipe()
	r := newScrubReader(pr, m, func(string) {}, nil)
	tests := []struct{ write, want string }{
		{"data: {\"a\":1}\n\n", "data: {\"a\":1}\n\n"},
		{"data: " + testSecret[:12], "data: "},
		{testSecret[12:] + "\n\n", testPH + "\n\n"},
		{"data: ghp_nope\n\n", "data: ghp_nope\n\n"},
	}
	for _, tt := range tests {
		go pw.Write([]byte(tt.write))
		var got []byte
		buf := make([]byte, 256)
		for len(got) < len(tt.want) {
			n, err := r.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, buf[:n]...)
		}
		if string(got) != tt.want {
			t.Errorf("Got(read after writing %q) = %q; want %q", tt.write, got, tt.want)
		}
	}
	pw.Close()
}

func TestGzipRoundTrip(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	io.WriteString(zw, strings.Repeat("x", 1000)+testSecret+"tail")
	zw.Close()
	m := newMatcher(secretPatterns("GH_TOKEN", testSecret, testPH))
	hits := 0
	out, err := io.ReadAll(newGzipReader(newScrubReader(&gunzipReader{src: &chunkReader{b: z.Bytes(), n: 7}}, m, func(string) { hits++ }, nil)))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil || string(plain) != strings.Repeat("x", 1000)+testPH+"tail" || hits != 1 {
		t.Errorf("Got(gunzip(scrubbed)) = %q, %v, hits %d; want the placeholder once", plain, err, hits)
	}
	empty, err := io.ReadAll(newGzipReader(newScrubReader(&gunzipReader{src: bytes.NewReader(nil)}, m, func(string) {}, nil)))
	if err != nil {
		t.Fatalf("Got(empty gzip body) err = %v; want a valid empty gzip", err)
	}
	if zr, err := gzip.NewReader(bytes.NewReader(empty)); err != nil {
		t.Errorf("Got(empty body re-encoded) = %v; want valid gzip", err)
	} else if b, _ := io.ReadAll(zr); len(b) != 0 {
		t.Errorf("Got(empty body) = %q; want empty", b)
	}
}

func TestAcceptsGzip(t *testing.T) {
	tests := []struct {
		in   []string
		want bool
	}{
		{nil, false},
		{[]string{"gzip"}, true},
		{[]string{"br, gzip;q=0.8"}, true},
		{[]string{"gzip;q=0"}, false},
		{[]string{"gzip; q=0.000"}, false},
		{[]string{"deflate, br"}, false},
		{[]string{"identity", "X-GZIP"}, true},
	}
	for _, tt := range tests {
		if got := acceptsGzip(tt.in); got != tt.want {
			t.Errorf("Got(acceptsGzip(%q)) = %v; want %v", tt.in, got, tt.want)
		}
	}
}

// BenchmarkScrub: scrubbing a 1 MiB body of text for 20 secrets (each in
// its forms), against copying it.
func BenchmarkScrub(b *testing.B) {
	var pats [][]pattern
	for i := range 20 {
		pats = append(pats, secretPatterns("S", strings.Repeat(string(rune('a'+i)), 4)+"_RealValue_0123456789abcdef", testPH))
	}
	m := newMatcher(pats...)
	line := "{\"id\": 12345, \"name\": \"some repository\", \"url\": \"https://api.example.com/repos/acme/app\"},\n"
	body := []byte(strings.Repeat(line, (1<<20)/len(line)))
	b.Run("scrub", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			io.Copy(io.Discard, newScrubReader(&chunkReader{b: body, n: 32 << 10}, m, func(string) {}, nil))
		}
	})
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			io.Copy(io.Discard, &chunkReader{b: body, n: 32 << 10})
		}
	})
}
