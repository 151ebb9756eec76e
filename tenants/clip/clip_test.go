package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"fits", "short", 10, "short"},
		{"exact", "12345", 5, "12345"},
		{"cut with the mark inside the bound", "123456789", 6, "123…"},
		{"cut after a whole rune", "ab€€€", 8, "ab€…"},
		{"cut before a split rune", "ab€€€", 7, "ab…"},
		{"invalid bytes replaced", "a\xffb", 10, "a\uFFFDb"},
		{"bound under the mark", "123456", 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := String(tc.in, tc.n)
			if got != tc.want {
				t.Errorf("Got(String(%q, %d)) = %q; want %q", tc.in, tc.n, got, tc.want)
			}
			if len(got) > tc.n || !utf8.ValidString(got) {
				t.Errorf("Got(String(%q, %d)) = %q (%d bytes, valid %v); want at most %d valid bytes", tc.in, tc.n, got, len(got), utf8.ValidString(got), tc.n)
			}
		})
	}
	if got := String(strings.Repeat("é", 300), 500); len(got) > 500 || !strings.HasSuffix(got, Mark) {
		t.Errorf("Got(len(String(300 é, 500))) = %d; want at most 500, marked", len(got))
	}
}
