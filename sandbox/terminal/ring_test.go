package terminal

import (
	"bytes"
	"fmt"
	"testing"
)

func TestRing(t *testing.T) {
	stream := []byte("abcdefghijklmnopqrstuvwxyz0123456789")
	tests := []struct {
		name      string
		size      int
		writes    []int // lengths of successive writes of stream
		off       int64
		want      string
		wantStart int64
	}{
		{"empty", 8, nil, 0, "", 0},
		{"all held", 8, []int{5}, 0, "abcde", 0},
		{"from the middle", 8, []int{5}, 2, "cde", 2},
		{"wrapped", 8, []int{5, 5}, 2, "cdefghij", 2},
		{"overwritten: from the oldest held", 8, []int{5, 5}, 0, "cdefghij", 2},
		{"write larger than the ring", 8, []int{3, 20}, 0, "pqrstuvw", 15},
		{"beyond the end", 8, []int{5}, 99, "", 5},
		{"at the end", 8, []int{5, 3}, 8, "", 8},
		{"many small writes", 4, []int{1, 1, 1, 1, 1, 1, 1}, 3, "defg", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(tt.size)
			pos := 0
			for _, n := range tt.writes {
				r.write(stream[pos : pos+n])
				pos += n
			}
			got, start := r.since(tt.off)
			if string(got) != tt.want || start != tt.wantStart {
				t.Errorf("Got(since(%d)) = %q from %d; want %q from %d", tt.off, got, start, tt.want, tt.wantStart)
			}
		})
	}
}

// TestRingMatchesStream writes a long stream in uneven pieces and checks
// every offset still held against the stream itself.
func TestRingMatchesStream(t *testing.T) {
	var stream bytes.Buffer
	for i := 0; stream.Len() < 5000; i++ {
		fmt.Fprintf(&stream, "line %d\n", i)
	}
	r := newRing(1000)
	b := stream.Bytes()
	for pos, n := 0, 1; pos < len(b); pos, n = pos+n, n%97+13 {
		r.write(b[pos:min(pos+n, len(b))])
	}
	for off := r.start(); off <= r.end; off += 37 {
		got, start := r.since(off)
		if start != off || !bytes.Equal(got, b[off:]) {
			t.Fatalf("Got(since(%d)) = %d bytes from %d; want the stream's %d bytes from %d", off, len(got), start, len(b[off:]), off)
		}
	}
}

func TestSplitUTF8(t *testing.T) {
	check := "✓" // 3 bytes
	tests := []struct {
		in, whole, rest string
	}{
		{"abc", "abc", ""},
		{"ab" + check[:1], "ab", check[:1]},
		{"ab" + check[:2], "ab", check[:2]},
		{"ab" + check, "ab" + check, ""},
		{"\xff", "\xff", ""},
		{"", "", ""},
	}
	for _, tt := range tests {
		w, r := splitUTF8([]byte(tt.in))
		if string(w) != tt.whole || string(r) != tt.rest {
			t.Errorf("Got(splitUTF8(%q)) = %q, %q; want %q, %q", tt.in, w, r, tt.whole, tt.rest)
		}
	}
}
